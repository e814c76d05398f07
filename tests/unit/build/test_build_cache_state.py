"""The analysis cache's keys: content keys of files and folders, the request key, sources."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import rbs.build.state
from rbs.build.driver import analysis_sources
from rbs.build.state import (
    content_key,
    load_cached_analysis_with_deps,
    request_key,
    save_analysis,
)


def test_content_key_follows_bytes_and_folder_names_not_stat(tmp_path: Path) -> None:
    f = tmp_path / "BUILD"
    f.write_text("a\n")
    before = content_key(f)
    os.utime(f, ns=(1, 1))
    assert content_key(f) == before
    f.write_text("b\n")
    assert content_key(f) != before
    d = tmp_path / "d"
    d.mkdir()
    empty = content_key(d)
    (d / "x").write_text("")
    with_x = content_key(d)
    assert with_x != empty and with_x != content_key(f)
    (d / "x").write_text("other bytes")  # a folder's key is its names only
    assert content_key(d) == with_x
    (d / "x").unlink()
    (d / "x").mkdir()  # a file that became a folder is a change
    assert content_key(d) not in (with_x, empty)
    assert content_key(tmp_path / "missing") is None


def test_a_cached_analysis_survives_touch_and_misses_an_edit(tmp_path: Path) -> None:
    (tmp_path / "BUILD").write_text("x = 1\n")
    (tmp_path / "pkg").mkdir()
    save_analysis(tmp_path, "req", ["pkg", "BUILD"], "payload")
    assert load_cached_analysis_with_deps(tmp_path, "req") == (["BUILD", "pkg"], "payload")
    st = (tmp_path / "BUILD").stat()
    os.utime(tmp_path / "BUILD", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert load_cached_analysis_with_deps(tmp_path, "req") is not None
    (tmp_path / "BUILD").write_text("x = 2\n")
    assert load_cached_analysis_with_deps(tmp_path, "req") is None


def test_a_new_entry_in_a_read_folder_misses(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    save_analysis(tmp_path, "req", ["pkg"], "payload")
    assert load_cached_analysis_with_deps(tmp_path, "req") is not None
    (tmp_path / "pkg/new.txt").write_text("")
    assert load_cached_analysis_with_deps(tmp_path, "req") is None


def test_the_request_key_names_the_rbs_version(monkeypatch: pytest.MonkeyPatch) -> None:
    key = request_key(["//..."], "", "build")
    assert request_key(["//..."], "", "build") == key
    monkeypatch.setattr(rbs.build.state, "__version__", "0.0.0-other")
    assert request_key(["//..."], "", "build") != key


def test_the_analysis_depends_on_every_build_module_and_starlark_file() -> None:
    here = Path(rbs.build.state.__file__).resolve().parent
    names = {Path(p).name for p in analysis_sources()}
    want = {p.name for p in here.iterdir() if p.suffix in (".py", ".rbs")}
    assert names == want
    assert {"loader.py", "analysis.py", "prelude.rbs", "compat.rbs", "workspace.py"} <= names
