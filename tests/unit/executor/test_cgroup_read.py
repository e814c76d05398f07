"""Reading cgroup files that a kernel may not have: one open, None when missing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rbs.executor.cgroup_base import CgroupError, CgroupFs, parse_keyed, read_int


def test_read_if_there_gives_the_text_or_none(tmp_path: Path) -> None:
    fs = CgroupFs()
    (tmp_path / "memory.peak").write_text("4096\n")
    assert fs.read_if_there(tmp_path / "memory.peak") == "4096\n"
    assert fs.read_if_there(tmp_path / "memory.events") is None
    assert fs.read_if_there(tmp_path / "gone" / "cpu.stat") is None  # a removed group
    assert read_int(fs, tmp_path / "memory.peak") == 4096
    assert read_int(fs, tmp_path / "memory.swap.peak") is None


def test_read_if_there_reports_other_errors(tmp_path: Path) -> None:
    (tmp_path / "group").mkdir()
    with pytest.raises(CgroupError, match="cannot read"):
        CgroupFs().read_if_there(tmp_path / "group")  # a folder, not a file: EISDIR


def test_parse_keyed_of_a_missing_file_is_empty() -> None:
    assert parse_keyed(None) == {}
    assert parse_keyed("usage_usec 12\nnr_periods 0\nbad line here\n") == {
        "usage_usec": 12,
        "nr_periods": 0,
    }


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_files_stay_open_across_jobs_until_their_group_is_removed(tmp_path: Path) -> None:
    fs = CgroupFs()
    group = tmp_path / "run-1"
    group.mkdir()
    (group / "cpu.stat").write_text("usage_usec 1\n")
    (group / "tasks").write_text("")
    before = _open_fds()
    for n in range(3):  # the same few files, job after job: no new fd after the first
        fs.write(group / "tasks", "0")
        (group / "cpu.stat").write_text(f"usage_usec {n + 2}\n")
        assert fs.read(group / "cpu.stat") == f"usage_usec {n + 2}\n"  # read afresh
        assert _open_fds() == before + 2
    (tmp_path / "run-10").mkdir()
    fs.rmdir(tmp_path / "run-10")
    assert _open_fds() == before + 2  # another group's removal keeps them
    for f in group.iterdir():
        f.unlink()
    fs.rmdir(group)
    assert _open_fds() == before and not group.exists()
