"""Low-level file I/O for the disk store: full writes, pipelined copy-and-hash, batch fsync."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO, TypeVar, cast

import blake3

from rbs.cas import transfer
from rbs.model import DigestFunction, Hasher

T = TypeVar("T")
R = TypeVar("R")

# Large files move in big chunks: the hasher and the kernel both work better on them.
BIG_CHUNK = 8 << 20
# fsync is mostly waiting on the device, so more threads than cores pays off.
FSYNC_THREADS = 16
_SYNC_FILE_RANGE_WRITE = 2

_libc: ctypes.CDLL | None
try:
    _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    _libc.sync_file_range.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    _libc.syncfs.argtypes = [ctypes.c_int]
except (OSError, AttributeError):  # not Linux/glibc: fsync file by file instead
    _libc = None
HAVE_SYNCFS = _libc is not None


def syncfs(path: str) -> None:
    """Flush every dirty page of the file system holding `path` to disk (syncfs(2));
    since Linux 5.8 a failed writeback on it is reported here as OSError."""
    assert _libc is not None, "syncfs needs Linux"
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs: {os.strerror(err)}", path)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write every byte; os.write may write less than asked (signals, pipes, quotas)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing a range to disk now, so a later fsync waits less."""
    if _libc is not None:
        _libc.sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE)


def copy_hashing(src: BinaryIO, dst: int, hasher: Hasher, pool: ThreadPoolExecutor) -> int:
    """Copy `src` to the file descriptor `dst`, hashing the very bytes written.

    Each chunk is read into a private buffer (never mmap: a file truncated under a
    mapping kills the process with SIGBUS), then hashed on a pool thread while this
    thread writes it; both release the GIL, so on two cores they overlap. Returns the
    number of bytes copied; each chunk is reported to rbs.cas.transfer as it lands.
    """
    buf = bytearray(BIG_CHUNK)
    view = memoryview(buf)
    total = 0
    while True:
        n = src.readinto(view)  # type: ignore[attr-defined]
        if not n:
            break
        chunk = view[:n]
        hashed = pool.submit(hasher.update, cast(bytes, chunk))
        try:
            write_all(dst, chunk)
        finally:
            hashed.result()
        start_writeback(dst, total, n)
        total += n
        transfer.advance(n)
    return total


def map_in_slices(
    pool: ThreadPoolExecutor, fn: Callable[[T], R], items: Sequence[T], parts: int
) -> list[R]:
    """`[fn(x) for x in items]`, run as `parts` contiguous slices on the pool.

    One future per slice, not per item: a future costs tens of microseconds, as much
    as the small-file work it would carry."""
    if parts <= 1 or len(items) < 2 * parts:
        return [fn(x) for x in items]
    size = -(-len(items) // parts)
    slices = [items[i : i + size] for i in range(0, len(items), size)]
    out: list[R] = []
    for part in pool.map(lambda sl: [fn(x) for x in sl], slices):
        out.extend(part)
    return out


def hash_path(path: str, function: DigestFunction) -> tuple[str, int]:
    """(hex hash, size) of a file, using every core for large BLAKE3 inputs."""
    with open(path, "rb", buffering=0) as f:
        h, size, _ = hash_fd(f.fileno(), function)
    return h, size


def hash_fd(fd: int, function: DigestFunction, *, keep: bool = False) -> tuple[str, int, bytes]:
    """(hex hash, size, bytes) of an open file from offset 0, whatever its position.

    With `keep` the file is read whole and its bytes returned (for small blobs, which
    are then served from memory rather than read twice); otherwise the bytes are b""
    and it is read in big chunks, using every core for large BLAKE3 inputs."""
    if keep:
        parts = []
        offset = 0
        while piece := os.pread(fd, BIG_CHUNK, offset):
            parts.append(piece)
            offset += len(piece)
        data = b"".join(parts)
        h = function.hasher()
        h.update(data)
        return h.hexdigest(), len(data), data
    hasher = fast_hasher(function)
    size = 0
    buf = bytearray(BIG_CHUNK)
    view = memoryview(buf)
    while n := os.preadv(fd, [view], size):
        hasher.update(cast(bytes, view[:n]))
        size += n
    return hasher.hexdigest(), size, b""


def fast_hasher(function: DigestFunction) -> Hasher:
    """A hasher for one large input: BLAKE3 spreads it over all cores."""
    if function is DigestFunction.BLAKE3:
        h: Hasher = blake3.blake3(max_threads=blake3.blake3.AUTO)
        return h
    return function.hasher()
