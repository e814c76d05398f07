"""ByteStream resource names: every read and write form, round trips, and precise refusals."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rbs.model import Digest, DigestFunction
from rbs.wire.errors import InvalidRequest
from rbs.wire.resource_names import (
    Compressor,
    format_read_name,
    format_write_name,
    parse_resource_name,
)

H = "a" * 64


def test_read_forms() -> None:
    r = parse_resource_name(f"blobs/{H}/5", write=False)
    assert (r.instance, r.digest, r.compressor, r.upload_id) == (
        "",
        Digest(function=DigestFunction.SHA256, hash=H, size=5),
        Compressor.IDENTITY,
        None,
    )
    r = parse_resource_name(f"main/ci/blobs/blake3/{H}/5", write=False)
    assert r.instance == "main/ci" and r.digest.function is DigestFunction.BLAKE3
    r = parse_resource_name(f"compressed-blobs/zstd/{H}/7", write=False)
    assert r.compressor is Compressor.ZSTD and r.digest.size == 7


def test_write_forms() -> None:
    r = parse_resource_name(
        f"inst/uploads/0b4f-uuid/compressed-blobs/zstd/blake3/{H}/123/meta/x", write=True
    )
    assert (
        r.instance,
        r.upload_id,
        r.compressor,
        r.digest.function,
        r.digest.size,
        r.metadata,
    ) == (
        "inst",
        "0b4f-uuid",
        Compressor.ZSTD,
        DigestFunction.BLAKE3,
        123,
        "meta/x",
    )
    r = parse_resource_name(f"uploads/u/blobs/{H}/0", write=True)
    assert r.instance == "" and r.digest.size == 0


@pytest.mark.parametrize(
    ("name", "write", "needle"),
    [
        ("", False, "no 'blobs'"),
        (f"uploads/u/blobs/{H}/1", False, "for writes"),
        (f"blobs/{H}/1", True, "uploads/UUID"),
        (f"uploads//blobs/{H}/1", True, "empty upload id"),
        ("uploads/u", True, "nothing after"),
        (f"blobs/{H}", False, "missing HASH/SIZE"),
        (f"blobs/{H}/x1", False, "not a non-negative integer"),
        (f"blobs/{H}/-1", False, "not a non-negative integer"),
        (f"blobs/{'A' * 64}/1", False, "lowercase"),
        (f"blobs/{'a' * 40}/1", False, "SHA1"),
        (f"blobs/{'a' * 63}/1", False, "malformed hash"),
        (f"blobs/sha256tree/{H}/1", False, "not supported"),
        (f"compressed-blobs/brotli/{H}/1", False, "unsupported compressor"),
        (f"compressed-blobs/identity/{H}/1", False, "use blobs/"),
        ("compressed-blobs", False, "compressor segment"),
    ],
)
def test_refusals(name: str, write: bool, needle: str) -> None:
    with pytest.raises(InvalidRequest, match=needle):
        parse_resource_name(name, write=write)


hashes = st.text("0123456789abcdef", min_size=64, max_size=64)
instances = st.lists(st.sampled_from(["a", "ci", "x-y", "main"]), max_size=3).map("/".join)


@given(
    h=hashes,
    size=st.integers(0, 1 << 40),
    fn=st.sampled_from(list(DigestFunction)),
    inst=instances,
    comp=st.sampled_from(list(Compressor)),
)
def test_format_parse_round_trip(
    h: str, size: int, fn: DigestFunction, inst: str, comp: Compressor
) -> None:
    d = Digest(function=fn, hash=h, size=size)
    r = parse_resource_name(format_read_name(inst, d, comp), write=False)
    assert (r.instance, r.digest, r.compressor) == (inst, d, comp)
    w = parse_resource_name(format_write_name(inst, "up-1", d, comp), write=True)
    assert (w.instance, w.digest, w.compressor, w.upload_id) == (inst, d, comp, "up-1")
    assert w.read_name() == format_read_name(inst, d, comp)


@given(st.text(max_size=200))
def test_never_crashes(name: str) -> None:
    for write in (False, True):
        with contextlib.suppress(InvalidRequest):
            parse_resource_name(name, write=write)
