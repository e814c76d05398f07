"""The disk store's checks that a blob file holds the bytes its name says, before a
byte is served or the file is hardlinked out (see rbs.cas.disk's docstring), and what a
size that differs from the file's means.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from rbs.cas import fileio
from rbs.cas.errors import BlobNotFound, CorruptBlob
from rbs.cas.knowngood import KnownGood
from rbs.model import Digest

log = logging.getLogger(__name__)

# Blobs up to this size are read whole while they are verified and served from memory.
SMALL_READ = 1 << 20


class VerifiedReads:
    """Verification for DiskStore (a mixin: the store gives `known`, paths, touch and
    quarantine)."""

    known: KnownGood

    if TYPE_CHECKING:  # provided by DiskStore

        def path_of(self, digest: Digest) -> Path: ...
        def _exec_path(self, digest: Digest) -> str: ...
        def _touch(self, path: str, st: os.stat_result) -> os.stat_result: ...
        def quarantine(self, digest: Digest) -> None: ...

    def _verify_open(self, f: io.FileIO, path: str, digest: Digest) -> bytes | None:
        """Check that the open blob file holds `digest`'s bytes before any is served:
        hashed whole unless known good (see the module docstring). Returns the bytes
        when it read a small blob whole to hash it, else None; raises CorruptBlob."""
        fd = f.fileno()
        st = os.fstat(fd)
        if st.st_size != digest.size:
            if self._good_as_named(fd, path, st, digest):
                raise BlobNotFound(digest)  # asked with a size it does not have
            raise CorruptBlob(digest, self.path_of(digest))
        if self._touch(path, st) is not st:
            st = os.fstat(fd)
        if self.known.holds(path, st):
            return None
        small = digest.size <= SMALL_READ
        h, size, data = fileio.hash_fd(fd, digest.function, keep=small)
        if (h, size) != (digest.hash, digest.size):
            raise self._corrupt_read(digest)
        # The stat from before hashing: a change made meanwhile moves mtime past it.
        self.known.add(path, st)
        return data if small else None

    def _corrupt_read(self, digest: Digest) -> Exception:
        self.quarantine(digest)
        return CorruptBlob(digest, self.path_of(digest))

    # Verification before hardlinking.

    def _check_file(self, path: str, digest: Digest) -> bool:
        """Whether the file at `path` holds `digest`'s bytes (hashing it unless this
        process already found it good as it is now). False if it is absent."""
        try:
            f = open(path, "rb", buffering=0)  # noqa: SIM115 (closed just below)
        except FileNotFoundError:
            return False
        with f:
            st = os.fstat(f.fileno())
            if self._touch(path, st) is not st:
                st = os.fstat(f.fileno())
            if st.st_size != digest.size:
                if path != self._exec_path(digest) and self._good_as_named(
                    f.fileno(), path, st, digest
                ):
                    return False  # asked with a size it does not have
            elif self.known.holds(path, st):
                return True
            else:
                h, size, _ = fileio.hash_fd(f.fileno(), digest.function)
                if (h, size) == (digest.hash, digest.size):
                    self.known.add(path, st)
                    return True
        return self._corrupt(path, digest)

    # A size that differs from the file's: a client asking with a wrong size (the blob
    # it names cannot be here), or a file cut short or grown. Only the file's hash
    # tells them apart, and only a file whose bytes do not hash to its name is removed:
    # a request can never make the store delete a good blob. A file found good is
    # remembered (KnownGood), so asking again costs a stat, not a hash.

    def _other_size(self, path: str, digest: Digest) -> None:
        try:
            f = open(path, "rb", buffering=0)  # noqa: SIM115 (closed just below)
        except FileNotFoundError:
            return
        with f:
            self._good_as_named(f.fileno(), path, os.fstat(f.fileno()), digest)

    def _good_as_named(self, fd: int, path: str, st: os.stat_result, digest: Digest) -> bool:
        """Whether the open blob file holds the bytes its name (hash) says; if not, it is
        quarantined."""
        if self.known.holds(path, st):
            return True
        h, _, _ = fileio.hash_fd(fd, digest.function)
        if h == digest.hash:
            self.known.add(path, st)
            return True
        self.quarantine(digest)
        return False

    def _corrupt(self, path: str, digest: Digest) -> bool:
        if path == self._exec_path(digest):
            log.warning("removing modified executable copy %s of %s", path, digest)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return False
        self.quarantine(digest)
        raise CorruptBlob(digest, Path(path))
