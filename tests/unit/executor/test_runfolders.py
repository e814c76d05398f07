"""runfolders: a done run's untouched folder is emptied and reused; anything else goes."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rbs.cas.memory import MemoryStore
from rbs.executor import jobfiles
from rbs.executor.jobfiles import RunDirs
from rbs.executor.runfolders import FREE_PREFIX, Made, RunFolders


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(1) as p:
        yield p


def _run(folders: RunFolders, root: Path, lease: str) -> RunDirs:
    """A run as the job host makes it: folder, work/ and tmp/, a spool with a line."""
    dirs = RunDirs(root=root / lease)
    made = folders.make(dirs)
    jobfiles.prepare(
        MemoryStore(),
        dirs,
        input_root=None,
        checkpoint=None,
        checkpoint_dir=None,
        fresh=made is Made.NEW,
        made=made is Made.REUSED,
    )
    with open(dirs.spool, "a") as f:
        f.write('{"seq":1}\n')
    return dirs


def test_an_untouched_folder_is_reused_empty_under_the_next_leases_name(
    tmp_path: Path, pool: ThreadPoolExecutor
) -> None:
    root = tmp_path / "jobs"
    root.mkdir()
    folders = RunFolders(root, pool, keep=4)
    first = _run(folders, root, "1.1.0")
    inode = os.stat(first.work).st_ino
    folders.handle([first])
    assert not first.root.exists()
    assert [p.name.startswith(FREE_PREFIX) for p in root.iterdir()] == [True]
    second = RunDirs(root=root / "2.1.0")
    assert folders.make(second) is Made.REUSED
    assert os.stat(second.work).st_ino == inode  # the same folder, renamed
    assert sorted(p.name for p in second.root.iterdir()) == ["log.jsonl", "tmp", "work"]
    assert second.spool.read_bytes() == b""
    assert list(second.work.iterdir()) == [] and list(second.tmp.iterdir()) == []
    assert [p.name for p in root.iterdir()] == ["2.1.0"]


@pytest.mark.parametrize(
    "change",
    [
        lambda d: (d.work / "left").write_text("x"),
        lambda d: (d.tmp / "t").mkdir(),
        lambda d: (d.root / "extra").write_text("x"),
        lambda d: d.work.chmod(0o701),
        lambda d: d.spool.chmod(0o666),
        lambda d: (d.tmp.rmdir(), d.tmp.symlink_to("/")),
        lambda d: (d.spool.unlink(), d.spool.symlink_to(d.root.parent.parent / "other")),
    ],
    ids=["file-in-work", "folder-in-tmp", "extra-file", "mode", "spool-mode", "symlink", "link"],
)
def test_a_folder_the_job_changed_is_removed_not_reused(
    tmp_path: Path, pool: ThreadPoolExecutor, change: object
) -> None:
    root = tmp_path / "jobs"
    root.mkdir()
    other = tmp_path / "other"
    other.write_text("not to be truncated")
    folders = RunFolders(root, pool, keep=4)
    dirs = _run(folders, root, "1.1.0")
    change(dirs)  # type: ignore[operator]
    folders.handle([dirs])
    assert list(root.iterdir()) == []
    assert folders.free == 0
    assert other.read_text() == "not to be truncated"
    assert folders.make(RunDirs(root=root / "2.1.0")) is Made.NEW


def test_folders_past_keep_and_without_reuse_are_removed(
    tmp_path: Path, pool: ThreadPoolExecutor
) -> None:
    root = tmp_path / "jobs"
    root.mkdir()
    folders = RunFolders(root, pool, keep=1)
    runs = [_run(folders, root, f"{i}.1.0") for i in range(3)]
    for dirs in runs:
        folders.handle([dirs])
    assert folders.free == 1 and len(list(root.iterdir())) == 1
    never = RunFolders(tmp_path / "jobs", pool, keep=4, reuse=False)
    dirs = _run(never, root, "9.1.0")
    never.handle([dirs])
    assert not dirs.root.exists() and never.free == 0


def test_an_earlier_tries_folder_is_kept_not_replaced(
    tmp_path: Path, pool: ThreadPoolExecutor
) -> None:
    root = tmp_path / "jobs"
    root.mkdir()
    folders = RunFolders(root, pool, keep=4)
    folders.handle([_run(folders, root, "1.1.0")])
    earlier = _run(RunFolders(root, pool, keep=0), root, "2.1.0")
    assert folders.make(earlier) is Made.EARLIER
    assert earlier.spool.read_text() == '{"seq":1}\n'  # its spool goes on
    assert folders.free == 1  # the free one is still there for a next run


def test_a_restarted_daemon_adopts_the_free_folders_and_reset_forgets_them(
    tmp_path: Path, pool: ThreadPoolExecutor
) -> None:
    root = tmp_path / "jobs"
    root.mkdir()
    old = RunFolders(root, pool, keep=4)
    old.handle([_run(old, root, "1.1.0")])
    new = RunFolders(root, pool, keep=4)
    new.adopt()
    assert new.free == 1
    assert new.make(RunDirs(root=root / "2.1.0")) is Made.REUSED
    new.handle([RunDirs(root=root / "2.1.0")])
    jobfiles.remove(root)  # what a fresh supervisor's daemon does
    new.reset()
    dirs = RunDirs(root=root / "3.1.0")
    assert new.make(dirs) is Made.NEW and dirs.root.is_dir()


def test_done_folders_wait_for_a_batch_and_close_handles_them_at_once(
    tmp_path: Path, pool: ThreadPoolExecutor
) -> None:
    root = tmp_path / "jobs"
    root.mkdir()
    folders = RunFolders(root, pool, keep=4)

    async def main() -> None:
        for i in range(3):
            folders.add(_run(folders, root, f"{i}.1.0"))
        assert folders.free == 0  # a batch goes to a thread later
        folders.close()

    asyncio.run(main())
    assert folders.free == 3
    assert all(p.name.startswith(FREE_PREFIX) for p in root.iterdir())


def test_a_folder_with_something_mounted_on_it_is_not_handed_on(
    tmp_path: Path, pool: ThreadPoolExecutor
) -> None:
    root = tmp_path / "jobs"
    root.mkdir()
    folders = RunFolders(root, pool, keep=4)
    dirs = _run(folders, root, "1.1.0")
    mounted = subprocess.run(
        [
            "mount",
            "-t",
            "tmpfs",
            "-o",
            "mode=" + oct(_mode_of(dirs))[2:],
            "none",
            str(dirs.tmp),
        ],
        capture_output=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        folders.handle([dirs])
        assert folders.free == 0  # left for removal, which the mount refuses
    finally:  # where the folder is now, handed on or not
        for tmp in [dirs.tmp, *root.glob(f"{FREE_PREFIX}*/tmp")]:
            if os.path.ismount(tmp):
                subprocess.run(["umount", str(tmp)], check=True)


def _mode_of(dirs: RunDirs) -> int:
    return stat.S_IMODE(os.lstat(dirs.work).st_mode)
