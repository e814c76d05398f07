"""Tool configurations beside live Bazel 4.2.3: outputs that embed a tool's path
(`$(execpath)`, `File.path`, `$(BINDIR)` in the host configuration) are byte-identical."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FILES = {
    "WORKSPACE": "",
    "pkg/defs.bzl": (
        "def _impl(ctx):\n"
        "    out = ctx.actions.declare_file(ctx.label.name + '.txt')\n"
        "    t = ctx.executable.tool\n"
        "    ctx.actions.run_shell(outputs = [out], tools = [t],\n"
        "        command = 'echo %s %s %s > %s; %s >> %s' % (t.path, t.short_path, t.root.path, out.path, t.path, out.path))\n"
        "    return [DefaultInfo(files = depset([out]))]\n"
        "show = rule(implementation = _impl, attrs = {'tool': attr.label(executable = True, cfg = 'exec')})\n"
    ),
    "pkg/BUILD": (
        'load(":defs.bzl", "show")\n'
        'genrule(name = "gen", outs = ["gen.txt"], cmd = "echo $(COMPILATION_MODE) $(BINDIR) > $@")\n'
        'genrule(name = "tool", srcs = [":gen.txt"], outs = ["tool.sh"], executable = True,\n'
        "        cmd = \"(echo '#!/bin/sh'; echo 'echo tool'; echo 'echo $(location :gen.txt)') > $@\")\n"
        'genrule(name = "use", outs = ["use.txt"], tools = [":tool"],\n'
        '        cmd = "echo $(execpath :tool) $(location :tool) > $@; $(execpath :tool) >> $@")\n'
        'show(name = "s", tool = ":tool")\n'
    ),
}
OUTPUTS = ("pkg/use.txt", "pkg/s.txt")


@pytest.mark.bazel
@pytest.mark.timeout(300)
def test_tool_paths_are_byte_identical_to_bazels(tmp_path: Path) -> None:
    bazel = shutil.which("bazel")
    if bazel is None:
        pytest.skip("bazel is not installed (make test installs Debian's bazel-bootstrap)")
    ws = tmp_path / "ws"
    for rel, text in FILES.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)
    root = [f"--output_user_root={tmp_path / 'bazel-root'}", "--max_idle_secs=60"]
    try:
        res = subprocess.run(
            [
                bazel,
                *root,
                "build",
                "--experimental_repository_disable_download",
                "--incompatible_strict_action_env",
                "//pkg:use",
                "//pkg:s",
            ],
            cwd=ws,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert res.returncode == 0, res.stderr[-3000:]
        bazel_bin = Path(
            subprocess.run(
                [bazel, *root, "info", "bazel-bin"],
                cwd=ws,
                capture_output=True,
                text=True,
                check=True,
                timeout=120,
            ).stdout.strip()
        )
        want = {rel: (bazel_bin / rel).read_bytes() for rel in OUTPUTS}
    finally:
        subprocess.run(
            [bazel, *root, "shutdown"], cwd=ws, capture_output=True, timeout=120, check=False
        )
    r = subprocess.run(
        [sys.executable, "-m", "rbs", "build", "--plain", "//pkg:use", "//pkg:s"],
        cwd=ws,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    for rel in OUTPUTS:
        assert (ws / "rbs-out/bin" / rel).read_bytes() == want[rel], rel
    # The paths themselves, as Bazel 4.2.3 writes them:
    assert want["pkg/use.txt"].startswith(b"bazel-out/host/bin/pkg/tool.sh ")
    assert want["pkg/s.txt"].startswith(b"bazel-out/k8-opt-exec-2B5CBBC6/bin/pkg/tool.sh ")
