"""Parsers for job-spec text that is not a unit: arrays, dependencies, counts, env, task ids.

Sizes, cpu quantities and durations are rbs.units'; these parsers raise its SpecError.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rbs.model import ArraySpec, Dependency, DepKind

# Every spec parser's error, the units' included; re-exported for the callers here.
from rbs.units import SpecError as SpecError

ARRAY_FORMS = "0-99, 1,3,7, 0-99:2 (step), 0-99%10 (at most 10 running), 1-5,10-20%4"
DEPS_FORMS = "afterok:ID, afterany:ID:ID, afternotok:ID, comma-separated (all must hold)"
ENV_FORMS = "KEY=VALUE with KEY a shell variable name"

_RANGE = re.compile(r"(?P<first>\d+)(?:-(?P<last>\d+)(?::(?P<step>\d+))?)?")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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


def parse_count(value: str | int, flag: str, minimum: int = 0) -> int:
    """A whole number at least `minimum` (GPUs, nodes, retries, priority)."""
    if isinstance(value, bool):
        raise SpecError(flag, value, "not a whole number", f"a whole number >= {minimum}")
    if not isinstance(value, int | str):
        raise SpecError(
            flag, value, f"has type {type(value).__name__}", f"a whole number >= {minimum}"
        )
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


_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*")


def parse_image(value: str, what: str) -> str:
    """An OCI image reference as `podman run` takes it: `debian:12`, `localhost/x:tag`,
    `registry.example/ns/x@sha256:HEX`; no spaces, none empty."""
    text = value.strip()
    if not _IMAGE.fullmatch(text) or len(text) > 512:
        raise SpecError(
            what, value, "is not an image reference", "NAME[:TAG] or NAME@sha256:DIGEST"
        )
    return text


def parse_network(value: str, what: str = "--network") -> str:
    """A container job's network: "host" (the default) or "none"."""
    if value not in ("host", "none"):
        raise SpecError(what, value, "unknown network", "host (the default) or none")
    return value
