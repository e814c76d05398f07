"""Equal values handed to the interner come back as one object."""

from __future__ import annotations

from rbs.server.interning import Interner


def test_equal_values_are_kept_once_and_the_table_stays_bounded() -> None:
    shared = Interner(size=3)
    a = tuple(sorted({"name": "flag --name", "queue": "default"}.items()))
    b = tuple(sorted({"queue": "default", "name": "flag --name"}.items()))
    assert a == b and a is not b
    assert shared(a) is a and shared(b) is a
    for i in range(10):  # past its size the table starts again; values still come back equal
        assert shared((i,)) == (i,)
    assert len(shared._seen) <= 3
    assert shared(b) == a


def test_submissions_alike_share_their_parts_and_keep_their_values() -> None:
    from rbs.model import JobManifest, Resources

    shared = Interner()

    def manifest(name: str) -> JobManifest:
        return JobManifest(
            name=name,
            command=tuple(["sh", "-c", "true"]),
            resources=Resources(cpu_millis=100),
            env=(("A", "1"),),
        )

    a, prov_a = shared.submission(manifest("a"), {"name": "flag --name", "cpu": "flag --cpus"})
    b, prov_b = shared.submission(manifest("b"), {"cpu": "flag --cpus", "name": "flag --name"})
    assert (a.name, b.name) == ("a", "b")
    assert a.command is b.command and a.resources is b.resources
    assert b == manifest("b") and prov_a is prov_b
    assert prov_a == (("cpu", "flag --cpus"), ("name", "flag --name"))
