"""The --pty client's ssh-style escapes: `~.`, `~C`, `~~`, `~?`, only at a line's start."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rbs.cli.job_pty import Action, EscapeParser


def _feed(*chunks: bytes) -> list[bytes | Action]:
    parser = EscapeParser()
    out: list[bytes | Action] = []
    for chunk in chunks:
        out.extend(parser.feed(chunk))
    return out


def test_escapes_at_the_start_of_the_first_line_and_after_enter() -> None:
    assert _feed(b"~.") == [Action.DETACH]
    assert _feed(b"ls\r~C") == [b"ls\r", Action.CANCEL]
    assert _feed(b"ls\n~?") == [b"ls\n", Action.HELP]
    assert _feed(b"\r~.rest") == [b"\r", Action.DETACH, b"rest"]


def test_a_tilde_inside_a_line_is_typed_as_it_is() -> None:
    assert _feed(b"cd ~.") == [b"cd ~."]
    assert _feed(b"a~C\r") == [b"a~C\r"]


def test_double_tilde_sends_one_and_other_keys_send_both() -> None:
    assert _feed(b"~~.") == [b"~."]  # the `.` after `~~` is no escape: the line has begun
    assert _feed(b"~x") == [b"~x"]
    assert _feed(b"~/etc\r") == [b"~/etc\r"]


def test_an_escape_split_across_reads_still_counts() -> None:
    assert _feed(b"echo\r", b"~", b".") == [b"echo\r", Action.DETACH]
    assert _feed(b"~", b"~") == [b"~"]


def test_help_leaves_the_line_at_its_start() -> None:
    assert _feed(b"~?~.") == [Action.HELP, Action.DETACH]


def test_ctrl_c_and_ctrl_d_are_bytes_for_the_job() -> None:
    assert _feed(b"\x03", b"\x04") == [b"\x03", b"\x04"]


@given(st.lists(st.binary(max_size=20), max_size=10))
def test_without_escapes_every_byte_goes_through_in_order(chunks: list[bytes]) -> None:
    chunks = [c.replace(b"~", b"") for c in chunks]
    out = _feed(*chunks)
    assert all(isinstance(x, bytes) for x in out)
    assert b"".join(x for x in out if isinstance(x, bytes)) == b"".join(chunks)
