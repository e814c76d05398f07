"""Record the outputs Bazel builds for each workspace of the compatibility corpus.

Usage: .venv/bin/python scripts/record_bazel_goldens.py [WORKSPACE_DIR ...]

For every workspace under tests/fixtures/corpus/ (or the ones named), this copies the
workspace to a scratch folder, builds `//...` there with the installed `bazel` (Debian's
Bazel 4.2.3, offline), asks `bazel aquery` which files the actions wrote, and records
each file's SHA-256, size and executable bit in tests/fixtures/corpus/goldens.json.

Bazel 4.2.3 has no bzlmod and cannot fetch rule sets offline, so the copy (never the
vendored files) gets a WORKSPACE that keeps only the original's `workspace()` name and maps
`@rules_shell`, `@rules_python` and `@rules_cc` to small local repositories re-exporting
Bazel's native rules, and no
.bazelrc (its `common --enable_bzlmod` is unknown to Bazel 4.2.3). Targets Bazel
cannot build (a C++ toolchain, a newer API) fail under --keep_going and are simply
not recorded; tests/integration/build/test_corpus.py says which pieces it compares
with reviewed expectations instead.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "corpus"
GOLDENS = CORPUS / "goldens.json"
# Action kinds whose outputs are Bazel's own bookkeeping, not files a rule asked for.
SKIP_MNEMONICS = {"SymlinkTree", "SourceSymlinkManifest", "Middleman", "TestRunner"}

STUBS = {
    "rules_shell": {
        "shell/BUILD": "",
        "shell/sh_binary.bzl": "sh_binary = native.sh_binary\n",
        "shell/sh_test.bzl": "sh_test = native.sh_test\n",
        "shell/sh_library.bzl": "sh_library = native.sh_library\n",
    },
    "rules_python": {
        "python/BUILD": "",
        "python/defs.bzl": (
            "py_binary = native.py_binary\npy_library = native.py_library\n"
            "py_test = native.py_test\n"
        ),
    },
    "rules_cc": {
        "cc/BUILD": "",
        "cc/defs.bzl": "cc_binary = native.cc_binary\ncc_library = native.cc_library\n",
        "cc/cc_binary.bzl": "cc_binary = native.cc_binary\n",
        "cc/cc_library.bzl": "cc_library = native.cc_library\n",
    },
}


def _stage(ws: Path, scratch: Path) -> Path:
    copy = scratch / "ws"
    shutil.copytree(ws, copy, ignore=shutil.ignore_patterns("rbs-out", ".rbs", "bazel-*"))
    for name in (".bazelrc", ".bazelversion", "MODULE.bazel"):
        (copy / name).unlink(missing_ok=True)
    # The copy's WORKSPACE keeps only its workspace() name: its http_archive()s cannot
    # be fetched offline (and need a load() Bazel 4.2.3 lacks); the stubs stand in.
    original = (copy / "WORKSPACE").read_text()
    lines = [m.group(0) for m in re.finditer(r"^workspace\(.*\)$", original, re.MULTILINE)]
    for repo, files in STUBS.items():
        root = scratch / "stubs" / repo
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        (root / "WORKSPACE").write_text("")
        lines.append(f'local_repository(name = "{repo}", path = "{root}")')
    (copy / "WORKSPACE").write_text("\n".join(lines) + "\n")
    return copy


def _bazel(scratch: Path, ws: Path, *args: str) -> subprocess.CompletedProcess[str]:
    bazel = shutil.which("bazel")
    assert bazel is not None
    startup = [f"--output_user_root={scratch / 'root'}", "--max_idle_secs=60"]
    env = {**os.environ, "HOME": str(scratch / "home")}
    (scratch / "home").mkdir(exist_ok=True)
    return subprocess.run(
        [bazel, *startup, *args], cwd=ws, env=env, capture_output=True, text=True, timeout=1800
    )


def _outputs(scratch: Path, ws: Path) -> dict[str, str]:
    res = _bazel(scratch, ws, "aquery", "--keep_going", "--output=jsonproto", "//...")
    if not res.stdout.strip():
        sys.exit(f"bazel aquery failed:\n{res.stderr[-3000:]}")
    data = json.loads(res.stdout or "{}")
    frags = {f["id"]: f for f in data.get("pathFragments", [])}

    def path(fid: int) -> str:
        parts = []
        while fid:
            f = frags[fid]
            parts.append(f["label"])
            fid = f.get("parentId", 0)
        return "/".join(reversed(parts))

    arts = {a["id"]: path(a["pathFragmentId"]) for a in data.get("artifacts", [])}
    targets = {t["id"]: t["label"] for t in data.get("targets", [])}
    out: dict[str, str] = {}  # output path -> label of the target whose action writes it
    for action in data.get("actions", []):
        if action.get("mnemonic") in SKIP_MNEMONICS:
            continue
        for i in action.get("outputIds", []):
            out[arts[i]] = targets.get(action.get("targetId", 0), "")
    return dict(sorted(out.items()))


def record(ws: Path) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="rbs-goldens-") as tmp:
        scratch = Path(tmp)
        copy = _stage(ws, scratch)
        try:
            build = _bazel(
                scratch,
                copy,
                "build",
                "--keep_going",
                "--experimental_repository_disable_download",
                "--incompatible_strict_action_env",
                "//...",
            )
            execroot = Path(_bazel(scratch, copy, "info", "execution_root").stdout.strip())
            files: dict[str, dict[str, object]] = {}
            for rel, target in _outputs(scratch, copy).items():
                p = execroot / rel
                if not p.is_file() or not rel.startswith("bazel-out/"):
                    continue  # an action that failed under --keep_going
                data = p.read_bytes()
                files[rel] = {
                    "sha256": hashlib.sha256(data).hexdigest(),
                    "size": len(data),
                    "executable": os.access(p, os.X_OK),
                    "target": target,
                }
            version = _debian_version() or _bazel(scratch, copy, "--version").stdout.strip()
        finally:
            _bazel(scratch, copy, "shutdown")
    # Scratch paths differ on every run: keep the messages comparable across recordings.
    failed = [
        re.sub(r"/\S*?rbs-goldens-[^/]+/(root/[0-9a-f]+/)?", "<scratch>/", line)
        for line in build.stderr.splitlines()
        if line.startswith("ERROR:")
    ]
    return {"bazel": version or "bazel 4.2.3", "outputs": files, "bazel_errors": failed}


def _debian_version() -> str:
    # Debian's bazel-bootstrap answers `bazel --version` with "bazel no_version".
    res = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "bazel-bootstrap"], capture_output=True, text=True
    )
    return f"Debian bazel-bootstrap {res.stdout.strip()}" if res.returncode == 0 else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workspaces", nargs="*", type=Path)
    ns = ap.parse_args()
    if shutil.which("bazel") is None:
        sys.exit("bazel is not installed (make system-deps installs Debian's bazel-bootstrap)")
    wss = ns.workspaces or sorted(p.parent for p in CORPUS.glob("*/WORKSPACE"))
    goldens = json.loads(GOLDENS.read_text()) if GOLDENS.exists() else {}
    for ws in wss:
        name = ws.resolve().name
        print(f"recording {name} ...", flush=True)
        goldens[name] = record(ws.resolve())
        print(f"  {len(goldens[name]['outputs'])} outputs", flush=True)  # type: ignore[arg-type]
    GOLDENS.write_text(json.dumps(goldens, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
