"""The engine's attach stream of an -i container run, split into stdout and stderr."""

from __future__ import annotations

from rbs.executor.container_tty import Frames, create_args


def _frame(stream: int, data: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(data).to_bytes(4, "big") + data


def test_frames_split_per_stream_across_reads() -> None:
    stream = _frame(1, b"one\n") + _frame(2, b"err\n") + _frame(1, b"") + _frame(1, b"two")
    frames = Frames()
    got = [item for i in range(0, len(stream), 5) for item in frames.feed(stream[i : i + 5])]
    assert got == [(1, b"one\n"), (2, b"err\n"), (1, b""), (1, b"two")]
    assert frames.buf == b""


def test_stdin_is_opened_and_a_terminal_only_with_pty() -> None:
    assert create_args({"image": "x"}, False) == {"image": "x", "tty": False, "stdin_open": True}
    assert create_args({"image": "x"}, True)["tty"] is True
