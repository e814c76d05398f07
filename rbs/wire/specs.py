"""Parsers for job-spec text (durations, arrays, dependencies, quantities, env) with precise errors."""

from __future__ import annotations

import re
from collections.abc import Iterable
from decimal import Decimal, InvalidOperation

from rbs.model import ArraySpec, Dependency, DepKind


class SpecError(ValueError):
    """A job-spec value that does not parse: names the flag, the value and the accepted forms."""

    def __init__(self, flag: str, value: object, problem: str, accepted: str) -> None:
        self.flag = flag
        self.value = value
        self.problem = problem
        self.accepted = accepted
        super().__init__(f"{flag} {value!r}: {problem}; accepted forms: {accepted}")


DURATION_FORMS = "SECONDS (90), 30m, 2h, 1d, 1h30m, 1d12h, 45s, or HH:MM:SS"
ARRAY_FORMS = "0-99, 1,3,7, 0-99:2 (step), 0-99%10 (at most 10 running), 1-5,10-20%4"
DEPS_FORMS = "afterok:ID, afterany:ID:ID, afternotok:ID, comma-separated (all must hold)"
CPU_FORMS = 'a Kubernetes cpu quantity: "2", "0.5", "500m"'
MEMORY_FORMS = 'a Kubernetes memory quantity: "8Gi", "512Mi", "1G", "1500M", "1073741824"'
ENV_FORMS = "KEY=VALUE with KEY a shell variable name"

_DURATION = re.compile(r"(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+)s)?")
_CLOCK = re.compile(r"(?:(?P<h>\d+):)?(?P<m>\d+):(?P<s>\d+)")
_RANGE = re.compile(r"(?P<first>\d+)(?:-(?P<last>\d+)(?::(?P<step>\d+))?)?")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MEMORY = re.compile(r"(?P<num>\d+(?:\.\d+)?(?:[eE]\d+)?)(?P<unit>[KMGTPE]i|[kKMGTPE])?")
_MEMORY_UNITS = {
    None: 1,
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


def parse_duration(value: str | int, flag: str = "--time") -> int:
    """Seconds in a duration: `90`, `30m`, `2h`, `1d`, `1h30m`, `HH:MM:SS`; at least one second."""
    if isinstance(value, bool):
        raise SpecError(flag, value, "not a duration", DURATION_FORMS)
    if isinstance(value, int):
        seconds = value
    else:
        text = value.strip().lower()
        if text.isdigit():
            seconds = int(text)
        elif (m := _CLOCK.fullmatch(text)) is not None:
            if (m["h"] is not None and int(m["m"]) >= 60) or int(m["s"]) >= 60:
                raise SpecError(flag, value, "minutes and seconds must be below 60", DURATION_FORMS)
            seconds = int(m["h"] or 0) * 3600 + int(m["m"]) * 60 + int(m["s"])
        else:
            m = _DURATION.fullmatch(text)
            if m is None or not text:
                raise SpecError(flag, value, "not a duration", DURATION_FORMS)
            seconds = (
                int(m["d"] or 0) * 86400
                + int(m["h"] or 0) * 3600
                + int(m["m"] or 0) * 60
                + int(m["s"] or 0)
            )
    if seconds < 1:
        raise SpecError(flag, value, "a time limit must be at least one second", DURATION_FORMS)
    return seconds


def format_duration(seconds: int) -> str:
    """The shortest `1d2h3m4s` text for a whole number of seconds (`0s` for zero)."""
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        n, seconds = divmod(seconds, size)
        if n:
            parts.append(f"{n}{unit}")
    return "".join(parts) or "0s"


def parse_array(value: str, flag: str = "--array", max_size: int = 1_000_000) -> ArraySpec:
    """An array spec: comma-separated `N`, `A-B` or `A-B:STEP`, then an optional `%N` throttle."""
    text = value.strip()
    body, sep, limit = text.partition("%")
    throttle: int | None = None
    if sep:
        if not limit.isdigit() or int(limit) < 1:
            raise SpecError(
                flag, value, f"throttle %{limit} must be a whole number >= 1", ARRAY_FORMS
            )
        throttle = int(limit)
    ranges: list[tuple[int, int, int]] = []
    for part in body.split(","):
        m = _RANGE.fullmatch(part.strip())
        if m is None:
            raise SpecError(flag, value, f"{part.strip()!r} is not an index or range", ARRAY_FORMS)
        first = int(m["first"])
        last = int(m["last"]) if m["last"] is not None else first
        step = int(m["step"]) if m["step"] is not None else 1
        if last < first:
            raise SpecError(flag, value, f"range {first}-{last} runs backwards", ARRAY_FORMS)
        if step < 1:
            raise SpecError(flag, value, f"step :{step} must be at least 1", ARRAY_FORMS)
        last -= (last - first) % step  # the last index the step actually reaches
        ranges.append((first, last, step))
    ranges.sort()
    for (first, _, _), (_, prev_last, _) in zip(ranges[1:], ranges, strict=False):
        if first <= prev_last:
            raise SpecError(flag, value, f"index {first} is covered twice", ARRAY_FORMS)
    spec = ArraySpec(ranges=tuple(ranges), throttle=throttle)
    if spec.size > max_size:
        raise SpecError(
            flag, value, f"{spec.size} tasks exceed the limit of {max_size} per array", ARRAY_FORMS
        )
    return spec


def parse_dependencies(value: str, flag: str = "--deps") -> tuple[Dependency, ...]:
    """Slurm-style dependencies: `afterok:1,afterany:2:3` (every listed condition must hold)."""
    deps: list[Dependency] = []
    kinds = ", ".join(k.value for k in DepKind)
    for clause in value.split(","):
        clause = clause.strip()
        kind_text, _, ids = clause.partition(":")
        try:
            kind = DepKind(kind_text.lower())
        except ValueError:
            raise SpecError(
                flag, value, f"unknown dependency kind {kind_text!r} (known: {kinds})", DEPS_FORMS
            ) from None
        if not ids:
            raise SpecError(flag, value, f"{kind_text} names no job id", DEPS_FORMS)
        for job in ids.split(":"):
            if "_" in job:
                raise SpecError(
                    flag, value, f"{job!r} is an array task; depend on the whole job id", DEPS_FORMS
                )
            if not job.isdigit() or int(job) < 1:
                raise SpecError(flag, value, f"{job!r} is not a job id", DEPS_FORMS)
            deps.append(Dependency(kind=kind, job_id=int(job)))
    return tuple(deps)


def parse_cpu(value: str | int | float, flag: str = "--cpus") -> int:
    """Millicores in a Kubernetes cpu quantity (`2`, `0.5`, `500m`); at least `1m`."""
    text = str(value).strip()
    try:
        millis = Decimal(text[:-1]) if text.endswith("m") else Decimal(text) * 1000
    except InvalidOperation:
        raise SpecError(flag, value, "not a cpu quantity", CPU_FORMS) from None
    if not millis.is_finite() or millis != millis.to_integral_value():
        raise SpecError(flag, value, "finer than one millicore (1m)", CPU_FORMS)
    if millis < 1:
        raise SpecError(flag, value, "a cpu request must be positive", CPU_FORMS)
    return int(millis)


def format_cpu(millis: int) -> str:
    """The Kubernetes cpu quantity for millicores: `2` for whole cores, else `500m`."""
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def parse_memory(value: str | int, flag: str = "memory") -> int:
    """Bytes in a Kubernetes memory quantity (`8Gi`, `512Mi`, `1G`, `1e9`); must be positive."""
    if isinstance(value, bool):
        raise SpecError(flag, value, "not a memory quantity", MEMORY_FORMS)
    if isinstance(value, int):
        amount = Decimal(value)
    else:
        m = _MEMORY.fullmatch(value.strip())
        if m is None:
            raise SpecError(flag, value, "not a memory quantity", MEMORY_FORMS)
        amount = Decimal(m["num"]) * _MEMORY_UNITS[m["unit"]]
    if amount != amount.to_integral_value():
        raise SpecError(flag, value, "not a whole number of bytes", MEMORY_FORMS)
    if amount < 1:
        raise SpecError(flag, value, "a memory request must be positive", MEMORY_FORMS)
    return int(amount)


def parse_memory_gb(value: str | float, flag: str = "--memory-gb") -> int:
    """Bytes in a `--memory-gb` value; like Slurm's `--mem=8G`, one GB here is 2**30 bytes."""
    try:
        gb = Decimal(str(value).strip())
    except InvalidOperation:
        raise SpecError(flag, value, "not a number", "a number of GiB: 8, 0.5") from None
    if not gb.is_finite() or gb <= 0:
        raise SpecError(flag, value, "must be a positive number", "a number of GiB: 8, 0.5")
    return max(1, int(gb * 2**30))


def format_memory(nbytes: int) -> str:
    """The shortest exact Kubernetes quantity for a byte count: `8Gi`, `512Mi`, `1500`."""
    for unit in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        size = _MEMORY_UNITS[unit]
        if nbytes % size == 0:
            return f"{nbytes // size}{unit}"
    return str(nbytes)


def parse_count(value: str | int, flag: str, minimum: int = 0) -> int:
    """A whole number at least `minimum` (GPUs, nodes, retries, priority)."""
    if isinstance(value, bool):
        raise SpecError(flag, value, "not a whole number", f"a whole number >= {minimum}")
    try:
        n = value if isinstance(value, int) else int(value.strip(), 10)
    except ValueError:
        raise SpecError(flag, value, "not a whole number", f"a whole number >= {minimum}") from None
    if n < minimum:
        raise SpecError(flag, value, f"must be at least {minimum}", f"a whole number >= {minimum}")
    return n


def parse_env(items: Iterable[str], flag: str = "--env") -> tuple[tuple[str, str], ...]:
    """`KEY=VALUE` items as sorted pairs; a key given twice is an error, not a silent override."""
    env: dict[str, str] = {}
    for item in items:
        key, sep, val = item.partition("=")
        if not sep:
            raise SpecError(flag, item, "has no '='", ENV_FORMS)
        if not _ENV_KEY.fullmatch(key):
            raise SpecError(flag, item, f"{key!r} is not a variable name", ENV_FORMS)
        if key in env:
            raise SpecError(flag, item, f"{key} is given twice", ENV_FORMS)
        env[key] = val
    return tuple(sorted(env.items()))


def parse_task_id(value: str, flag: str = "job id") -> tuple[int, int | None]:
    """A job id `12` or an array task id `12_3`, as (job id, index or None)."""
    job, sep, index = value.strip().partition("_")
    forms = "ID (12) or ID_INDEX (12_3)"
    if not job.isdigit() or int(job) < 1:
        raise SpecError(flag, value, "not a job id", forms)
    if not sep:
        return int(job), None
    if not index.isdigit():
        raise SpecError(flag, value, f"{index!r} is not an array index", forms)
    return int(job), int(index)
