"""rbs.units: every suffix's meaning, the accepted forms, round trips and errors that name the value."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rbs import units
from rbs.units import SpecError

# The table in the module docstring and the README, one row per suffix.
SUFFIXES = {
    "": 1,
    "k": 10**3,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def test_units_imports_only_the_standard_library() -> None:
    tree = ast.parse(Path(units.__file__).read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [n for n in names if n == "rbs" or n.startswith("rbs.")]


# Sizes.


@pytest.mark.parametrize(("suffix", "factor"), SUFFIXES.items())
def test_every_suffix_has_one_meaning(suffix: str, factor: int) -> None:
    assert units.SIZE_UNITS[suffix] == factor
    assert units.parse_size(f"3{suffix}") == 3 * factor
    assert units.parse_size(f"1{suffix}", "--memory", minimum=1) == factor


def test_g_is_ten_to_the_ninth_and_gi_two_to_the_thirtieth() -> None:
    assert units.parse_size("10G", "--max-cas-size") == 10_000_000_000
    assert units.parse_size("10Gi", "--max-cas-size") == 10 * 2**30
    assert units.parse_size("50G") == 50 * 10**9


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [
        ("8Gi", 8 << 30),
        ("512Mi", 512 << 20),
        ("1G", 10**9),
        ("1500M", 1_500_000_000),
        ("1.5Gi", 3 << 29),
        ("1e9", 10**9),
        ("1024", 1024),
        (" 4096 ", 4096),
        (4096, 4096),
        ("2k", 2000),
        ("0", 0),
        (0, 0),
    ],
)
def test_sizes(text: str | int, nbytes: int) -> None:
    assert units.parse_size(text) == nbytes


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "not a size"),
        ("G", "not a size"),
        ("Gi", "not a size"),
        ("5X", "not a size"),
        ("-1", "not a size"),
        ("-1Gi", "not a size"),
        ("lots", "not a size"),
        ("0.5", "not a whole number of bytes"),
        # Near misses get a hint, never a guess.
        ("8GB", r"did you mean 8G, 8 x 10\^9 bytes, or 8Gi, 8 x 2\^30\?"),
        ("1.5GiB", r"did you mean 1\.5Gi\?"),
        ("8 Gi", r"did you mean 8Gi\?"),
        ("10g", "did you mean 10G"),
        ("500m", "did you mean 500M"),
    ],
)
def test_bad_sizes_name_the_flag_value_and_forms(text: str, problem: str) -> None:
    with pytest.raises(SpecError, match=problem) as e:
        units.parse_size(text, "--max-cas-size")
    msg = str(e.value)
    assert msg.startswith(f"--max-cas-size {text!r}: not a ")
    assert "Ki, Mi, Gi, Ti" in msg and "powers of 1024" in msg and "powers of 1000" in msg
    assert "8Gi" in msg
    assert e.value.flag == "--max-cas-size" and e.value.value == text


def test_size_minimum() -> None:
    with pytest.raises(SpecError, match="must be positive"):
        units.parse_size("0", "--memory", minimum=1)
    with pytest.raises(SpecError, match="must not be negative"):
        units.parse_size(-1, "[cas] max_size")
    with pytest.raises(SpecError, match="not a size"):
        units.parse_size(True, "x")  # type: ignore[arg-type]


def test_format_size_is_exact() -> None:
    assert units.format_size(8 << 30) == "8Gi"
    assert units.format_size(512 << 20) == "512Mi"
    assert units.format_size(1500) == "1500"
    assert units.format_size(10**9) == "1000000000"
    assert units.format_size(0) == "0"


@given(st.integers(min_value=0, max_value=2**70))
def test_format_size_round_trips(nbytes: int) -> None:
    assert units.parse_size(units.format_size(nbytes)) == nbytes


@given(st.integers(min_value=0, max_value=10**6), st.sampled_from(sorted(SUFFIXES)))
def test_parse_size_is_number_times_suffix(n: int, suffix: str) -> None:
    assert units.parse_size(f"{n}{suffix}") == n * SUFFIXES[suffix]


def test_human_size() -> None:
    assert units.human_size(5000) == "4.9 KiB"
    assert units.human_size(1023) == "1023 B"
    assert units.human_size(3 << 29) == "1.5 GiB"
    assert units.human_size(2 << 40) == "2.0 TiB"
    assert units.human_size(2048 << 40) == "2048.0 TiB"


def test_gib_flag_counts_gibibytes() -> None:
    assert units.parse_gib("8") == 8 << 30
    assert units.parse_gib("0.5") == 1 << 29
    assert units.parse_gib(0.0625) == 64 << 20
    with pytest.raises(SpecError, match="--memory-gb"):
        units.parse_gib("lots")
    with pytest.raises(SpecError, match="positive"):
        units.parse_gib("0")


# Cpu quantities.


@pytest.mark.parametrize(
    ("text", "millis"), [("2", 2000), ("0.5", 500), ("500m", 500), ("1.25", 1250), (3, 3000)]
)
def test_cpu_quantities(text: str | int, millis: int) -> None:
    assert units.parse_cpu(text) == millis


@pytest.mark.parametrize("text", ["", "two", "0", "0m", "0.0001", "-1", "1.5m"])
def test_bad_cpu(text: str) -> None:
    with pytest.raises(SpecError) as e:
        units.parse_cpu(text)
    assert str(e.value).startswith(f"--cpus {text!r}") and "500m" in str(e.value)


@given(st.integers(min_value=1, max_value=10**9))
def test_format_cpu_round_trips(millis: int) -> None:
    assert units.parse_cpu(units.format_cpu(millis)) == millis


def test_format_cpu() -> None:
    assert units.format_cpu(500) == "500m" and units.format_cpu(2000) == "2"


# Durations.


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90),
        ("30m", 1800),
        ("2h", 7200),
        ("1d", 86400),
        ("1h30m", 5400),
        ("1d12h", 129600),
        ("45s", 45),
        ("90m", 5400),
        ("01:02:03", 3723),
        ("10:00", 600),
        (" 2H ", 7200),
        (120, 120),
    ],
)
def test_durations(text: str | int, seconds: int) -> None:
    assert units.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "1x", "-5", "0", "0m", "1.5h", "h", "1:70:00", "m30"])
def test_bad_durations_name_the_flag_value_and_forms(text: str) -> None:
    with pytest.raises(SpecError) as e:
        units.parse_duration(text)
    msg = str(e.value)
    assert msg.startswith(f"--time {text!r}")
    assert "30m" in msg and "1h30m" in msg
    assert e.value.flag == "--time"


def test_duration_minimum() -> None:
    assert units.parse_duration("0s", "--lease", minimum=0) == 0
    assert units.parse_duration("0", "--lease", minimum=0) == 0
    with pytest.raises(SpecError, match="must not be negative"):
        units.parse_duration(-1, "--lease", minimum=0)
    with pytest.raises(SpecError, match="at least one second"):
        units.parse_duration("0m", "queues[0].max_time")


def test_format_duration_round_trips() -> None:
    for seconds in (1, 59, 60, 3600, 5400, 86400 + 61):
        assert units.parse_duration(units.format_duration(seconds)) == seconds
    assert units.format_duration(0) == "0s"


@given(st.integers(min_value=0, max_value=10**8))
def test_format_duration_round_trips_everywhere(seconds: int) -> None:
    assert units.parse_duration(units.format_duration(seconds), minimum=0) == seconds


def test_human_duration() -> None:
    assert units.human_duration(45) == "45s"
    assert units.human_duration(90) == "1.5m"
    assert units.human_duration(3 * 3600) == "3.0h"
    assert units.human_duration(2 * 86400) == "2.0d"
