"""Bazel's make-variable syntax: `$$`, `$@`, `$(VAR)`, `$(location //x)` and friends."""

from __future__ import annotations

from collections.abc import Callable, Mapping

_LOCATION_FUNCS = {
    "location": (False, "path"),
    "locations": (True, "path"),
    "execpath": (False, "path"),
    "execpaths": (True, "path"),
    "rootpath": (False, "short_path"),
    "rootpaths": (True, "short_path"),
    "rlocationpath": (False, "rlocation"),
    "rlocationpaths": (True, "rlocation"),
}


def expand(
    text: str,
    variables: Mapping[str, str],
    locate: Callable[[str, str, bool, str], str],
) -> str:
    """Expand `text`; `locate(label, field, many, func)` answers the `$(location ...)` family.

    Raises ValueError naming the variable when one is unknown or malformed.
    """
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c != "$":
            out.append(c)
            i += 1
            continue
        if i + 1 >= n:
            raise ValueError("unterminated $ at the end; write $$ for a literal $")
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
            continue
        if nxt == "(":
            end = text.find(")", i + 2)
            if end < 0:
                raise ValueError(f"unterminated $( in {text[i : i + 30]!r}; close it with )")
            body = text[i + 2 : end]
            i = end + 1
            func, _, arg = body.strip().partition(" ")
            if arg and func in _LOCATION_FUNCS:
                many, field = _LOCATION_FUNCS[func]
                out.append(locate(arg.strip(), field, many, func))
                continue
            if body not in variables:
                known = ", ".join(f"$({k})" if len(k) > 1 else f"${k}" for k in sorted(variables))
                raise ValueError(
                    f"$({body}) is not defined; known here: {known}, $(location <label>)"
                )
            out.append(variables[body])
            continue
        if nxt not in variables:
            raise ValueError(
                f"${nxt} is not defined (write $$ for a literal $; $@ needs exactly one output, "
                "$< exactly one source)"
            )
        out.append(variables[nxt])
        i += 2
    return "".join(out)
