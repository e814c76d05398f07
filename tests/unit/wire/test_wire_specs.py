"""Job-spec parsers that are not units (arrays, deps, env, counts, task ids): forms and errors.

Sizes, cpu quantities and durations are tested in tests/unit/test_units.py.
"""

from __future__ import annotations

import pytest

from rbs.model import ArraySpec, Dependency, DepKind
from rbs.wire import specs
from rbs.wire.specs import SpecError


@pytest.mark.parametrize(
    ("text", "ranges", "throttle", "size"),
    [
        ("0-99", ((0, 99, 1),), None, 100),
        ("1,3,7", ((1, 1, 1), (3, 3, 1), (7, 7, 1)), None, 3),
        ("0-99%10", ((0, 99, 1),), 10, 100),
        ("0-9:2", ((0, 8, 2),), None, 5),
        ("0-10:5%2", ((0, 10, 5),), 2, 3),
        ("7,1-3", ((1, 3, 1), (7, 7, 1)), None, 4),
        ("5", ((5, 5, 1),), None, 1),
    ],
)
def test_arrays(
    text: str, ranges: tuple[tuple[int, int, int], ...], throttle: int | None, size: int
) -> None:
    spec = specs.parse_array(text)
    assert spec.ranges == ranges
    assert spec.throttle == throttle
    assert spec.size == size
    assert specs.parse_array(str(spec)) == spec


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "not an index"),
        ("a-b", "not an index"),
        ("9-1", "runs backwards"),
        ("0-9%0", "throttle"),
        ("0-9%x", "throttle"),
        ("1-5,3-8", "covered twice"),
        ("1,1", "covered twice"),
        ("0-9:0", "step"),
        ("-1", "not an index"),
        ("0-2000000", "exceed the limit"),
    ],
)
def test_bad_arrays(text: str, problem: str) -> None:
    with pytest.raises(SpecError, match=problem) as e:
        specs.parse_array(text)
    assert str(e.value).startswith(f"--array {text!r}")
    assert "0-99%10" in str(e.value)


def test_dependencies() -> None:
    deps = specs.parse_dependencies("afterok:1,afterany:2:3,afternotok:4")
    assert deps == (
        Dependency(kind=DepKind.AFTEROK, job_id=1),
        Dependency(kind=DepKind.AFTERANY, job_id=2),
        Dependency(kind=DepKind.AFTERANY, job_id=3),
        Dependency(kind=DepKind.AFTERNOTOK, job_id=4),
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("after:1", "unknown dependency kind 'after'"),
        ("afterok", "names no job id"),
        ("afterok:", "names no job id"),
        ("afterok:x", "'x' is not a job id"),
        ("afterok:0", "'0' is not a job id"),
        ("afterok:3_1", "array task"),
        ("singleton", "unknown dependency kind"),
    ],
)
def test_bad_dependencies(text: str, problem: str) -> None:
    with pytest.raises(SpecError, match=problem) as e:
        specs.parse_dependencies(text)
    assert str(e.value).startswith(f"--deps {text!r}")
    assert "afterok:ID" in str(e.value)


def test_env_items() -> None:
    assert specs.parse_env(["B=2", "A=x=y", "C="]) == (("A", "x=y"), ("B", "2"), ("C", ""))
    with pytest.raises(SpecError, match="has no '='"):
        specs.parse_env(["NOVALUE"])
    with pytest.raises(SpecError, match="not a variable name"):
        specs.parse_env(["1A=2"])
    with pytest.raises(SpecError, match="given twice"):
        specs.parse_env(["A=1", "A=2"])


def test_task_ids() -> None:
    assert specs.parse_task_id("12") == (12, None)
    assert specs.parse_task_id("12_3") == (12, 3)
    for bad in ("x", "0", "12_", "12_x", "-1"):
        with pytest.raises(SpecError, match="ID_INDEX"):
            specs.parse_task_id(bad)


def test_counts() -> None:
    assert specs.parse_count("3", "--gpus") == 3
    with pytest.raises(SpecError, match="--gpus '-1'"):
        specs.parse_count("-1", "--gpus")
    with pytest.raises(SpecError, match="not a whole number"):
        specs.parse_count("two", "--nodes", 1)


def test_array_spec_is_canonical_when_built_directly() -> None:
    assert ArraySpec(ranges=((0, 9, 2),)).ranges == ((0, 8, 2),)
    with pytest.raises(ValueError, match="overlap"):
        ArraySpec(ranges=((0, 5, 1), (3, 9, 1)))
