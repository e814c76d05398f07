"""JobManifest <-> deterministic JSON, and CLI flags layered over a manifest with per-field
provenance (its keys and sources: rbs.wire.manifest_provenance)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from rbs import units
from rbs.model import (
    MANIFEST_API_VERSION,
    Dependency,
    Digest,
    JobManifest,
    Resources,
)
from rbs.units import SpecError
from rbs.wire import specs
from rbs.wire.cores import format_cores, parse_cores
from rbs.wire.manifest_limits import check_manifest
from rbs.wire.manifest_provenance import DEFAULT_SOURCE, PROVENANCE_FIELDS, field_label
from rbs.wire.manifest_provenance import provenance_for as provenance_for  # for its users

# Container jobs only (and so absent from other manifests, which read as before).
CONTAINER_KEYS = ("container", "network")
# Joblet's resource flags, present only when set (so other manifests read as before).
PINNING_KEYS = ("cpu_cores", "max_iobps")
# Present only when true (so other manifests read as before).
PREEMPT_KEYS = ("preemptible", "interactive", "pty")
_TOP_KEYS = frozenset(
    {"apiVersion", "resources", *CONTAINER_KEYS, *PINNING_KEYS, *PREEMPT_KEYS}
    | {f.split(".")[0] for f in PROVENANCE_FIELDS}
)


def manifest_to_dict(m: JobManifest) -> dict[str, Any]:
    """The manifest as plain JSON values; every field is present (the container ones when
    the job names an image), so the form is canonical."""
    extra: dict[str, Any] = {}
    if m.container is not None:
        extra = {"container": m.container, "network": m.network}
    if m.cpu_cores:
        extra["cpu_cores"] = format_cores(m.cpu_cores)
    if m.max_iobps is not None:
        extra["max_iobps"] = m.max_iobps
    extra |= {k: True for k in PREEMPT_KEYS if getattr(m, k)}
    return extra | {
        "apiVersion": m.api_version,
        "name": m.name,
        "command": list(m.command),
        "input_root": str(m.input_root) if m.input_root is not None else None,
        "resources": {
            "cpu": units.format_cpu(m.resources.cpu_millis),
            "memory": units.format_size(m.resources.memory_bytes),
            "gpus": m.resources.gpus,
        },
        "queue": m.queue,
        "priority": m.priority,
        "time_limit": m.time_limit,
        "nodes": m.nodes,
        "elastic": m.elastic,
        "min_nodes": m.min_nodes,
        "max_nodes": m.max_nodes,
        "max_retries": m.max_retries,
        "requeue": m.requeue,
        "restarts": m.restarts,
        "checkpoint_dir": m.checkpoint_dir,
        "env": dict(m.env),
        "outputs": list(m.outputs),
        "secrets": list(m.secrets),
        "array": str(m.array) if m.array is not None else None,
        "dependencies": [str(d) for d in m.dependencies],
        "begin_time": m.begin_time,
        "deadline": m.deadline,
    }


def manifest_to_json(m: JobManifest) -> str:
    """Deterministic JSON: sorted keys, no whitespace; same manifest, same bytes."""
    return json.dumps(
        manifest_to_dict(m), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )


def manifest_from_json(text: str | bytes) -> JobManifest:
    """Parse manifest JSON (the canonical form, or a hand-written one using the text forms)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise SpecError("manifest", str(e), "not valid JSON", "a JSON object") from None
    return manifest_from_dict(data)


def manifest_from_dict(data: Any) -> JobManifest:
    """Build a manifest from JSON values; durations and quantities may use their text forms."""
    if not isinstance(data, dict):
        raise SpecError("manifest", type(data).__name__, "not an object", "a JSON object")
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise SpecError(
            "manifest", unknown[0], "unknown field", "one of " + ", ".join(sorted(_TOP_KEYS))
        )
    version = data.get("apiVersion", MANIFEST_API_VERSION)
    if version != MANIFEST_API_VERSION:
        raise SpecError("manifest apiVersion", version, "unsupported version", MANIFEST_API_VERSION)
    kw: dict[str, Any] = {}
    for key in ("name", "queue", "checkpoint_dir", "container", "network"):
        if data.get(key) is not None:
            kw[key] = _typed(data, key, str)
    if "container" in kw:
        kw["container"] = specs.parse_image(kw["container"], "manifest container")
    if "checkpoint_dir" in kw:
        kw["checkpoint_dir"] = _job_path(kw["checkpoint_dir"], "manifest checkpoint_dir")
    kw["command"] = tuple(_str_list(data, "command"))
    kw["outputs"] = tuple(_job_path(p, "manifest outputs") for p in _str_list(data, "outputs"))
    kw["secrets"] = tuple(_str_list(data, "secrets"))
    if data.get("cpu_cores") is not None:
        kw["cpu_cores"] = parse_cores(_typed(data, "cpu_cores", str), "manifest cpu_cores")
    if data.get("max_iobps") is not None:
        kw["max_iobps"] = units.parse_size(data["max_iobps"], "manifest max_iobps", minimum=1)
    if data.get("input_root") is not None:
        try:
            kw["input_root"] = Digest.parse(_typed(data, "input_root", str))
        except ValueError as e:
            raise SpecError(
                "manifest input_root", data["input_root"], str(e), "FN:HASH/SIZE"
            ) from None
    for key in ("priority", "nodes", "max_retries", "restarts"):
        if data.get(key) is not None:
            kw[key] = specs.parse_count(_typed(data, key, int), f"manifest {key}", minimum=-(2**31))
    for key in ("min_nodes", "max_nodes"):
        if data.get(key) is not None:
            kw[key] = specs.parse_count(_typed(data, key, int), f"manifest {key}", minimum=1)
    for key in ("elastic", "requeue", *PREEMPT_KEYS):
        if data.get(key) is not None:
            kw[key] = _typed(data, key, bool)
    if data.get("time_limit") is not None:
        kw["time_limit"] = units.parse_duration(data["time_limit"], "manifest time_limit")
    if data.get("begin_time") is not None:
        kw["begin_time"] = float(_typed(data, "begin_time", (int, float)))
    if data.get("deadline") is not None:
        kw["deadline"] = float(_typed(data, "deadline", (int, float)))
    if data.get("array") is not None:
        kw["array"] = specs.parse_array(_typed(data, "array", str), "manifest array")
    deps = data.get("dependencies") or []
    if isinstance(deps, str):
        deps = [deps]
    kw["dependencies"] = tuple(
        d
        for text in _str_list({"dependencies": deps}, "dependencies")
        for d in specs.parse_dependencies(text, "manifest dependencies")
    )
    kw["env"] = _env(data.get("env") or {})
    kw["resources"] = _resources(data.get("resources") or {})
    if not kw["command"] or not kw["command"][0]:
        raise SpecError(
            "manifest command", data.get("command"), "command is empty", '["prog", "arg"]'
        )
    if "name" not in kw:
        kw["name"] = os.path.basename(kw["command"][0]) or kw["command"][0]
    try:
        manifest = JobManifest(**kw)
    except (ValueError, TypeError) as e:
        raise SpecError(
            "manifest", data.get("name", "?"), str(e), "see docs/design/scheduler.md"
        ) from None
    return check_manifest(manifest, lambda field: f"manifest {field}")


def _typed(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = data[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise SpecError(f"manifest {key}", value, f"has type {type(value).__name__}", names)
    return value


def _str_list(data: Mapping[str, Any], key: str) -> list[str]:
    value = data.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(f"manifest {key}", value, "not a list of strings", '["a", "b"]')
    return value


def _env(value: Any) -> tuple[tuple[str, str], ...]:
    if isinstance(value, list):
        return specs.parse_env(_str_list({"env": value}, "env"), "manifest env")
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise SpecError("manifest env", value, "not an object of strings", '{"KEY": "VALUE"}')
    return specs.parse_env((f"{k}={v}" for k, v in value.items()), "manifest env")


def _resources(value: Any) -> Resources:
    if not isinstance(value, dict):
        raise SpecError(
            "manifest resources", value, "not an object", '{"cpu": "2", "memory": "8Gi"}'
        )
    unknown = sorted(set(value) - {"cpu", "memory", "gpus"})
    if unknown:
        raise SpecError("manifest resources", unknown[0], "unknown field", "cpu, memory, gpus")
    default = Resources()
    return Resources(
        cpu_millis=units.parse_cpu(value["cpu"], "manifest resources.cpu")
        if "cpu" in value
        else default.cpu_millis,
        memory_bytes=units.parse_size(value["memory"], "manifest resources.memory", minimum=1)
        if "memory" in value
        else default.memory_bytes,
        gpus=specs.parse_count(value.get("gpus", 0), "manifest resources.gpus"),
    )


def _given(value: Any, problem: str) -> str:
    """The value of a flag an error is about: of a repeated flag, the item it names."""
    if isinstance(value, list | tuple):
        words = problem.split()
        named = [v for v in value if isinstance(v, str) and v.partition("=")[0] in words]
        return named[0] if named else " ".join(str(v) for v in value)
    return "" if value is None else str(value)


def apply_flags(
    base: JobManifest | None,
    provenance: Mapping[str, str] | None,
    flags: Mapping[str, Any],
    *,
    command: Sequence[str] | None = None,
    input_root: Digest | None = None,
) -> tuple[JobManifest, dict[str, str]]:
    """Layer `rbs job submit` flags (keyed by flag name, e.g. "--time") over a base manifest.

    Flags win over the base (a BUILD job target's manifest); the returned provenance says
    for every field whether it came from a flag, the target, or the default. Values that
    are None or absent leave the base alone.
    """
    if base is None and not command:
        raise SpecError(
            "command", "", "no command given", "rbs job submit [flags] -- COMMAND [ARGS...]"
        )
    prov = dict(provenance or {})
    if base is None:
        assert command is not None
        base = JobManifest(name=os.path.basename(command[0]) or command[0], command=tuple(command))
        prov = {f: DEFAULT_SOURCE for f in PROVENANCE_FIELDS}
        prov["command"] = "flag --"
    prov = {f: prov.get(f, DEFAULT_SOURCE) for f in PROVENANCE_FIELDS}
    kw: dict[str, Any] = {}
    res: dict[str, int] = {}

    def take(flag: str, field: str, value: Any, target: dict[str, Any] = kw) -> None:
        target[field.split(".")[-1] if target is res else field] = value
        prov[field] = f"flag {flag}"

    if command:
        take("--", "command", tuple(command))
        # A new command renames the job unless the name came from somewhere explicit.
        if flags.get("--name") is None and prov["name"] == DEFAULT_SOURCE:
            kw["name"] = os.path.basename(command[0]) or command[0]
    if input_root is not None:
        take("--inputs", "input_root", input_root)
    handlers: dict[str, tuple[str, Any]] = {
        "--name": ("name", lambda v: _nonempty(v, "--name")),
        "--queue": ("queue", lambda v: _nonempty(v, "--queue")),
        "--priority": ("priority", lambda v: specs.parse_count(v, "--priority", -(2**31))),
        "--time": ("time_limit", units.parse_duration),
        "--deps": ("dependencies", specs.parse_dependencies),
        "--array": ("array", specs.parse_array),
        "--nodes": ("nodes", lambda v: specs.parse_count(v, "--nodes", 1)),
        "--max-retries": ("max_retries", lambda v: specs.parse_count(v, "--max-retries")),
        "--restarts": ("restarts", lambda v: specs.parse_count(v, "--restarts")),
        "--deadline": ("deadline", lambda v: units.parse_when(v, "--deadline", time.time())),
        "--checkpoint-dir": ("checkpoint_dir", lambda v: _job_path(v, "--checkpoint-dir")),
        "--begin": ("begin_time", _begin_time),
        "--container": ("container", lambda v: specs.parse_image(v, "--container")),
        "--network": ("network", specs.parse_network),
        "--cpu-cores": ("cpu_cores", parse_cores),
        "--max-iobps": ("max_iobps", lambda v: units.parse_size(v, "--max-iobps", minimum=1)),
        "--secret": (
            "secrets",
            lambda v: tuple(set(base.secrets) | set([v] if isinstance(v, str) else v)),
        ),
        "--outputs": (
            "outputs",
            lambda v: tuple(_job_path(p, "--outputs") for p in ([v] if isinstance(v, str) else v)),
        ),
    }
    for flag, value in flags.items():
        if value is None or value == () or value == []:
            continue
        _check_flag_type(flag, value)
        if flag in handlers:
            field, parse = handlers[flag]
            take(flag, field, parse(value))
        elif flag == "--cpus":
            take(flag, "resources.cpu", units.parse_cpu(value), res)
            res["cpu_millis"] = res.pop("cpu")
        elif flag == "--memory-gb":
            take(flag, "resources.memory", units.parse_gib(value), res)
            res["memory_bytes"] = res.pop("memory")
        elif flag == "--memory":
            take(flag, "resources.memory", units.parse_size(value, flag, minimum=1), res)
            res["memory_bytes"] = res.pop("memory")
        elif flag == "--gpus":
            take(flag, "resources.gpus", specs.parse_count(value, flag), res)
        elif flag == "--env":
            items = [value] if isinstance(value, str) else list(value)
            merged = dict(base.env) | dict(specs.parse_env(items))
            take(flag, "env", tuple(merged.items()))
        elif flag == "--no-requeue":
            if value:
                take(flag, "requeue", False)
        elif flag in ("--preemptible", "--interactive", "--pty"):
            take(flag, flag[2:], bool(value))
        elif flag in ("--min-nodes", "--max-nodes"):
            field = flag[2:].replace("-", "_")
            take(flag, field, specs.parse_count(value, flag, 1))
            take(flag, "elastic", True)
        else:
            known = ", ".join(
                sorted(
                    [
                        *handlers,
                        "--cpus",
                        "--memory-gb",
                        "--memory",
                        "--gpus",
                        "--env",
                        "--no-requeue",
                        "--preemptible",
                        "--interactive",
                        "--pty",
                        "--min-nodes",
                        "--max-nodes",
                    ]
                )
            )
            raise SpecError(flag, value, "unknown job flag", known)
    if kw.get("elastic"):
        min_nodes = kw.get("min_nodes", base.min_nodes or 1)
        kw.setdefault("min_nodes", min_nodes)
        kw.setdefault("max_nodes", base.max_nodes or max(min_nodes, kw.get("nodes", base.nodes)))
        kw["nodes"] = kw["min_nodes"]
    if res:
        kw["resources"] = dataclasses.replace(base.resources, **res)
    try:
        manifest = dataclasses.replace(base, **kw)
    except ValueError as e:
        flag = next(
            (prov[f] for f in _field_hint(str(e)) if prov.get(f, "").startswith("flag")),
            "job spec",
        )
        name = flag.removeprefix("flag ")
        given = _given(flags.get(name), str(e))
        raise SpecError(name, given, str(e), "see `rbs job submit --help`") from None
    return check_manifest(manifest, lambda field: field_label(prov, field)), prov


# What a flag's value may be in a JSON body: text as typed, or the Python API's values.
_TEXT: tuple[type, ...] = (str,)
_FLAG_TYPES: dict[str, tuple[type, ...]] = {
    "--priority": (str, int),
    "--nodes": (str, int),
    "--max-retries": (str, int),
    "--restarts": (str, int),
    "--deadline": (str, int, float),
    "--begin": (str, int, float),
    "--gpus": (str, int),
    "--min-nodes": (str, int),
    "--max-nodes": (str, int),
    "--time": (str, int),
    "--cpus": (str, int, float),
    "--memory-gb": (str, int, float),
    "--memory": (str, int),
    "--no-requeue": (bool,),
    "--preemptible": (bool,),
    "--interactive": (bool,),
    "--pty": (bool,),
    "--env": (str, list, tuple),
    "--outputs": (str, list, tuple),
    "--secret": (str, list, tuple),
    "--max-iobps": (str, int),
}


def _check_flag_type(flag: str, value: Any) -> None:
    kinds = _FLAG_TYPES.get(flag, _TEXT)
    ok = isinstance(value, kinds) and (bool in kinds or not isinstance(value, bool))
    if ok and isinstance(value, list | tuple):
        ok = all(isinstance(v, str) for v in value)
    if not ok:
        names = {str: "text", int: "a whole number", float: "a number", bool: "true/false"}
        forms = ", ".join(dict.fromkeys(names.get(k, "a list of text") for k in kinds))
        raise SpecError(flag, value, f"has type {type(value).__name__}", forms)


def _begin_time(value: Any) -> float | None:
    """--begin as the client sends it: epoch seconds (it parsed `tomorrow 09:00` in its own
    time zone), or "" to clear a begin time the base manifest set."""
    if isinstance(value, str) and not value.strip():
        return None
    try:
        when = float(value)
    except ValueError:
        when = math.nan
    if not (math.isfinite(when) and when >= 0):
        raise SpecError("--begin", value, "is not a time", "epoch seconds, e.g. 1767225600")
    return when


def _nonempty(value: Any, flag: str) -> str:
    text = str(value).strip()
    if not text:
        raise SpecError(flag, value, "is empty", "a non-empty name")
    return text


def job_path(value: Any, flag: str) -> str:
    """A path inside the job's working directory (relative, no '..'); a SpecError naming `flag`."""
    return _job_path(value, flag)


def _job_path(value: Any, flag: str) -> str:
    """A path inside the job's working directory: relative, without '..'."""
    text = str(value).strip()
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if not text or "\0" in text:
        problem = "is empty" if not text else "contains a NUL byte"
    elif text.startswith("/"):
        problem = "is absolute; paths are relative to the job's working directory"
    elif ".." in parts:
        problem = "uses '..' and would leave the job's working directory"
    elif not parts:
        problem = "names the working directory itself"
    else:
        return text
    raise SpecError(
        flag, value, problem, "a relative path inside the job, e.g. results/ or out.txt"
    )


def _field_hint(message: str) -> list[str]:
    fields = (*PROVENANCE_FIELDS, *CONTAINER_KEYS, *PINNING_KEYS, *PREEMPT_KEYS)
    return [f for f in fields if f.split(".")[-1] in message]


def dependencies_text(deps: Sequence[Dependency]) -> str:
    """The `--deps` text for dependencies, e.g. `afterok:3,afterany:4`."""
    return ",".join(str(d) for d in deps)
