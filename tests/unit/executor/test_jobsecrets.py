"""A run's secrets on the worker: split out of the lease's env, masked in log lines."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rbs.executor import jobsecrets
from rbs.executor.joblog import LineSplitter

TOKEN = "s3cr3t-Value-42"


def test_split_moves_the_named_values_out_of_the_env() -> None:
    env = {"PATH": "/bin", "RBS_SECRETS": "A,B", "A": TOKEN, "B": "another-value"}
    rest, secrets = jobsecrets.split(env)
    assert rest == {"PATH": "/bin"}
    assert secrets == {"A": TOKEN, "B": "another-value"}


def test_split_without_secrets_leaves_the_env_alone() -> None:
    assert jobsecrets.split({"PATH": "/bin"}) == ({"PATH": "/bin"}, None)


def test_a_named_secret_without_a_value_fails_naming_it() -> None:
    with pytest.raises(ValueError, match="secret B"):
        jobsecrets.split({"RBS_SECRETS": "A,B", "A": TOKEN})


def test_every_occurrence_is_masked_and_other_text_kept() -> None:
    m = jobsecrets.Masker({"A": TOKEN})
    assert m.text(f"a={TOKEN} b={TOKEN}!") == "a=*** b=***!"
    assert m.text("nothing here") == "nothing here"


def test_a_multi_line_value_is_masked_line_by_line() -> None:
    m = jobsecrets.Masker({"KEY": "-----BEGIN KEY-----\nabcdefghijkl\nshort"})
    assert m.text("abcdefghijkl") == "***"
    assert m.text("-----BEGIN KEY----- here") == "*** here"
    assert m.text("short") == "short"  # under 8 characters: not masked alone


def test_the_longest_value_is_masked_first() -> None:
    m = jobsecrets.Masker({"A": "abcdefgh", "B": "abcdefgh-longer"})
    assert m.text("abcdefgh-longer") == "***"


def test_the_splitter_masks_lines_split_across_reads() -> None:
    s = jobsecrets.splitter(1024, {"A": TOKEN})
    half = len(TOKEN) // 2
    out = s.feed(f"x{TOKEN[:half]}".encode()) + s.feed(f"{TOKEN[half:]}y\nend".encode())
    out += s.finish()
    assert out == [("x***y", True), ("end", False)]


def test_without_secrets_the_plain_splitter_is_used() -> None:
    assert type(jobsecrets.splitter(1024, None)) is LineSplitter


# ---- a --pty run's terminal stream: RawMasker -------------------------------------

SECRET = "hf_s3cr3t-t0ken"


def _fed(masker: jobsecrets.RawMasker, chunks: list[bytes]) -> bytes:
    return b"".join(masker.feed(c) for c in chunks) + masker.release()


@given(
    before=st.binary(max_size=40),
    after=st.binary(max_size=40),
    cuts=st.lists(st.integers(min_value=0, max_value=120), max_size=6),
)
def test_a_value_split_over_terminal_chunks_never_goes_out(
    before: bytes, after: bytes, cuts: list[int]
) -> None:
    stream = before + SECRET.encode() + after
    points = sorted({min(c, len(stream)) for c in cuts})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    out = _fed(jobsecrets.RawMasker({"T": SECRET}), chunks)
    assert SECRET.encode() not in out
    # However it was cut, the stream comes out as if masked whole.
    whole = jobsecrets.RawMasker({"T": SECRET})
    assert out == _fed(whole, [stream])


def test_output_that_cannot_begin_a_value_goes_out_at_once() -> None:
    masker = jobsecrets.RawMasker({"T": SECRET})
    assert masker.feed(b"name? ") == b"name? "
    assert masker.due is None
    # The start of the value is held, with a deadline, until the rest shows what it is.
    assert masker.feed(b"token: hf_s3") == b"token: "
    assert masker.due is not None
    assert masker.feed(b"cr3t-t0ken\r\n") == b"***\r\n"
    assert masker.due is None
    # What only looked like its start goes out with the next chunk, or at the deadline.
    assert masker.feed(b"hf_") == b""
    assert masker.release() == b"hf_"


def test_a_value_of_several_lines_is_masked_as_the_terminal_shows_it() -> None:
    masker = jobsecrets.RawMasker({"KEY": "first-line-of-key\nsecond-line-of-key"})
    out = _fed(masker, [b"-> first-line-of-key\r\nsecond-line-of-key\r\n"])
    assert b"line-of-key" not in out and b"***" in out


def test_no_secrets_no_raw_masker() -> None:
    assert jobsecrets.raw_masker(None) is None
    assert jobsecrets.raw_masker({"SHORT": "1234567"}) is None  # under MIN_CHARS
