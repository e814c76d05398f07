"""Rule implementation calls with their data and providers as one JSON text each.

starlark-pyo3 converts a value between Python and Starlark leaf by leaf, calling
Python's json module for each; one `json.dumps` here and one `json.decode` in Starlark
(and `json.encode` back) cost about a third of that. The text is used only where it
reads back as the values the plain conversion would give; otherwise the values cross
as before.
"""

from __future__ import annotations

import json
import re
from typing import Any

import starlark as sl

# Integers of 19 digits or more may pass the 64 bits that Starlark's json.decode keeps.
# A number stands after ':', ',' or '[' (the encoder writes no spaces); digits inside a
# string read back as that string, so only those are looked for (twice as fast).
_LONG_INT = re.compile(r"[:,\[]-?\d{19}")
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
# Most texts hold no run of 19 digits at all, in a number or in a string: bytes.translate
# and find say so faster than the regex can look at every number.
_DIGITS = bytes.maketrans(b"123456789", b"000000000")
_RUN = b"0" * 19


def json_text(data: dict[str, Any]) -> str | None:
    """`data` as JSON text when Starlark's json.decode reads it back as the values
    starlark-pyo3 would pass (no NaN, no long integers); else None. Keys that are not
    strings become strings, as `_plain` makes them in Starlark (starlark-pyo3 would
    refuse them)."""
    try:
        text = _ENCODER.encode(data)
    except (TypeError, ValueError):
        return None
    if text.encode().translate(_DIGITS).find(_RUN) >= 0 and _LONG_INT.search(text):
        return None
    return text


def call_impl(module: sl.FrozenModule, rule_key: str, data: dict[str, Any]) -> Any:
    """The plain providers of one rule implementation (prelude's `rbs_call_impl`)."""
    text = json_text(data)
    if text is None:
        return module.call("rbs_call_impl", rule_key, data)
    out = module.call("rbs_call_impl_json", rule_key, text)
    # A list: the providers did not survive JSON unchanged, so they came as values.
    return json.loads(out) if isinstance(out, str) else out
