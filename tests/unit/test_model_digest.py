"""Digests against known vectors, in both digest functions."""

from __future__ import annotations

import pytest

from rbs.model import Digest, DigestFunction

EMPTY_BLAKE3 = "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
ABC_BLAKE3 = "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"
ABC_SHA256 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


@pytest.mark.parametrize(
    ("data", "function", "expected"),
    [
        (b"", DigestFunction.BLAKE3, EMPTY_BLAKE3),
        (b"", DigestFunction.SHA256, EMPTY_SHA256),
        (b"abc", DigestFunction.BLAKE3, ABC_BLAKE3),
        (b"abc", DigestFunction.SHA256, ABC_SHA256),
    ],
)
def test_known_vectors(data: bytes, function: DigestFunction, expected: str) -> None:
    d = Digest.of(data, function)
    assert (d.hash, d.size, d.function) == (expected, len(data), function)


def test_default_function_is_blake3() -> None:
    assert Digest.of(b"abc").function is DigestFunction.BLAKE3


def test_text_round_trip_keeps_function() -> None:
    d = Digest.of(b"abc", DigestFunction.SHA256)
    assert Digest.parse(str(d)) == d
    assert Digest.parse(f"{ABC_SHA256}/3", default=DigestFunction.SHA256) == d


@pytest.mark.parametrize(
    "text", ["", "abc/3", f"{ABC_SHA256}", f"md5:{ABC_SHA256}/3", f"{ABC_SHA256}/-1"]
)
def test_malformed_text_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        Digest.parse(text)


def test_malformed_fields_are_refused() -> None:
    with pytest.raises(ValueError, match="64 lowercase hex"):
        Digest(function=DigestFunction.SHA256, hash="ABC", size=3)
    with pytest.raises(ValueError, match="negative"):
        Digest(function=DigestFunction.SHA256, hash=ABC_SHA256, size=-1)
