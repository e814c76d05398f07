"""jobfiles: the base environment, inputs copied in, outputs and checkpoints stored as trees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rbs.cas.memory import MemoryStore
from rbs.cas.tree import tree_from_path, walk_tree
from rbs.executor import jobfiles
from rbs.executor.jobfiles import RunDirs
from rbs.model import DigestFunction


def _tree(store: MemoryStore, root: object) -> dict[str, str]:
    out = {}
    for rel, entry in walk_tree(store, root):  # type: ignore[arg-type]
        if entry is None:
            out[rel] = "dir"
        elif entry.symlink is not None:
            out[rel] = f"-> {entry.symlink}"
        else:
            assert entry.digest is not None
            mode = "x" if entry.executable else "f"
            out[rel] = f"{mode} {store.get(entry.digest).decode()}"
    return out


def test_base_env_keeps_only_the_listed_variables(tmp_path: Path) -> None:
    dirs = RunDirs(root=tmp_path / "run")
    env = jobfiles.base_env(
        dirs, {"PATH": "/opt/bin:/usr/bin", "HOME": "/home/u", "SECRET": "x", "LANG": ""}
    )
    assert env == {
        "PATH": "/opt/bin:/usr/bin",
        "HOME": "/home/u",
        "LANG": "C.UTF-8",
        "SHELL": "/bin/sh",
        "PWD": str(dirs.work),
        "TMPDIR": str(dirs.tmp),
    }
    bare = jobfiles.base_env(dirs, {})
    assert bare["PATH"] == jobfiles.DEFAULT_PATH and bare["HOME"] == str(dirs.work)


def test_outputs_become_one_tree_under_their_declared_paths(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "res" / "deep").mkdir(parents=True)
    (work / "res" / "empty").mkdir()
    (work / "out.txt").write_text("o")
    (work / "res" / "a").write_text("a")
    (work / "res" / "deep" / "b").write_text("b")
    os.chmod(work / "res" / "a", 0o755)
    (work / "res" / "link").symlink_to("a")
    (work / "escape").symlink_to("/etc/hostname")
    store = MemoryStore()
    trees = jobfiles.collect(
        store,
        work,
        outputs=("out.txt", "res", "missing.txt", "escape"),
        checkpoint_dir=None,
        function=DigestFunction.BLAKE3,
    )
    assert trees.outputs is not None and trees.checkpoint is None
    assert _tree(store, trees.outputs) == {
        "out.txt": "f o",
        "res": "dir",
        "res/a": "x a",
        "res/link": "-> a",
        "res/deep": "dir",
        "res/deep/b": "f b",
        "res/empty": "dir",
    }
    notes = "\n".join(trees.notes)
    assert "'missing.txt' was not created" in notes
    assert "output refused" in notes and "escape" in notes


def test_checkpoint_is_saved_and_restored_over_the_inputs(tmp_path: Path) -> None:
    store = MemoryStore()
    first = tmp_path / "first"
    (first / "ckpt").mkdir(parents=True)
    (first / "ckpt" / "step").write_text("7")
    saved = jobfiles.collect(
        store, first, outputs=(), checkpoint_dir="ckpt", function=DigestFunction.BLAKE3
    )
    assert saved.outputs is None and saved.checkpoint is not None

    inputs_src = tmp_path / "inputs"
    (inputs_src / "ckpt").mkdir(parents=True)
    (inputs_src / "ckpt" / "stale").write_text("old")
    (inputs_src / "data.txt").write_text("d")
    root = tree_from_path(store, inputs_src)
    dirs = RunDirs(root=tmp_path / "run")
    notes = jobfiles.prepare(
        store, dirs, input_root=root, checkpoint=saved.checkpoint, checkpoint_dir="ckpt"
    )
    assert len(notes) == 2
    assert sorted(p.name for p in (dirs.work / "ckpt").iterdir()) == ["step"]
    assert (dirs.work / "data.txt").read_text() == "d"
    assert dirs.tmp.is_dir()


def test_a_checkpoint_without_a_checkpoint_dir_is_refused(tmp_path: Path) -> None:
    store = MemoryStore()
    src = tmp_path / "c"
    src.mkdir()
    (src / "x").write_text("x")
    root = tree_from_path(store, src)
    with pytest.raises(ValueError, match="checkpoint_dir"):
        jobfiles.prepare(
            store,
            RunDirs(root=tmp_path / "run"),
            input_root=None,
            checkpoint=root,
            checkpoint_dir=None,
        )


def test_remove_handles_read_only_folders(tmp_path: Path) -> None:
    locked = tmp_path / "run" / "work" / "locked"
    locked.mkdir(parents=True)
    (locked / "f").write_text("x")
    locked.chmod(0o500)
    jobfiles.remove(tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_make_root_tells_a_new_run_folder_from_an_earlier_tries(tmp_path: Path) -> None:
    dirs = RunDirs(root=tmp_path / "jobs" / "lease-1")  # jobs/ is made too
    assert jobfiles.make_root(dirs) is True
    assert dirs.root.is_dir()
    assert jobfiles.make_root(dirs) is False  # the folder is there: an earlier try's


def test_prepare_of_a_fresh_folder_makes_work_and_tmp(tmp_path: Path) -> None:
    dirs = RunDirs(root=tmp_path / "run")
    assert jobfiles.make_root(dirs)
    notes = jobfiles.prepare(
        MemoryStore(), dirs, input_root=None, checkpoint=None, checkpoint_dir=None, fresh=True
    )
    assert notes == []
    assert dirs.work.is_dir() and not any(dirs.work.iterdir())
    assert dirs.tmp.is_dir()


def test_prepare_of_an_earlier_tries_folder_clears_work_and_tmp_and_keeps_the_spool(
    tmp_path: Path,
) -> None:
    dirs = RunDirs(root=tmp_path / "run")
    (dirs.work / "sub").mkdir(parents=True)
    (dirs.work / "sub" / "left").write_text("x")
    dirs.tmp.mkdir()
    (dirs.tmp / "t").write_text("x")
    dirs.spool.write_text("kept\n")
    assert jobfiles.make_root(dirs) is False
    jobfiles.prepare(MemoryStore(), dirs, input_root=None, checkpoint=None, checkpoint_dir=None)
    assert list(dirs.work.iterdir()) == [] and list(dirs.tmp.iterdir()) == []
    assert dirs.spool.read_text() == "kept\n"
