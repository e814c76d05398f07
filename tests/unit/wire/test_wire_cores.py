"""Core id lists (`--cpu-cores 0-3,6`) and the manifest fields of Joblet's flags."""

from __future__ import annotations

import pytest

from rbs.units import SpecError
from rbs.wire.cores import format_cores, parse_cores
from rbs.wire.manifest import apply_flags, manifest_from_dict, manifest_to_dict


@pytest.mark.parametrize(
    ("text", "cores"), [("0-3,6", (0, 1, 2, 3, 6)), ("5", (5,)), ("3,1,1-2", (1, 2, 3))]
)
def test_lists_parse_and_format_back(text: str, cores: tuple[int, ...]) -> None:
    assert parse_cores(text) == cores
    assert parse_cores(format_cores(cores)) == cores


@pytest.mark.parametrize(
    ("text", "problem"),
    [("", "is empty"), ("a", "not a core id"), ("3-1", "ends before"), ("9999", "largest")],
)
def test_bad_lists_name_the_flag(text: str, problem: str) -> None:
    with pytest.raises(SpecError, match=problem) as e:
        parse_cores(text)
    assert e.value.flag == "--cpu-cores"


def test_the_flags_set_the_fields_which_appear_only_when_set() -> None:
    m, _ = apply_flags(None, None, {"--cpu-cores": "0-1", "--max-iobps": "10M"}, command=["x"])
    assert (m.cpu_cores, m.max_iobps) == ((0, 1), 10_000_000)
    data = manifest_to_dict(m)
    assert (data["cpu_cores"], data["max_iobps"]) == ("0-1", 10_000_000)
    assert manifest_from_dict(data) == m
    plain, _ = apply_flags(None, None, {}, command=["x"])
    assert "cpu_cores" not in manifest_to_dict(plain)


def test_a_tiny_io_rate_is_refused_with_the_range() -> None:
    with pytest.raises(SpecError, match="below the smallest") as e:
        apply_flags(None, None, {"--max-iobps": "10"}, command=["x"])
    assert e.value.flag == "--max-iobps"
