"""A tiny JSON Schema validator for the subset rbs.wire.jobs_api_schema uses (draft 2020-12 words).

Keywords: type (a name or a list), properties, required, additionalProperties (a
boolean or a schema), items, enum, const; $schema and title are annotations. Any other
keyword is an error, so a schema cannot use one this validator would silently skip.
"""

from __future__ import annotations

from typing import Any

KNOWN = frozenset(
    {
        "$schema",
        "title",
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
    }
)
_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def errors(value: Any, schema: dict[str, Any], path: str = "$") -> list[str]:
    """Every way `value` breaks `schema`, as `path: problem` lines (empty when it is valid)."""
    unknown = set(schema) - KNOWN
    if unknown:
        raise ValueError(f"{path}: schema keyword(s) {sorted(unknown)} are not supported here")
    out: list[str] = []
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_TYPES[n](value) for n in names):
            return [f"{path}: {value!r} is not of type {'/'.join(names)}"]
    if "const" in schema and (value != schema["const"] or type(value) is not type(schema["const"])):
        out.append(f"{path}: {value!r} is not {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, dict):
        props: dict[str, Any] = schema.get("properties", {})
        for key in schema.get("required", ()):
            if key not in value:
                out.append(f"{path}: missing key {key!r}")
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in props:
                out += errors(item, props[key], f"{path}.{key}")
            elif extra is False:
                out.append(f"{path}: unexpected key {key!r}")
            elif isinstance(extra, dict):
                out += errors(item, extra, f"{path}.{key}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            out += errors(item, schema["items"], f"{path}[{i}]")
    return out
