"""The instance-name policy: which REAPI instance names this server answers.

The server accepts the empty name (what Bazel sends by default) and any names listed
in `[server] instance_names`. Every other name is refused with INVALID_ARGUMENT and a
message listing the accepted names, rather than NOT_FOUND, because NOT_FOUND from the
action cache would read as an ordinary cache miss and hide the misconfiguration.
All instances share one CAS (blobs are content-addressed, so sharing is safe); the
action cache is keyed by instance name, so results never cross instances.
"""

from __future__ import annotations

from collections.abc import Iterable

from rbs.wire.errors import UnknownInstance


class Instances:
    """The set of accepted instance names; `check` raises UnknownInstance for others."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = tuple(dict.fromkeys(names))

    def check(self, name: str) -> str:
        if name not in self.names:
            raise UnknownInstance(name, self.names)
        return name
