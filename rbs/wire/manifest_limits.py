"""The limits a job manifest keeps (rbs.units.LIMITS) and the characters its text may hold.

Every manifest is checked here before it is accepted, whichever way it came:
`rbs.wire.manifest.apply_flags` (flags), `manifest_from_dict` (a manifest posted to the
jobs API, or a FILE.job.json), and a job target's attributes at analysis
(rbs.build.jobtarget). The caller says how to name a field to the user (`label`):
the flag it came from, `manifest FIELD`, or a BUILD attribute.

Text: no NUL and no other control character (U+0000-U+001F, U+007F-U+009F) in names,
the queue, env keys, paths or provenance, since they end up in argv, environ, file
names and terminals, where a NUL cuts a string short and escapes rewrite a screen.
The command's arguments and env values may hold a tab, a newline or a carriage
return (`sh -c` scripts, multi-line values), nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

from rbs import units
from rbs.model import JobManifest
from rbs.units import SpecError

Label = Callable[[str], str]

TEXT_FORMS = "text without control characters (no NUL, escape or other code below U+0020)"
ARG_FORMS = "text without control characters other than tab and newline (no NUL)"
_ARG_OK = frozenset("\t\n\r")


def _bad_char(text: str, allowed: frozenset[str] = frozenset()) -> str | None:
    for c in text:
        o = ord(c)
        if (o < 0x20 or 0x7F <= o <= 0x9F) and c not in allowed:
            return "a NUL byte" if o == 0 else f"the control character U+{o:04X}"
    return None


def check_text(text: str, flag: str, *, arg: bool = False) -> str:
    """`text` unless it holds a control character (tab and newline are fine in an `arg`)."""
    bad = _bad_char(text, _ARG_OK if arg else frozenset())
    if bad is not None:
        raise SpecError(flag, text, f"contains {bad}", ARG_FORMS if arg else TEXT_FORMS)
    return text


def _length(field: str, text: str, flag: str) -> None:
    limit = units.LIMITS[field]
    if len(text) > limit.high:
        raise SpecError(flag, text[:40] + "...", f"is {len(text)}{limit.unit} long", limit.accepted)


def check_manifest(m: JobManifest, label: Label) -> JobManifest:
    """`m` if every value is in range and all its text is clean; else a SpecError that
    names the field as `label(field)` gives it (a flag, `manifest FIELD`, an attribute)."""
    lim = units.check_limit
    _command(m.command, label("command"))
    _length("name", m.name, label("name"))
    check_text(m.name, label("name"))
    _length("queue", m.queue, label("queue"))
    check_text(m.queue, label("queue"))
    lim("priority", m.priority, label("priority"))
    lim("max_retries", m.max_retries, label("max_retries"))
    lim("restarts", m.restarts, label("restarts"))
    if m.time_limit is not None:
        lim("time_limit", m.time_limit, label("time_limit"))
    for field in ("nodes", "min_nodes", "max_nodes"):
        value = getattr(m, field)
        if value is not None:
            units.LIMITS["nodes"].check(value, label(field))
    lim("resources.cpu", m.resources.cpu_millis, label("resources.cpu"))
    lim("resources.memory", m.resources.memory_bytes, label("resources.memory"))
    lim("resources.gpus", m.resources.gpus, label("resources.gpus"))
    _env(m.env, label("env"))
    _paths(m.outputs, label("outputs"))
    lim("outputs", len(m.outputs), label("outputs"))
    if m.checkpoint_dir is not None:
        _paths([m.checkpoint_dir], label("checkpoint_dir"))
    if m.array is not None:
        lim("array.size", m.array.size, label("array"))
        lim("array.index", max(last for _, last, _ in m.array.ranges), label("array"))
    lim("dependencies", len(m.dependencies), label("dependencies"))
    if m.max_iobps is not None:
        lim("max_iobps", m.max_iobps, label("max_iobps"))
    for core in m.cpu_cores:
        lim("cpu_cores", core, label("cpu_cores"))
    if m.begin_time is not None and not (math.isfinite(m.begin_time) and m.begin_time >= 0):
        raise SpecError(
            label("begin_time"), m.begin_time, "is not a time", "epoch seconds, e.g. 1767225600"
        )
    if m.deadline is not None and not (math.isfinite(m.deadline) and m.deadline >= 0):
        raise SpecError(
            label("deadline"), m.deadline, "is not a time", "epoch seconds, e.g. 1767225600"
        )
    return m


def _command(argv: Iterable[str], flag: str) -> None:
    args = list(argv)
    units.check_limit("command.args", len(args), flag)
    units.check_limit("command.size", sum(len(a.encode()) + 1 for a in args), flag)
    for a in args:
        check_text(a, flag, arg=True)


def _env(env: Iterable[tuple[str, str]], flag: str) -> None:
    items = list(env)
    units.check_limit("env.count", len(items), flag)
    units.check_limit("env.size", sum(len(f"{k}={v}".encode()) + 1 for k, v in items), flag)
    for k, v in items:
        check_text(k, flag)
        bad = _bad_char(v, _ARG_OK)
        if bad is not None:
            raise SpecError(flag, f"{k}=...", f"the value of {k} contains {bad}", ARG_FORMS)


def _paths(paths: Iterable[str], flag: str) -> None:
    for p in paths:
        _length("path", p, flag)
        check_text(p, flag)


def check_provenance(prov: Mapping[str, str]) -> dict[str, str]:
    """A provenance map as plain strings, each key and source clean and short."""
    out: dict[str, str] = {}
    for k, v in prov.items():
        key, source = str(k), str(v)
        for text in (key, source):
            if len(text) > units.LIMITS["path"].high:
                raise SpecError("provenance", text[:40] + "...", "is too long", "short text")
            check_text(text, "provenance")
        out[key] = source
    return out
