"""The persisted loading and analysis cache: each change invalidates what it must, never less."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from rbs.build.backend import may_link_outputs
from rbs.build.driver import BuildOptions, BuildResult, run_build
from rbs.build.select import BuildConfig

MakeWs = Callable[[dict[str, str]], Path]

FILES = {
    "defs.bzl": 'SUFFIX = "one"\n',
    "a/BUILD": (
        'load("//:defs.bzl", "SUFFIX")\n'
        'genrule(name = "a", srcs = glob(["*.txt"]), outs = ["a.out"],\n'
        '        cmd = "cat $(SRCS) > $@ && echo " + SUFFIX + " >> $@")\n'
    ),
    "a/x.txt": "x\n",
    "b/BUILD": (
        'config_setting(name = "fast", define_values = {"mode": "fast"})\n'
        'genrule(name = "b", srcs = ["//a:a.out"], outs = ["b.out"],\n'
        '        cmd = select({":fast": "echo fast > $@", "//conditions:default": "cp $< $@"}))\n'
    ),
}


def build(root: Path, *patterns: str, defines: dict[str, str] | None = None) -> BuildResult:
    config = BuildConfig(defines=tuple((defines or {}).items()))
    return run_build(root, patterns or ("//...",), options=BuildOptions(jobs=2, config=config))


def out(root: Path, rel: str) -> str:
    return (root / "rbs-out/bin" / rel).read_text()


def labels(r: BuildResult) -> list[str]:
    return sorted(str(x) for x in r.labels)


@pytest.fixture
def root(make_ws: MakeWs) -> Path:
    root = make_ws(FILES)
    first = build(root)
    assert first.ok and not first.analysis_cached and out(root, "b/b.out") == "x\none\n"
    assert build(root).up_to_date
    return root


def test_an_unchanged_workspace_reuses_the_analysis_when_an_output_is_gone(root: Path) -> None:
    (root / "rbs-out/bin/b/b.out").unlink()  # not a no-op, but nothing Starlark read changed
    r = build(root)
    assert r.ok and r.analysis_cached and out(root, "b/b.out") == "x\none\n"


def test_an_edited_build_file_is_analysed_again(root: Path) -> None:
    text = (root / "a/BUILD").read_text().replace('echo " + SUFFIX', 'echo edited " + SUFFIX')
    (root / "a/BUILD").write_text(text)
    r = build(root)
    assert r.ok and not r.analysis_cached and out(root, "b/b.out") == "x\nedited one\n"


def test_an_edited_bzl_file_is_analysed_again(root: Path) -> None:
    (root / "defs.bzl").write_text('SUFFIX = "two"\n')
    r = build(root)
    assert r.ok and not r.analysis_cached and out(root, "b/b.out") == "x\ntwo\n"


def test_a_touched_but_equal_build_file_keeps_the_analysis(root: Path) -> None:
    path = root / "a/BUILD"
    path.write_text(path.read_text())  # new mtime and ctime, same bytes
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    r = build(root)
    assert r.ok and r.analysis_cached and r.report.executed == 0
    assert out(root, "b/b.out") == "x\none\n"


def test_a_changed_define_selects_again_and_each_config_keeps_its_own(root: Path) -> None:
    fast = build(root, defines={"mode": "fast"})
    assert fast.ok and not fast.analysis_cached and out(root, "b/b.out") == "fast\n"
    plain = build(root)
    assert plain.ok and plain.analysis_cached and out(root, "b/b.out") == "x\none\n"
    again = build(root, defines={"mode": "fast"})
    assert again.ok and again.analysis_cached and out(root, "b/b.out") == "fast\n"
    other = build(root, defines={"mode": "slow"})
    assert other.ok and not other.analysis_cached and out(root, "b/b.out") == "x\none\n"


def test_a_new_file_matched_by_a_glob_is_seen(root: Path) -> None:
    (root / "a/y.txt").write_text("y\n")
    r = build(root)
    assert r.ok and not r.analysis_cached and out(root, "b/b.out") == "x\ny\none\n"


def test_a_new_file_no_glob_matches_keeps_the_graph_correct(root: Path) -> None:
    (root / "a/notes.md").write_text("not a source\n")
    r = build(root)
    assert r.ok and out(root, "b/b.out") == "x\none\n"


def test_a_deleted_package_leaves_the_pattern_and_its_dependents_fail(root: Path) -> None:
    (root / "c").mkdir()
    (root / "c/BUILD").write_text('genrule(name = "c", outs = ["c.out"], cmd = "echo c > $@")\n')
    assert labels(build(root)) == ["//a:a", "//b:b", "//b:fast", "//c:c"]
    shutil.rmtree(root / "c")
    r = build(root)
    assert r.ok and not r.analysis_cached and labels(r) == ["//a:a", "//b:b", "//b:fast"]
    shutil.rmtree(root / "a")
    from rbs.build.errors import BuildError

    with pytest.raises(BuildError, match="//a"):
        build(root, "//b:b")


def test_a_changed_rbs_version_reuses_no_graph_and_no_noop_record(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rbs.build.state

    monkeypatch.setattr(rbs.build.state, "__version__", "999.0.0")
    r = build(root)
    assert r.ok and not r.up_to_date and not r.analysis_cached
    assert r.report.executed == 0 and out(root, "b/b.out") == "x\none\n"
    assert build(root).up_to_date


@pytest.mark.parametrize("garbage", [b"", b"\x80\x05not a pickle", b"\x80\x04\x95" + bytes(64)])
def test_a_corrupt_cache_file_is_ignored_and_rebuilt(root: Path, garbage: bytes) -> None:
    state = root / ".rbs/state"
    files = sorted(state.glob("*.pickle"))
    assert any(p.name.startswith("analysis-") for p in files)
    for p in files:
        p.write_bytes(garbage)
    r = build(root)
    assert r.ok and not r.up_to_date and not r.analysis_cached
    assert out(root, "b/b.out") == "x\none\n"
    assert build(root).up_to_date
    (root / "rbs-out/bin/b/b.out").unlink()
    assert build(root).analysis_cached


def test_a_cache_file_of_the_wrong_shape_is_ignored(root: Path) -> None:
    import pickle

    from rbs.build.state import FORMAT

    for p in (root / ".rbs/state").glob("*.pickle"):
        p.write_bytes(pickle.dumps({"format": FORMAT, "value": (("x", 1), ["not", "a graph"])}))
    r = build(root)
    assert r.ok and not r.analysis_cached and out(root, "b/b.out") == "x\none\n"


def test_an_output_whose_blob_the_store_refreshed_is_still_unchanged(root: Path) -> None:
    # The store moves a blob's mtime forward when it serves it (its eviction lease), and
    # a published output is a hardlink of that blob: same inode, same bytes, new mtime.
    p = root / "rbs-out/bin/a/a.out"
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 120 * 10**9))
    r = build(root)
    assert r.ok and not r.up_to_date and r.analysis_cached
    assert (r.report.memo_hits, r.report.cache_hits, r.report.executed) == (2, 0, 0)
    assert build(root).up_to_date


def test_an_output_edited_in_place_is_not_taken_for_a_refreshed_one(root: Path) -> None:
    p = root / "rbs-out/bin/a/a.out"
    good = p.read_bytes()
    os.chmod(p, 0o644)
    with open(p, "r+b") as f:  # same inode, same size, other bytes
        f.write(b"X" * len(good))
    r = build(root)
    if may_link_outputs():
        # The edit reached the store's blob through the hardlink: that build names the
        # corrupt blob and takes nothing as unchanged; the next one brings the bytes back.
        assert r.report.memo_hits == 0 and not r.up_to_date
        assert r.ok or any("corrupt" in f.message for f in r.report.failures)
    else:
        # As root the output is a copy: the store's blob is intact, so only a's action
        # misses its memo, the action cache serves it, and b is unchanged.
        assert r.ok and not r.up_to_date
        assert (r.report.memo_hits, r.report.cache_hits, r.report.executed) == (1, 1, 0)
    again = build(root)
    assert again.ok and p.read_bytes() == good and out(root, "b/b.out") == "x\none\n"
