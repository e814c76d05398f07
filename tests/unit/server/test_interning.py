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
