"""Where each field of a job's manifest came from: a flag, a job target, a manifest file,
or the default (`rbs job show` prints it beside every value)."""

from __future__ import annotations

from collections.abc import Mapping

from rbs.model import JobManifest

# Provenance keys: the manifest's field names, with resources split per quantity.
PROVENANCE_FIELDS = (
    "name",
    "command",
    "input_root",
    "resources.cpu",
    "resources.memory",
    "resources.gpus",
    "queue",
    "priority",
    "time_limit",
    "nodes",
    "elastic",
    "min_nodes",
    "max_nodes",
    "max_retries",
    "requeue",
    "restarts",
    "checkpoint_dir",
    "env",
    "outputs",
    "secrets",
    "array",
    "dependencies",
    "begin_time",
    "deadline",
    "container",
    "network",
    "preemptible",
)
DEFAULT_SOURCE = "default"
# resources.<key> -> the Resources attribute it names.
_RESOURCE_ATTRS = {"cpu": "cpu_millis", "memory": "memory_bytes", "gpus": "gpus"}


def _value(m: JobManifest, field: str) -> object:
    top, _, sub = field.partition(".")
    return getattr(m.resources, _RESOURCE_ATTRS[sub]) if sub else getattr(m, top)


def provenance_for(m: JobManifest, source: str) -> dict[str, str]:
    """Provenance of a manifest made by one source: fields off their default come from it."""
    base = JobManifest(name=m.name, command=m.command)
    return {
        field: source
        if field in ("name", "command") or _value(m, field) != _value(base, field)
        else DEFAULT_SOURCE
        for field in PROVENANCE_FIELDS
    }


def field_label(prov: Mapping[str, str], field: str) -> str:
    """How an error names a field: the flag that set it, else the field and its source."""
    source = prov.get(field, DEFAULT_SOURCE)
    if source == "flag --":
        return "the command after --"
    if source.startswith("flag "):
        return source.removeprefix("flag ")
    return field if source == DEFAULT_SOURCE else f"{field} (from {source})"
