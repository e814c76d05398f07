"""find_missing from the disk store's index (rbs.cas.presence) never reports a removed
blob present, keeps the two digest functions apart, and survives a restart."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from rbs.cas import presence
from rbs.cas.disk import DiskStore
from rbs.cas.errors import BlobNotFound
from rbs.model import Digest, DigestFunction

B3, SHA = DigestFunction.BLAKE3, DigestFunction.SHA256


def _blobs(n: int, tag: str = "blob") -> list[bytes]:
    return [f"{tag} {i}".encode() for i in range(n)]


def _open(root: Path, **kwargs: object) -> DiskStore:
    store = DiskStore(root, index=True, **kwargs)  # type: ignore[arg-type]
    assert store.index is not None and store.index.ready.wait(60), "index never ready"
    return store


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "s"


@pytest.fixture
def opened() -> Iterator[list[DiskStore]]:
    stores: list[DiskStore] = []
    yield stores
    for s in stores:
        s.close()


def _other_function(d: Digest) -> Digest:
    """The same hex name and size under the other function: a blob nobody stored."""
    return Digest(function=SHA if d.function is B3 else B3, hash=d.hash, size=d.size)


def test_indexed_and_plain_stores_answer_alike(root: Path, tmp_path: Path, opened: list) -> None:
    indexed = _open(root)
    opened.append(indexed)
    plain = DiskStore(tmp_path / "b")
    stored = [indexed.put(b) for b in _blobs(3000)]
    for b in _blobs(3000):
        plain.put(b)
    absent = [Digest.of(b) for b in _blobs(3000, "absent")]
    sha = [indexed.put(b"stored as sha256", function=SHA)]
    plain.put(b"stored as sha256", function=SHA)
    twins = [_other_function(d) for d in [*stored[:50], *sha]]
    query = [*absent[:10], *stored, *absent, Digest.of(b""), *sha, *twins, absent[0], stored[0]]
    want = absent + twins
    reopened = _open(root)
    opened.append(reopened)
    for store in (indexed, reopened, plain):
        assert store.find_missing(query) == want
        assert store.find_missing(query) == want  # again: from what it now remembers
    assert indexed.index is not None and len(indexed.index) == 3001


def test_a_digest_of_the_wrong_size_is_missing(root: Path, opened: list) -> None:
    store = _open(root)
    opened.append(store)
    d = store.put(b"some bytes")
    wrong = Digest(function=d.function, hash=d.hash, size=d.size + 1)
    assert store.find_missing([wrong]) == [wrong]
    assert store.find_missing([d]) == []


def test_the_stores_own_removals_are_seen_at_once(root: Path, opened: list) -> None:
    store = _open(root, lease=0)
    opened.append(store)
    digests = [store.put(b) for b in _blobs(50)]
    assert store.find_missing(digests) == []
    assert store.delete(digests[0])
    assert store.find_missing(digests) == digests[:1]
    os.chmod(store.path_of(digests[1]), 0o644)
    store.path_of(digests[1]).write_bytes(b"corrupt")  # a read finds it and removes it
    with pytest.raises(Exception, match="corrupt"):
        store.get(digests[1])
    assert store.find_missing(digests) == digests[:2]
    result = store.gc(max_size=0)
    assert result.after_bytes == 0
    assert store.find_missing(digests) == digests
    again = store.put(_blobs(1)[0])
    assert store.find_missing(digests) == digests[1:] and again == digests[0]


def test_another_rbs_process_removing_blobs_is_seen_at_once(root: Path, opened: list) -> None:
    server = _open(root, lease=0)
    opened.append(server)
    digests = [server.put(b) for b in _blobs(20)]
    other = DiskStore(root, lease=0)  # `rbs cas gc` or `rbs cas verify` on the same folder
    assert other.delete(digests[0])
    assert server.find_missing(digests) == digests[:1]
    other.gc(max_size=0)
    assert server.find_missing(digests) == digests
    server.close()
    assert not (root / presence.INDEXED).exists(), "no index open: nothing journalled"


def test_a_blob_removed_by_hand_is_caught_by_reads_checks_and_the_audit(
    root: Path, opened: list
) -> None:
    store = _open(root)
    opened.append(store)
    a, b, c = (store.put(x) for x in _blobs(3))
    for d in (a, b, c):
        os.unlink(store.path_of(d))
    # The documented limit: a removal outside rbs is not seen by the index alone ...
    assert store.find_missing([a, b, c]) == []
    # ... but by every path that reads or checks the file,
    assert store.check_missing([a]) == [a]
    with pytest.raises(BlobNotFound):
        store.get(b)
    assert store.find_missing([a, b, c]) == [a, b]
    # and by the next audit.
    assert store.index is not None
    store.index.audit()
    assert store.find_missing([a, b, c]) == [a, b, c]


def test_a_restart_reads_the_store_again(root: Path, opened: list) -> None:
    first = _open(root)
    digests = [first.put(b) for b in _blobs(200)]
    sha = first.put(b"sha blob", function=SHA)
    first.close()
    os.unlink(first.path_of(digests[0]))  # while no server ran
    plain = DiskStore(root)
    plain.put(b"written while it was down")
    second = _open(root)
    opened.append(second)
    want = [digests[0], _other_function(sha)]
    query = [*digests, sha, _other_function(sha), Digest.of(b"written while it was down")]
    assert second.find_missing(query) == want


def test_a_cold_answer_touches_in_the_background_and_eviction_waits_for_it(
    root: Path, opened: list
) -> None:
    first = DiskStore(root)
    digests = [first.put(b) for b in _blobs(30)]
    old = time.time() - 7200
    for d in digests:
        os.utime(first.path_of(d), (old, old))
    store = _open(root, lease=3600)
    opened.append(store)
    assert store.find_missing(digests[:10]) == []  # used now, though the files say 2 h ago
    result = store.gc(max_size=0)  # flushes the touches first: the ten are in the lease
    assert result.removed_blobs == 20
    assert store.find_missing(digests) == digests[10:]
    assert all(store.path_of(d).stat().st_mtime > old + 3600 for d in digests[:10])


def test_eviction_keeps_a_blob_the_index_saw_used_before_its_touch_landed(root: Path) -> None:
    prefixes = {fn: f"{root}/blobs/{fn.value}/" for fn in DigestFunction}
    os.makedirs(root, exist_ok=True)
    index = presence.PresenceIndex(str(root), prefixes, lambda path: None, fresh_s=60)
    try:
        assert index.ready.wait(60)
        d = Digest.of(b"x")
        index.added(d.function, d.hash, d.size, time.time() - 7200)
        assert index.find_missing([d]) == []  # a use, not yet on disk (the touch is a no-op)
        assert not index.hide(d.function, d.hash, lease_from=time.time() - 3600)
        assert index.holds(d)
        assert index.hide(d.function, d.hash, lease_from=time.time() + 10)
        assert index.find_missing([d]) == [d]  # hidden while eviction decides
        index.unhide(d.function, d.hash, evicted=False)
        assert index.find_missing([d]) == []
    finally:
        index.close()


class StoreMachine(RuleBasedStateMachine):
    """Puts, deletes, eviction, removals by another process and by hand, audits and
    restarts, in both digest functions: the index never reports a blob present that
    is not on disk, except one removed by hand since the last audit or restart."""

    def __init__(self) -> None:
        super().__init__()
        import tempfile

        self.dir = tempfile.TemporaryDirectory()
        self.root = Path(self.dir.name) / "s"
        self.store = _open(self.root, lease=0)
        self.other = DiskStore(self.root, lease=0)
        self.by_hand: set[Digest] = set()
        pool = _blobs(12)
        self.digests = [Digest.of(b, fn) for b in pool for fn in (B3, SHA)]
        self.data = {Digest.of(b, fn): b for b in pool for fn in (B3, SHA)}

    def _on_disk(self, d: Digest) -> bool:
        return self.store.path_of(d).exists()

    @rule(i=st.integers(0, 23))
    def put(self, i: int) -> None:
        d = self.digests[i]
        self.store.put(self.data[d], function=d.function)
        self.by_hand.discard(d)

    @rule(i=st.integers(0, 23))
    def delete(self, i: int) -> None:
        self.store.delete(self.digests[i])
        self.by_hand.discard(self.digests[i])

    @rule(i=st.integers(0, 23))
    def other_process_deletes(self, i: int) -> None:
        self.other.delete(self.digests[i])
        self.by_hand.discard(self.digests[i])

    @rule(i=st.integers(0, 23))
    def removed_by_hand(self, i: int) -> None:
        d = self.digests[i]
        if self._on_disk(d):
            os.unlink(self.store.path_of(d))
            self.by_hand.add(d)

    @rule(i=st.integers(0, 23))
    def read(self, i: int) -> None:
        d = self.digests[i]
        try:
            assert self.store.get(d) == self.data[d]
        except BlobNotFound:
            self.by_hand.discard(d)

    @rule(other=st.booleans())
    def evict_all(self, other: bool) -> None:
        (self.other if other else self.store).gc(max_size=0)

    @rule()
    def audit(self) -> None:
        assert self.store.index is not None
        self.store.index.audit()
        self.by_hand.clear()

    @rule()
    def restart(self) -> None:
        self.store.close()
        self.store = _open(self.root, lease=0)
        self.by_hand.clear()

    @invariant()
    def answers_as_the_disk(self) -> None:
        twins = [_other_function(d) for d in self.digests]
        reported = set(self.store.find_missing(self.digests + twins))
        truly = {d for d in self.digests if not self._on_disk(d)}
        assert reported <= truly | set(twins), "reported missing though on disk"
        assert set(twins) <= reported, "a blob of the other function taken as present"
        assert truly - reported <= self.by_hand, "reported present though removed by rbs"

    def teardown(self) -> None:
        self.store.close()
        self.dir.cleanup()


TestStoreMachine = StoreMachine.TestCase
TestStoreMachine.settings = settings(
    max_examples=40,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
