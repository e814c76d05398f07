"""`--cpu-cores 0-3,6`: core id lists as Joblet and `taskset -c` write them."""

from __future__ import annotations

from rbs import units
from rbs.units import SpecError

CORES_FORMS = "core ids and ranges, e.g. 0-3,6 (as taskset -c and cpuset.cpus write them)"


def parse_cores(value: str, flag: str = "--cpu-cores") -> tuple[int, ...]:
    """The sorted, distinct core ids of a list such as `0-3,6`."""
    if not isinstance(value, str) or not value.strip():
        raise SpecError(flag, value, "is empty", CORES_FORMS)
    cores: set[int] = set()
    for part in value.replace(" ", "").split(","):
        first, dash, last = part.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise SpecError(flag, value, f"{part!r} is not a core id or range", CORES_FORMS)
        lo, hi = int(first), int(last) if dash else int(first)
        if hi < lo:
            raise SpecError(flag, value, f"range {part} ends before it starts", CORES_FORMS)
        units.check_limit("cpu_cores", hi, flag)
        cores.update(range(lo, hi + 1))
    return tuple(sorted(cores))


def format_cores(cores: tuple[int, ...] | list[int]) -> str:
    """`0-3,6` for (0, 1, 2, 3, 6): the form cpuset.cpus takes."""
    out: list[str] = []
    ids = sorted(set(cores))
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(out)
