"""Execution: real outputs, sandboxing, caches, incremental rebuilds, tests."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from rbs.build.driver import BuildOptions, BuildResult, run_build

MakeWs = Callable[[dict[str, str]], Path]
OPTS = BuildOptions(jobs=2)

CHAIN = {
    "pkg/a.txt": "alpha\n",
    "pkg/d.txt": "delta\n",
    "pkg/other.txt": "not declared\n",
    "pkg/BUILD": (
        'genrule(name = "a", srcs = ["a.txt"], outs = ["a.out"], cmd = "tr a-z A-Z < $< > $@")\n'
        'genrule(name = "b", srcs = [":a.out"], outs = ["b.out"], cmd = "cat $< $< > $@")\n'
        'genrule(name = "c", srcs = [":b.out"], outs = ["c.out"], cmd = "wc -l < $< > $@")\n'
        'genrule(name = "d", srcs = ["d.txt"], outs = ["d.out"], cmd = "cp $< $@")\n'
    ),
}


def build(root: Path, *patterns: str, mode: str = "build", keep_going: bool = False) -> BuildResult:
    opts = BuildOptions(jobs=2, keep_going=keep_going)
    return run_build(root, patterns or ("//...",), options=opts, mode=mode)


def out(root: Path, rel: str) -> str:
    return (root / "rbs-out/bin" / rel).read_text()


def test_outputs_land_in_rbs_out_and_action_cache(make_ws: MakeWs) -> None:
    root = make_ws(CHAIN)
    r = build(root)
    assert r.ok and r.report.executed == 4
    assert out(root, "pkg/a.out") == "ALPHA\n"
    assert out(root, "pkg/b.out") == "ALPHA\nALPHA\n"
    assert out(root, "pkg/c.out").strip() == "2"
    # Every executed action is a REAPI Action whose digest keys the local action cache.
    from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2

    entries = [
        p for p in (root / ".rbs/ac").rglob("*") if p.is_file() and not p.name.startswith(".")
    ]
    assert len(entries) == 4
    ar = re_pb2.ActionResult()
    ar.ParseFromString(entries[0].read_bytes())
    assert ar.exit_code == 0 and len(ar.output_files) == 1


def test_noop_then_edit_reruns_only_dependents(make_ws: MakeWs) -> None:
    root = make_ws(CHAIN)
    assert build(root).report.executed == 4
    again = build(root)
    assert again.up_to_date and again.report.executed == 0
    (root / "pkg/a.txt").write_text("beta\n")
    r = build(root)
    assert r.ok and not r.up_to_date
    assert r.report.executed == 3 and r.report.memo_hits == 1  # a, b, c rerun; d does not
    assert r.report.hashed == 1  # only the edited file was read
    assert out(root, "pkg/b.out") == "BETA\nBETA\n"


def test_early_cutoff_stops_the_rebuild(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "pkg/a.txt": "alpha\n",
            "pkg/BUILD": (
                'genrule(name = "a", srcs = ["a.txt"], outs = ["a.out"], cmd = "tr a-z A-Z < $< > $@")\n'
                'genrule(name = "n", srcs = [":a.out"], outs = ["n.out"], cmd = "wc -l < $< > $@")\n'
                'genrule(name = "top", srcs = [":n.out"], outs = ["top.out"], cmd = "cat $< $< > $@")\n'
            ),
        }
    )
    build(root)
    (root / "pkg/a.txt").write_text("gamma\n")  # a.out changes; n.out (a line count) does not
    r = build(root)
    assert r.report.executed == 2 and r.report.memo_hits == 1  # top is cut off
    assert out(root, "pkg/a.out") == "GAMMA\n"


def test_action_cache_serves_a_clean_output_tree(make_ws: MakeWs) -> None:
    root = make_ws(CHAIN)
    build(root)
    subprocess.run(["rm", "-rf", str(root / "rbs-out"), str(root / ".rbs/state")], check=True)
    r = build(root)
    assert r.ok and r.report.executed == 0 and r.report.cache_hits == 4
    assert out(root, "pkg/c.out").strip() == "2"


def test_sandbox_holds_only_declared_inputs(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "pkg/a.txt": "x",
            "pkg/other.txt": "y",
            "pkg/BUILD": (
                'genrule(name = "g", srcs = ["a.txt"], outs = ["seen.txt"],\n'
                '        cmd = "ls -R . > $@; env | sort >> $@")\n'
            ),
        }
    )
    assert build(root).ok
    seen = out(root, "pkg/seen.txt")
    assert "a.txt" in seen and "other.txt" not in seen and "BUILD" not in seen
    assert "PATH=/bin:/usr/bin:/usr/local/bin" in seen and "HOME=" not in seen


def test_missing_output_is_named(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "pkg/BUILD": 'genrule(name = "g", outs = ["x.txt", "y.txt"], cmd = "touch $(location x.txt)")\n'
        }
    )
    r = build(root)
    assert not r.ok
    (f,) = r.report.failures
    assert "did not create its declared output(s): y.txt" in f.message


def test_failing_action_reports_command_exit_code_and_stderr(make_ws: MakeWs) -> None:
    root = make_ws(
        {"pkg/BUILD": 'genrule(name = "g", outs = ["x"], cmd = "echo oops >&2; exit 7")\n'}
    )
    r = build(root)
    (f,) = r.report.failures
    assert "exit code 7" in f.message and "oops" in f.message and "exit 7" in f.message
    assert str(f.spec.owner) == "//pkg:g"
    assert not (root / "rbs-out/bin/pkg/x").exists()
    assert not build(root).up_to_date  # a failed build never records a no-op


def test_keep_going_builds_what_it_can(make_ws: MakeWs) -> None:
    files = dict(CHAIN)
    files["bad/BUILD"] = 'genrule(name = "bad", outs = ["x"], cmd = "exit 1")\n'
    root = make_ws(files)
    r = build(root, keep_going=True)
    assert len(r.report.failures) == 1 and r.report.executed == 4
    assert out(root, "pkg/c.out").strip() == "2"


def test_user_edit_of_an_output_is_repaired(make_ws: MakeWs) -> None:
    root = make_ws(CHAIN)
    build(root)
    p = root / "rbs-out/bin/pkg/d.out"
    os.chmod(p, 0o644)
    p.unlink()
    p.write_text("tampered\n")
    r = build(root)
    assert r.ok and out(root, "pkg/d.out") == "delta\n"


def test_py_binary_runs_from_its_runfiles(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "app/BUILD": (
                'py_library(name = "lib", srcs = ["greet.py"], data = ["name.txt"])\n'
                'py_binary(name = "hello", srcs = ["hello.py"], deps = [":lib"])\n'
            ),
            "app/greet.py": (
                "import os\n"
                "def greet():\n"
                "    d = os.path.join(os.environ['RUNFILES_DIR'], '__main__', 'app', 'name.txt')\n"
                "    return 'hello ' + open(d).read().strip()\n"
            ),
            "app/hello.py": "import sys\nfrom app.greet import greet\nprint(greet(), *sys.argv[1:])\n",
            "app/name.txt": "world\n",
        }
    )
    assert build(root, "//app:hello").ok
    exe = root / "rbs-out/bin/app/hello"
    res = subprocess.run([str(exe), "x"], capture_output=True, text=True, check=True, timeout=60)
    assert res.stdout == "hello world x\n"


def test_tests_pass_fail_and_cache(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "t/BUILD": (
                'sh_test(name = "good", srcs = ["good.sh"], data = ["data.txt"])\n'
                'sh_test(name = "bad", srcs = ["bad.sh"])\n'
                'py_test(name = "py", srcs = ["py_test.py"])\n'
            ),
            "t/good.sh": '#!/bin/bash\nset -e\ngrep -q ok t/data.txt\ntest -d "$TEST_TMPDIR"\n',
            "t/bad.sh": "#!/bin/bash\necho 'expected 1, got 2'\nexit 1\n",
            "t/py_test.py": "assert 1 + 1 == 2\n",
            "t/data.txt": "ok\n",
        }
    )
    for name in ("good.sh", "bad.sh"):
        os.chmod(root / "t" / name, 0o755)
    r = build(root, mode="test")
    assert r.graph is not None
    by_owner = {str(r.graph.actions[i].owner): v for i, v in r.report.tests.items()}
    assert by_owner["//t:good"][0] == 0 and by_owner["//t:py"][0] == 0
    assert by_owner["//t:bad"][0] == 1 and b"expected 1, got 2" in by_owner["//t:bad"][2]
    again = build(root, mode="test")
    assert again.graph is not None
    cached = {str(again.graph.actions[i].owner): v[1] for i, v in again.report.tests.items()}
    assert cached == {"//t:good": True, "//t:py": True, "//t:bad": False}


@pytest.mark.parametrize("jobs", [1, 2])
def test_parallel_and_serial_builds_agree(make_ws: MakeWs, jobs: int) -> None:
    files = {
        "pkg/BUILD": "".join(
            f'genrule(name = "g{i}", outs = ["o{i}"], cmd = "echo {i} > $@")\n' for i in range(12)
        )
    }
    root = make_ws(files)
    r = run_build(root, ["//..."], options=BuildOptions(jobs=jobs))
    assert r.ok and r.report.executed == 12
    assert [out(root, f"pkg/o{i}").strip() for i in range(12)] == [str(i) for i in range(12)]


def test_new_file_in_a_globbed_subfolder_is_seen(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "pkg/BUILD": 'genrule(name = "all", srcs = glob(["**/*.txt"]), outs = ["all.out"], cmd = "cat $(SRCS) > $@")\n',
            "pkg/d/a.txt": "a\n",
        }
    )
    assert build(root, "//pkg:all").ok
    (root / "pkg/d/b.txt").write_text("b\n")
    r = build(root, "//pkg:all")
    assert not r.analysis_cached and out(root, "pkg/all.out") == "a\nb\n"


def test_noop_in_a_fresh_process_loads_no_starlark_protobuf_or_store(make_ws: MakeWs) -> None:
    import sys

    root = make_ws(CHAIN)
    code = (
        "import sys; from pathlib import Path\n"
        "from rbs.build.driver import BuildOptions, run_build\n"
        f"r = run_build(Path({str(root)!r}), ['//...'], options=BuildOptions(jobs=2))\n"
        "heavy = [m for m in ('starlark', 'google.protobuf', 'rbs.cas.disk') if m in sys.modules]\n"
        "print(r.up_to_date, r.report.executed, heavy)\n"
    )

    def fresh() -> str:
        res = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
        )
        return res.stdout.strip()

    assert fresh().startswith("False 4")
    assert fresh() == "True 0 []"


def test_a_test_over_its_time_limit_is_killed(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "t/BUILD": 'sh_test(name = "slow", srcs = ["slow.sh"], size = "small")\n',
            "t/slow.sh": "#!/bin/bash\nsleep 60 &\nwait\n",
        }
    )
    os.chmod(root / "t/slow.sh", 0o755)
    r = run_build(root, ["//t:slow"], options=BuildOptions(jobs=2, test_timeout=1), mode="test")
    ((code, cached, log),) = r.report.tests.values()
    from rbs.build.runner import TIMEOUT_EXIT

    assert code == TIMEOUT_EXIT and not cached and b"time limit" in log


def test_executable_genrule_output_can_be_run(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "g/BUILD": (
                'genrule(name = "script", outs = ["hi.sh"], executable = True,\n'
                "        cmd = \"printf '#!/bin/sh\\\\necho hi\\\\n' > $@\")\n"
                'genrule(name = "use", outs = ["out.txt"], tools = [":script"], cmd = "$(location :script) > $@")\n'
            )
        }
    )
    r = build(root)
    assert r.ok, r.report.failures
    assert os.access(root / "rbs-out/bin/g/hi.sh", os.X_OK)
    assert out(root, "g/out.txt") == "hi\n"


def test_custom_rule_runs_a_py_binary_tool_with_args(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "tools/BUILD": 'py_binary(name = "upper", srcs = ["upper.py"], deps = [":util"])\npy_library(name = "util", srcs = ["util.py"])\n',
            "tools/util.py": "def shout(s):\n    return s.upper()\n",
            "tools/upper.py": (
                "import sys\nfrom tools.util import shout\n"
                "src, dst = sys.argv[1], sys.argv[2]\n"
                "open(dst, 'w').write(shout(open(src).read()))\n"
            ),
            "defs/BUILD": "",
            "defs/upper.rbs": (
                "def _impl(ctx):\n"
                '    out = ctx.actions.declare_file(ctx.label.name + ".txt")\n'
                "    args = ctx.actions.args()\n"
                "    args.add(ctx.file.src)\n"
                "    args.add(out)\n"
                "    ctx.actions.run(executable = ctx.executable._tool, arguments = [args],\n"
                '                    inputs = [ctx.file.src], outputs = [out], mnemonic = "Upper")\n'
                "    return [DefaultInfo(files = depset([out]))]\n"
                "upper = rule(implementation = _impl, attrs = {\n"
                '    "src": attr.label(allow_single_file = True),\n'
                '    "_tool": attr.label(default = "//tools:upper", executable = True, cfg = "exec"),\n'
                "})\n"
            ),
            "p/BUILD": 'load("//defs:upper.rbs", "upper")\nupper(name = "u", src = "in.txt")\n',
            "p/in.txt": "quiet words\n",
        }
    )
    r = build(root, "//p:u")
    assert r.ok, r.report.failures
    assert out(root, "p/u.txt") == "QUIET WORDS\n"


def test_a_reused_sandbox_shows_nothing_of_the_previous_action(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "p/BUILD": (
                'genrule(name = "a", outs = ["a.txt"],\n'
                '        cmd = "touch stray.txt $(@D)/stray2.txt $$TMPDIR/tmpfile; mkdir -p strays/x $(@D)/d; echo a > $@")\n'
                'genrule(name = "b", srcs = [":a.txt"], outs = ["b.txt"],\n'
                '        cmd = "find . | sort > $@; ls -A $$TMPDIR >> $@")\n'
            )
        }
    )
    r = run_build(root, ["//p:b"], options=BuildOptions(jobs=1))
    assert r.ok, r.report.failures
    listing = out(root, "p/b.txt").split()
    assert "./bazel-out/k8-fastbuild/bin/p/a.txt" in listing
    assert not [x for x in listing if "stray" in x or "tmpfile" in x or x.endswith("/d")], listing


def test_inputs_evicted_from_the_store_come_back_from_rbs_out(make_ws: MakeWs) -> None:
    import shutil

    root = make_ws(
        {
            "p/a.txt": "a\n",
            "p/extra.txt": "1\n",
            "p/BUILD": (
                'genrule(name = "a", srcs = ["a.txt"], outs = ["a.out"], cmd = "cp $< $@")\n'
                'genrule(name = "b", srcs = [":a.out", "extra.txt"], outs = ["b.out"], cmd = "cat $(SRCS) > $@")\n'
            ),
        }
    )
    assert build(root).ok
    shutil.rmtree(root / ".rbs/cas")  # as if the store had evicted every blob
    (root / "p/extra.txt").write_text("2\n")  # b reruns; a is unchanged, its blob gone
    r = build(root)
    assert r.ok, r.report.failures
    assert r.report.executed == 1 and out(root, "p/b.out") == "a\n2\n"
