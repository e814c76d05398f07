"""Quantities, sizes and durations: one parser and one formatter per kind, one meaning per suffix.

Every flag, config key and rule attribute that takes a size, a cpu amount or a
duration goes through this module, so `10G` means the same bytes everywhere. The
meanings are Kubernetes' (the job rules' `memory = "8Gi"` already used them):

    size suffix   meaning                      example
    (none)        bytes                        4096, 1e9
    k, K          10^3 bytes                   2k = 2,000
    M, G, T       10^6, 10^9, 10^12 bytes      10G = 10,000,000,000
    P, E          10^15, 10^18 bytes
    Ki, Mi        2^10, 2^20 bytes             512Mi = 536,870,912
    Gi, Ti        2^30, 2^40 bytes             10Gi = 10,737,418,240
    Pi, Ei        2^50, 2^60 bytes

Suffixes are case-sensitive and take no trailing `B` (`10GB` is refused with a hint,
not guessed). A fraction is fine when it comes to whole bytes (`1.5Gi`).

    cpu           millicores: `2` (cores), `0.5`, `500m`
    duration      whole seconds: `90`, `45s`, `30m`, `2h`, `1d`, `1h30m`, `1d12h`,
                  `MM:SS`, `HH:MM:SS` (units in any case)

Errors are `SpecError(flag, value, problem, accepted)`: the caller passes the name
of its flag, attribute or config key, and the message says what is accepted.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation


class SpecError(ValueError):
    """A flag, config or spec value that does not parse: names where it came from, the value
    and the accepted forms."""

    def __init__(self, flag: str, value: object, problem: str, accepted: str) -> None:
        self.flag = flag
        self.value = value
        self.problem = problem
        self.accepted = accepted
        super().__init__(f"{flag} {value!r}: {problem}; accepted forms: {accepted}")


SIZE_FORMS = (
    "a number of bytes with an optional suffix Ki, Mi, Gi, Ti, Pi, Ei (powers of 1024) "
    "or k, K, M, G, T, P, E (powers of 1000), e.g. 8Gi, 512Mi or 10G"
)
CPU_FORMS = 'a Kubernetes cpu quantity: "2", "0.5", "500m"'
DURATION_FORMS = "SECONDS (90), 30m, 2h, 1d, 1h30m, 1d12h, 45s, or HH:MM:SS"
GIB_FORMS = "a number of GiB: 8, 0.5"

SIZE_UNITS: dict[str, int] = {
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
GIB = 2**30

_SIZE = re.compile(r"(?P<num>\d+(?:\.\d+)?(?:[eE]\d+)?)(?P<unit>[KMGTPE]i|[kKMGTPE])?")
# Near misses worth a hint: a trailing B, a lower-case suffix, a space before it.
_SIZE_NEAR = re.compile(r"(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>[kmgtpe])(?P<i>i?)b?", re.IGNORECASE)
_DURATION = re.compile(r"(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+)s)?")
_CLOCK = re.compile(r"(?:(?P<h>\d+):)?(?P<m>\d+):(?P<s>\d+)")


def parse_size(value: str | int, flag: str = "size", *, minimum: int = 0) -> int:
    """Bytes in a size (`8Gi`, `512Mi`, `10G`, `1e9`, `4096`; see the module docstring).

    `minimum` is the smallest size the caller takes: 0 for bounds (`--max-size 0`
    empties a store), 1 for memory requests.
    """
    if isinstance(value, bool):
        raise SpecError(flag, value, "not a size", SIZE_FORMS)
    if isinstance(value, int):
        amount = Decimal(value)
    elif not isinstance(value, str):
        raise SpecError(flag, value, f"has type {type(value).__name__}, not a size", SIZE_FORMS)
    else:
        m = _SIZE.fullmatch(value.strip())
        if m is None:
            raise SpecError(flag, value, _size_problem(value), SIZE_FORMS)
        amount = Decimal(m["num"]) * SIZE_UNITS[m["unit"] or ""]
    if amount != amount.to_integral_value():
        raise SpecError(flag, value, "not a whole number of bytes", SIZE_FORMS)
    if amount < minimum:
        problem = (
            "must be positive"
            if minimum == 1
            else "must not be negative"
            if minimum == 0
            else f"must be at least {minimum} bytes"
        )
        raise SpecError(flag, value, problem, SIZE_FORMS)
    return int(amount)


def _size_problem(text: str) -> str:
    m = _SIZE_NEAR.fullmatch(text.strip())
    if m is None:
        return "not a size"
    num, unit = m["num"], m["unit"].upper()
    if m["i"]:
        return f"not a size (did you mean {num}{unit}i?)"
    power = "KMGTPE".index(unit) + 1
    return (
        f"not a size (did you mean {num}{unit}, {num} x 10^{3 * power} bytes, "
        f"or {num}{unit}i, {num} x 2^{10 * power}?)"
    )


def format_size(nbytes: int) -> str:
    """The shortest exact binary quantity for a byte count: `8Gi`, `512Mi`, `1500`.

    It parses back to the same count; decimal suffixes are never chosen, so a count
    prints the same way it always has (in manifests and job listings too).
    """
    for unit in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        size = SIZE_UNITS[unit]
        if nbytes and nbytes % size == 0:
            return f"{nbytes // size}{unit}"
    return str(nbytes)


def human_size(nbytes: int) -> str:
    """A byte count rounded for people: `5000 B`, `4.9 KiB`, `1.5 GiB`."""
    n = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{nbytes} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def parse_gib(value: str | float, flag: str = "--memory-gb") -> int:
    """Bytes in a plain number of GiB, as the `--memory-gb` flags take it: 8 means 8Gi."""
    try:
        gib = Decimal(str(value).strip())
    except InvalidOperation:
        raise SpecError(flag, value, "not a number", GIB_FORMS) from None
    if not gib.is_finite() or gib <= 0:
        raise SpecError(flag, value, "must be a positive number", GIB_FORMS)
    return max(1, int(gib * GIB))


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


def parse_duration(value: str | int, flag: str = "--time", *, minimum: int = 1) -> int:
    """Whole seconds in a duration: `90`, `30m`, `2h`, `1d`, `1h30m`, `HH:MM:SS`.

    `minimum` is 1 for time limits (a limit of zero means nothing) and 0 for leases.
    """
    if isinstance(value, bool):
        raise SpecError(flag, value, "not a duration", DURATION_FORMS)
    if isinstance(value, int):
        seconds = value
    elif not isinstance(value, str):
        raise SpecError(
            flag, value, f"has type {type(value).__name__}, not a duration", DURATION_FORMS
        )
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
    if seconds < minimum:
        problem = (
            "a time limit must be at least one second"
            if minimum == 1
            else "must not be negative"
            if minimum == 0
            else f"must be at least {format_duration(minimum)}"
        )
        raise SpecError(flag, value, problem, DURATION_FORMS)
    return seconds


WHEN_FORMS = (
    "now+DURATION (now+2h), +DURATION, an ISO date and time (2026-12-02T09:30, local time "
    "unless it names a zone), or epoch seconds"
)


def parse_when(value: str | int | float, flag: str, now: float) -> float:
    """Epoch seconds of a point in time: `now+2h`, `+30m`, `2026-12-02T09:30`, `1767225600`.

    `now` is passed in (this module reads no clock); a time before it is refused.
    """
    if isinstance(value, bool):
        raise SpecError(flag, value, "not a time", WHEN_FORMS)
    if isinstance(value, int | float):
        when = float(value)
    else:
        text = str(value).strip()
        rel = text.removeprefix("now").strip() if text.lower().startswith("now") else text
        if rel.startswith("+"):
            when = now + parse_duration(rel[1:].strip(), flag)
        elif text.lower() == "now":
            when = now
        elif re.fullmatch(r"\d+(\.\d+)?", text):
            when = float(text)
        else:
            import datetime as dt

            try:
                point = dt.datetime.fromisoformat(text)
            except ValueError:
                raise SpecError(flag, value, "not a time", WHEN_FORMS) from None
            when = point.timestamp()  # a naive time is local, as `date` reads it
    if not when >= now - 1:  # a second's slack for the trip to the server
        raise SpecError(flag, value, "is in the past", WHEN_FORMS)
    return when


def format_duration(seconds: int) -> str:
    """The shortest `1d2h3m4s` text for a whole number of seconds (`0s` for zero)."""
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        n, seconds = divmod(seconds, size)
        if n:
            parts.append(f"{n}{unit}")
    return "".join(parts) or "0s"


def human_duration(seconds: float) -> str:
    """A span rounded for people: `45s`, `1.5m`, `3.0h`, `2.0d`."""
    for unit, span in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= span:
            return f"{seconds / span:.1f}{unit}"
    return f"{seconds:.0f}s"


# ---------------------------------------------------------------- the ranges every job value keeps
#
# One table of what rbs accepts in a job, wherever the value comes from: `rbs job submit`
# flags, a manifest posted to the jobs API, a job target's attributes. A value outside
# its range is refused at submit (the flag, the field or the attribute, the value and
# the range), never carried to a worker to fail there. README "Limits" shows the same
# table; tests/unit/test_units.py holds the two together.


class Limit:
    """The accepted range of one job value, `low` to `high` inclusive, in its unit."""

    __slots__ = ("high", "low", "show", "unit", "what")

    def __init__(
        self, what: str, low: int, high: int, show: Callable[[int], str] = str, unit: str = ""
    ) -> None:
        self.what = what
        self.low = low
        self.high = high
        self.show = show
        self.unit = unit

    @property
    def accepted(self) -> str:
        return f"{self.what} from {self.show(self.low)} to {self.show(self.high)}{self.unit}"

    def check(self, value: int, flag: str) -> int:
        """`value` if it is in range, else a SpecError naming `flag`, the value and the range."""
        if not self.low <= value <= self.high:
            side = "above the largest" if value > self.high else "below the smallest"
            shown = (self.show(value) if value >= 0 else str(value)) + self.unit
            raise SpecError(flag, shown, f"{side} value accepted", self.accepted)
        return value


# field (as rbs.wire.manifest names it) -> its range.
LIMITS: dict[str, Limit] = {
    "priority": Limit("a whole number", -1_000_000, 1_000_000),
    "max_retries": Limit("a whole number", 0, 1_000),
    "restarts": Limit("a whole number", 0, 1_000),
    "time_limit": Limit("a duration", 1, 366 * 86400, format_duration),
    "nodes": Limit("a number of nodes", 1, 10_000),
    "resources.cpu": Limit("a cpu quantity", 1, 4096 * 1000, format_cpu),
    "resources.memory": Limit("a size", 1, 64 * SIZE_UNITS["Ti"], format_size),
    "resources.gpus": Limit("a number of GPUs", 0, 256),
    "array.size": Limit("a number of tasks", 1, 1_000_000, unit=" tasks"),
    "array.index": Limit("an index", 0, 999_999_999),
    "dependencies": Limit("a number of dependencies", 0, 1_000, unit=" dependencies"),
    "env.size": Limit("a size (KEY=VALUE plus 1, summed)", 0, 64 * 1024, unit=" bytes"),
    "env.count": Limit("a number of variables", 0, 4_096, unit=" variables"),
    "command.args": Limit("a number of arguments", 1, 65_536, unit=" arguments"),
    "command.size": Limit("a size (each argument plus 1)", 1, 256 << 10, unit=" bytes"),
    "outputs": Limit("a number of paths", 0, 1_000, unit=" paths"),
    "max_iobps": Limit("a rate in bytes", 4096, 1 << 50, format_size, unit="/s"),
    "cpu_cores": Limit("a core id", 0, 4_095),
    "name": Limit("a length", 1, 256, unit=" characters"),
    "queue": Limit("a length", 1, 64, unit=" characters"),
    "path": Limit("a length", 1, 4_096, unit=" characters"),
}


def check_limit(field: str, value: int, flag: str) -> int:
    """`value` if `LIMITS[field]` accepts it; else a SpecError naming `flag` and the range."""
    return LIMITS[field].check(value, flag)
