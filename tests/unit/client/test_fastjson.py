"""rbs.client.fastjson reads and writes what the json package does."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rbs.client import fastjson

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
documents = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(st.text() | st.integers() | st.booleans() | st.none(), inner, max_size=5)
    ),
    max_leaves=30,
)


@given(documents)
def test_dumps_writes_what_json_dumps_writes(doc: object) -> None:
    assert fastjson.dumps(doc) == json.dumps(doc, separators=(",", ":"))


@given(documents)
def test_loads_reads_what_json_loads_reads(doc: object) -> None:
    for text in (json.dumps(doc), json.dumps(doc, indent=2, ensure_ascii=False)):
        want = json.dumps(json.loads(text))
        # NaN is not equal to itself: compare what json writes of each again.
        assert json.dumps(fastjson.loads(text)) == want
        assert json.dumps(fastjson.loads(text.encode())) == want


def test_tuples_are_lists_and_a_submit_body_round_trips() -> None:
    body = {"command": ("sh", "-c", "echo ü"), "flags": {"--cpus": "2"}, "input_root": None}
    assert fastjson.loads(fastjson.dumps(body)) == {
        "command": ["sh", "-c", "echo ü"],
        "flags": {"--cpus": "2"},
        "input_root": None,
    }
    assert math.isnan(fastjson.loads(" NaN "))


@pytest.mark.parametrize("text", ["", "  ", "{", '{"a": 1} x', "[1,]", "nul", '"\\x"', b"\xff"])
def test_bad_documents_are_value_errors(text: str | bytes) -> None:
    with pytest.raises(ValueError):
        fastjson.loads(text)
    with pytest.raises(ValueError):
        json.loads(text)


def test_what_json_cannot_write_is_refused_alike() -> None:
    for value in (object(), {(1, 2): 3}, {1, 2}):
        with pytest.raises(TypeError):
            fastjson.dumps(value)
        with pytest.raises(TypeError):
            json.dumps(value)
