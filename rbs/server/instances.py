"""The request policy: which REAPI instance names and digest functions this server answers.

The server always accepts the empty name (what Bazel and most REAPI clients send by
default) and, besides it, any names listed in `[server] instance_names` (or given
with `--instance-name`). Every other name is refused with INVALID_ARGUMENT and a
message listing the accepted names, rather than NOT_FOUND, because NOT_FOUND from the
action cache would read as an ordinary cache miss and hide the misconfiguration.
All instances share one CAS (blobs are content-addressed, so sharing is safe); the
action cache is keyed by instance name, so results never cross instances. Workers
read and write that shared CAS through the empty name, which is why it stays.

Digest functions: `[server] digest_functions` (default both) is what Capabilities
offers; a request in another function is refused with INVALID_ARGUMENT naming the
offered ones, so a client that ignores Capabilities fails at once and plainly.
"""

from __future__ import annotations

from collections.abc import Iterable

from rbs.model import DigestFunction
from rbs.wire.errors import InvalidRequest, UnknownInstance

ALL_FUNCTIONS = (DigestFunction.SHA256, DigestFunction.BLAKE3)


class Instances:
    """Accepted instance names and digest functions; `check`/`check_function` refuse others."""

    def __init__(
        self, names: Iterable[str], functions: Iterable[DigestFunction] = ALL_FUNCTIONS
    ) -> None:
        self.names = tuple(dict.fromkeys(["", *names]))
        self.functions = tuple(dict.fromkeys(functions))

    def check(self, name: str) -> str:
        if name not in self.names:
            raise UnknownInstance(name, self.names)
        return name

    def check_function(self, fn: DigestFunction | None) -> DigestFunction:
        """`fn` as a request names it; None (unset, a 64-hex hash) reads as SHA256."""
        fn = fn or DigestFunction.SHA256
        if fn not in self.functions:
            offered = ", ".join(f.value for f in self.functions)
            raise InvalidRequest(
                f"digest function {fn.value} is not offered by this server (it offers "
                f"{offered}; see GetCapabilities); hash with one of those"
            )
        return fn
