"""JSON for the submit path without the `json` package: the same text, a few ms less start-up.

`import json` compiles six regular expressions and imports `re` (with enum, functools
and collections): ~6 ms of a fresh `rbs job submit`, a third of the call. This module
reads with the C scanner that `json.loads` itself uses (`_json.make_scanner`) and writes
the compact form of `json.dumps(value, separators=(",", ":"))` for the plain types a
request holds, with the C string encoder `json.dumps` uses. tests/unit/client/
test_fastjson.py holds both to the `json` package on generated documents.
"""

from __future__ import annotations

import _json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


class _Context:
    """What the C scanner reads from a JSONDecoder: json.loads's defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


# typeshed types the argument as a scanner; the C code reads only the attributes above.
_scan = _json.make_scanner(_Context())  # type: ignore[arg-type]
_WHITESPACE = " \t\n\r"


def loads(text: str | bytes | bytearray) -> Any:
    """`json.loads(text)` for a UTF-8 or str document; a ValueError names where it broke."""
    if not isinstance(text, str):
        text = bytes(text).decode("utf-8")
    start = _skip(text, 0)
    try:
        value, end = _scan(text, start)
    except StopIteration as e:
        raise ValueError(f"not JSON: expecting a value at character {e.value}") from None
    end = _skip(text, end)
    if end != len(text):
        raise ValueError(f"not JSON: extra data at character {end}")
    return value


def _skip(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in _WHITESPACE:
        i += 1
    return i


def dumps(value: object) -> str:
    """`json.dumps(value, separators=(",", ":"))` for None, bool, int, float, str, and
    lists, tuples and dicts of them (dict keys: str, int, float, bool or None)."""
    parts: list[str] = []
    _write(value, parts.append)
    return "".join(parts)


def _write(value: object, out: Callable[[str], object]) -> None:
    if value is None:
        out("null")
    elif value is True:
        out("true")
    elif value is False:
        out("false")
    elif isinstance(value, str):
        out(_json.encode_basestring_ascii(value))
    elif isinstance(value, int):
        out(int.__repr__(value))
    elif isinstance(value, float):
        out(_float(value))
    elif isinstance(value, dict):
        out("{")
        for i, (k, v) in enumerate(value.items()):
            if i:
                out(",")
            out(_json.encode_basestring_ascii(_key(k)))
            out(":")
            _write(v, out)
        out("}")
    elif isinstance(value, list | tuple):
        out("[")
        for i, v in enumerate(value):
            if i:
                out(",")
            _write(v, out)
        out("]")
    else:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _float(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return float.__repr__(value)


def _key(key: object) -> str:
    """A dict key as json.dumps writes it: str as is, the other scalars as their JSON."""
    if isinstance(key, str):
        return key
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    if isinstance(key, int):
        return int.__repr__(key)
    if isinstance(key, float):
        return _float(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")
