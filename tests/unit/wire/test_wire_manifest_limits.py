"""The ranges of rbs.units.LIMITS and the text rules hold for flags and for manifests alike."""

from __future__ import annotations

from typing import Any

import pytest

from rbs.units import LIMITS, SpecError
from rbs.wire.manifest import apply_flags, manifest_from_dict

# (flag, its largest accepted value, one past it, the range the error names).
FLAG_EDGES = [
    ("--priority", "1000000", "1000001", "from -1000000 to 1000000"),
    ("--priority", "-1000000", "-1000001", "from -1000000 to 1000000"),
    ("--max-retries", "1000", "1001", "from 0 to 1000"),
    ("--time", "366d", "366d1s", "from 1s to 366d"),
    ("--nodes", "10000", "10001", "from 1 to 10000"),
    ("--cpus", "4096", "4096001m", "from 1m to 4096"),
    ("--memory-gb", str(64 * 1024), str(64 * 1024 + 1), "from 1 to 64Ti"),
    ("--gpus", "256", "257", "from 0 to 256"),
    ("--array", "0-999999", "0-1000000", "limit of 1000000"),
    ("--array", "999999999", "1000000000", "from 0 to 999999999"),
]


def submit(flags: dict[str, Any], command: list[str] | None = None) -> Any:
    return apply_flags(None, None, flags, command=command or ["true"])[0]


@pytest.mark.parametrize(("flag", "edge", "beyond", "want"), FLAG_EDGES)
def test_each_flag_takes_its_edge_and_refuses_past_it_naming_flag_and_range(
    flag: str, edge: str, beyond: str, want: str
) -> None:
    submit({flag: edge})
    with pytest.raises(SpecError) as e:
        submit({flag: beyond})
    assert e.value.flag == flag
    assert want in str(e.value)


@pytest.mark.parametrize(
    ("flags", "want"),
    [
        ({"--priority": "100000000000000000000000"}, "from -1000000 to 1000000"),
        ({"--max-retries": 10**20}, "from 0 to 1000"),
        ({"--time": "99999999999999999d"}, "from 1s to 366d"),
    ],
)
def test_the_values_once_accepted_are_refused(flags: dict[str, Any], want: str) -> None:
    with pytest.raises(SpecError, match=want) as e:
        submit(flags)
    assert e.value.flag == next(iter(flags))


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--env", 5),
        ("--env", [1, 2]),
        ("--name", 3),
        ("--priority", 1.5),
        ("--priority", True),
        ("--time", [1]),
        ("--no-requeue", "yes"),
        ("--outputs", {"a": 1}),
    ],
)
def test_a_value_of_the_wrong_type_names_the_flag(flag: str, value: Any) -> None:
    with pytest.raises(SpecError, match="has type") as e:
        submit({flag: value})
    assert e.value.flag == flag


def test_env_is_bounded_in_bytes_and_count() -> None:
    high = LIMITS["env.size"].high
    submit({"--env": [f"A={'x' * (high - 3)}"]})  # "A=" + value + 1 = high bytes
    with pytest.raises(SpecError, match="65536 bytes") as e:
        submit({"--env": [f"A={'x' * (high - 2)}"]})
    assert e.value.flag == "--env"
    many = [f"V{i}=1" for i in range(LIMITS["env.count"].high + 1)]
    with pytest.raises(SpecError, match="variables"):
        submit({"--env": many})


@pytest.mark.parametrize(
    ("flags", "command", "flag"),
    [
        ({"--name": "a\0b"}, None, "--name"),
        ({"--name": "a\x1b[2Jb"}, None, "--name"),
        ({"--queue": "q\0r"}, None, "--queue"),
        ({"--env": ["A=a\0b"]}, None, "--env"),
        ({"--env": ["A=\x07"]}, None, "--env"),
        ({"--outputs": ["out\0"]}, None, "--outputs"),
        ({"--checkpoint-dir": "ck\x01"}, None, "--checkpoint-dir"),
        ({}, ["echo", "a\0b"], "the command after --"),
        ({}, ["echo", "\x7f"], "the command after --"),
    ],
)
def test_control_characters_are_refused_naming_where(
    flags: dict[str, Any], command: list[str] | None, flag: str
) -> None:
    with pytest.raises(SpecError, match=r"NUL|control character") as e:
        submit(flags, command)
    assert e.value.flag == flag


def test_tabs_and_newlines_are_fine_in_arguments_and_env_values() -> None:
    m = submit({"--env": ["A=a\tb\nc"]}, ["sh", "-c", "echo 1\techo 2\necho 3"])
    assert m.command[2] == "echo 1\techo 2\necho 3"
    assert dict(m.env)["A"] == "a\tb\nc"


def test_names_are_bounded() -> None:
    submit({"--name": "n" * 256})
    with pytest.raises(SpecError, match="256 characters"):
        submit({"--name": "n" * 257})
    with pytest.raises(SpecError, match="64 characters"):
        submit({"--queue": "q" * 65})


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"priority": 10**23}, "manifest priority"),
        ({"max_retries": 10**20}, "manifest max_retries"),
        ({"time_limit": "99999999999999999d"}, "manifest time_limit"),
        ({"time_limit": 1.5}, "manifest time_limit"),
        ({"resources": {"memory": [1]}}, "manifest resources.memory"),
        ({"resources": {"gpus": 1.5}}, "manifest resources.gpus"),
        ({"resources": {"cpu": "100000"}}, "manifest resources.cpu"),
        ({"env": {"A": "a\0b"}}, "manifest env"),
        ({"name": "x\0"}, "manifest name"),
        ({"command": ["x\0"]}, "manifest command"),
        ({"begin_time": float("nan")}, "manifest begin_time"),
        ({"array": "0-1000000"}, "manifest array"),
    ],
)
def test_a_manifest_keeps_the_same_limits(data: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as e:
        manifest_from_dict({"command": ["true"], **data})
    assert e.value.flag == field, str(e.value)


def test_every_limit_names_its_range() -> None:
    for name, limit in LIMITS.items():
        assert limit.low <= limit.high, name
        assert limit.accepted.startswith(limit.what), name


@pytest.mark.parametrize(
    ("query", "parse", "want"),
    [
        ({"timeout": "nan"}, "wait", "timeout='nan': want seconds from 0 to 300"),
        ({"timeout": "-1"}, "wait", "timeout='-1'"),
        ({"timeout": "inf"}, "wait", "timeout='inf'"),
        ({"after": "-1"}, "logs", "after='-1': want a whole number from 0"),
        ({"tail": "x"}, "logs", "tail='x'"),
        ({"after": "9" * 30}, "logs", "after="),
    ],
)
def test_queries_out_of_range_name_the_parameter(
    query: dict[str, str], parse: str, want: str
) -> None:
    from rbs.wire.errors import InvalidRequest
    from rbs.wire.jobs_api_requests import logs_query, wait_timeout

    with pytest.raises(InvalidRequest) as e:
        wait_timeout(query) if parse == "wait" else logs_query(query)
    assert want in str(e.value)


def test_queries_in_range_pass() -> None:
    from rbs.wire.jobs_api_requests import logs_query, wait_timeout

    assert wait_timeout({"timeout": "1000"}) == 300.0
    assert wait_timeout({}) == 30.0
    assert logs_query({"after": "5", "tail": "0"}) == (5, 0, False)
