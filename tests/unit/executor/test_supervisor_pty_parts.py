"""The pieces of a --pty run: its terminal's lines for the log, its size, its input feed."""

from __future__ import annotations

import base64
import grp
import os

import pytest

from rbs.executor.joblog import LineSplitter
from rbs.executor.supervisor_pty import CrSplitter, PtyFeed, get_winsize, set_winsize, stdio
from rbs.model import JobManifest, LogStream


def test_terminal_lines_lose_their_carriage_returns_and_the_raw_stream_keeps_them() -> None:
    raw: list[bytes] = []
    split = CrSplitter(LineSplitter(), raw.append)
    lines = split.feed(b"hi\r\n$ \r         \r$ ls\r\n10%\r50%\r100%\r\npart")
    assert lines == [("hi", True), ("$ ls", True), ("100%", True)]
    assert split.finish() == [("part", False)]
    assert raw == [b"hi\r\n$ \r         \r$ ls\r\n10%\r50%\r100%\r\npart"]


def test_a_pty_stdio_is_one_terminal_with_the_go_ahead_on_fd_3() -> None:
    go_r, go_w = os.pipe()
    io = stdio(True, go_r, "unused", None)
    try:
        assert io.master is not None and io.readers == ((io.master, LogStream.OUT),)
        assert [a[1] for a in io.actions] == [0, 0, 0, go_r]  # open as 0, dup 0 to 1, 2; go
        assert io.actions[0][2].startswith("/dev/pts/")
        assert get_winsize(io.master) == (24, 80)
        assert "<&3" in io.shim
    finally:
        for fd in (go_r, go_w, *io.fds):
            os.close(fd)


def test_pipes_when_not_a_pty() -> None:
    go_r, go_w = os.pipe()
    io = stdio(False, go_r, "the shim", None)
    try:
        assert io.master is None and io.shim == "the shim"
        assert [s for _, s in io.readers] == [LogStream.OUT, LogStream.ERR]
        assert len(io.child) == 2
    finally:
        for fd in (go_r, go_w, *io.fds):
            os.close(fd)


def test_the_feed_writes_to_the_terminal_resizes_it_and_sends_eof_as_ctrl_d() -> None:
    master, slave = os.openpty()
    feed = PtyFeed(master)
    try:
        feed.feed(base64.b64encode(b"x").decode(), False, winsize=(40, 100))
        assert get_winsize(slave) == (40, 100)
        feed.feed("", True)
        assert feed.fd is not None  # the terminal stays the job's
        assert os.read(slave, 64) == b"x"  # canonical mode: ^D ends the read of "x"
        set_winsize(master, 10, 20)
        assert get_winsize(slave) == (10, 20)
    finally:
        feed.close()
        os.close(master)
        os.close(slave)


def test_a_manifest_asks_for_a_pty_only_with_interactive() -> None:
    JobManifest(name="sh", command=("bash",), interactive=True, pty=True)
    JobManifest(name="sh", command=("sh",), interactive=True, pty=True, container="x:1")
    with pytest.raises(ValueError, match=r"--pty needs --interactive \(-i\)"):
        JobManifest(name="sh", command=("bash",), pty=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a terminal to another uid needs root")
def test_a_run_users_terminal_is_its_own_as_a_logins_is() -> None:
    go_r, go_w = os.pipe()
    io = stdio(True, go_r, "unused", 200123)
    try:
        st = os.stat(io.actions[0][2])
        assert (st.st_uid, st.st_mode & 0o777) == (200123, 0o620)
        assert st.st_gid == grp.getgrnam("tty").gr_gid
    finally:
        for fd in (*io.fds, go_r, go_w):
            os.close(fd)
