"""The BlobStore contract, run against every backend and wrapper (see conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs.cas.errors import BlobNotFound, DigestMismatch
from rbs.cas.store import BlobStore
from rbs.model import Digest, DigestFunction

FUNCTIONS = [DigestFunction.BLAKE3, DigestFunction.SHA256]


@pytest.mark.parametrize("function", FUNCTIONS)
def test_put_get_round_trip(store: BlobStore, function: DigestFunction) -> None:
    d = store.put(b"hello world", function=function)
    assert d == Digest.of(b"hello world", function)
    assert store.get(d) == b"hello world"
    assert store.contains(d)


def test_same_bytes_under_both_functions_are_separate_blobs(store: BlobStore) -> None:
    b3 = store.put(b"abc")
    sha = store.put(b"abc", function=DigestFunction.SHA256)
    assert b3.function is DigestFunction.BLAKE3 and sha.function is DigestFunction.SHA256
    assert store.delete(b3)
    assert not store.contains(b3)
    assert store.get(sha) == b"abc"


@pytest.mark.parametrize("function", FUNCTIONS)
def test_empty_blob_is_always_present(store: BlobStore, function: DigestFunction) -> None:
    empty = Digest.empty(function)
    assert store.contains(empty)
    assert store.find_missing([empty]) == []
    assert store.get(empty) == b""
    assert store.put(b"", function=function) == empty


def test_find_missing_reports_absent_once_in_order(store: BlobStore) -> None:
    present = store.put(b"present")
    a, b = Digest.of(b"absent a"), Digest.of(b"absent b")
    assert store.find_missing([a, present, b, a]) == [a, b]


def test_get_missing_raises_blob_not_found(store: BlobStore) -> None:
    d = Digest.of(b"never stored")
    with pytest.raises(BlobNotFound, match=d.hash):
        store.get(d)
    with pytest.raises(BlobNotFound):
        store.open(d)


def test_put_refuses_wrong_expected_digest(store: BlobStore) -> None:
    wrong = Digest.of(b"other bytes")
    with pytest.raises(DigestMismatch, match="content does not match"):
        store.put(b"these bytes", expected=wrong)
    assert not store.contains(Digest.of(b"these bytes"))
    assert not store.contains(wrong)


def test_writer_refuses_size_overflow_and_keeps_nothing(store: BlobStore) -> None:
    d = Digest.of(b"1234")
    w = store.writer(d)
    w.write(b"12")
    with pytest.raises(DigestMismatch, match=r"size does not match.*more than 4"):
        w.write(b"345")
    assert not store.contains(d)


def test_writer_refuses_short_upload(store: BlobStore) -> None:
    d = Digest.of(b"1234")
    with pytest.raises(DigestMismatch, match="names 4 bytes, got 3"), store.writer(d) as w:
        w.write(b"123")
        w.commit()
    assert not store.contains(d)


def test_writer_refuses_wrong_content_of_right_size(store: BlobStore) -> None:
    d = Digest.of(b"1234")
    with pytest.raises(DigestMismatch, match="content"), store.writer(d) as w:
        w.write(b"abcd")
        w.commit()
    assert not store.contains(d)


def test_writer_aborts_on_exception(store: BlobStore) -> None:
    d = Digest.of(b"1234")
    with pytest.raises(RuntimeError), store.writer(d) as w:
        w.write(b"1234")
        raise RuntimeError("client went away")
    assert not store.contains(d)


def test_writer_streams_chunks(store: BlobStore) -> None:
    data = os.urandom(3 << 20)
    d = Digest.of(data)
    with store.writer(d) as w:
        for i in range(0, len(data), 100_000):
            w.write(data[i : i + 100_000])
        assert w.commit() == d
    assert store.get(d) == data


@pytest.mark.parametrize("size", [0, 1, 5 << 20])
def test_put_file(store: BlobStore, tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    d = store.put_file(src)
    assert d == Digest.of(data)
    assert store.get(d) == data
    assert store.put_file(src, expected=d) == d


@pytest.mark.parametrize("size", [3, 5 << 20])
def test_put_file_refuses_wrong_expected(store: BlobStore, tmp_path: Path, size: int) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(b"x" * size)
    wrong = Digest.of(b"y" * size)
    with pytest.raises(DigestMismatch):
        store.put_file(src, expected=wrong)
    assert not store.contains(wrong)
    # A present blob of another size must not be "confirmed" by a file that differs.
    present = store.put(b"z" * (size + 1))
    with pytest.raises(DigestMismatch, match="size"):
        store.put_file(src, expected=present)


def test_delete(store: BlobStore) -> None:
    d = store.put(b"to delete")
    assert store.delete(d) is True
    assert store.delete(d) is False
    assert store.find_missing([d]) == [d]


def test_read_chunks_with_offset_and_limit(store: BlobStore) -> None:
    data = bytes(range(256)) * 100
    d = store.put(data)
    assert b"".join(store.read_chunks(d)) == data
    assert b"".join(store.read_chunks(d, offset=1000, limit=50)) == data[1000:1050]


@pytest.mark.parametrize("executable", [False, True])
@pytest.mark.parametrize("link", [False, True])
def test_export_file(store: BlobStore, tmp_path: Path, executable: bool, link: bool) -> None:
    d = store.put(b"#!/bin/sh\necho hi\n")
    dest = tmp_path / "out"
    store.export_file(d, dest, executable=executable, link=link)
    assert dest.read_bytes() == b"#!/bin/sh\necho hi\n"
    assert bool(dest.stat().st_mode & 0o111) is executable
    assert not dest.stat().st_mode & 0o222, "exported files are read-only"


def test_export_file_missing(store: BlobStore, tmp_path: Path) -> None:
    with pytest.raises(BlobNotFound):
        store.export_file(Digest.of(b"nope"), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_messages_round_trip(store: BlobStore) -> None:
    cmd = re_pb2.Command(arguments=["echo", "hi"], output_paths=["out"])
    d = store.put_message(cmd, DigestFunction.SHA256)
    assert d.function is DigestFunction.SHA256
    assert store.get_message(d, re_pb2.Command()) == cmd


def test_batch_commits_all_and_dedups(store: BlobStore, tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"from a file")
    with store.batch() as b:
        digests = [b.put(f"blob {i}".encode()) for i in range(300)]
        again = b.put(b"blob 7")
        fd = b.put_file(f)
    assert again == digests[7]
    assert store.find_missing([*digests, fd]) == []
    assert store.get(digests[299]) == b"blob 299"
    assert store.get(fd) == b"from a file"


def test_batch_aborted_by_exception_leaves_nothing_pending(store: BlobStore) -> None:
    d = Digest.of(b"in an aborted batch")
    with pytest.raises(RuntimeError), store.batch() as b:
        b.put(b"in an aborted batch")
        raise RuntimeError("stop")
    # The default batch writes through at once; disk batches discard unsynced blobs.
    # Either way the store is consistent: a present blob is whole.
    if store.contains(d):
        assert store.get(d) == b"in an aborted batch"
