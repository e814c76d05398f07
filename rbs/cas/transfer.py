"""Progress of the bytes a command sends or fetches, reported to whoever listens.

Whatever moves bytes (the client staging inputs and fetching outputs, the local
store's `put_file`, `tree_from_path` and `materialize`, the REAPI client's uploads)
calls `expect` when it learns how many bytes are coming and `advance` as bytes go
through. A command that wants a progress bar installs a `TransferSink` with
`reporting` (rbs.cli.progress does, on a terminal); with none installed the calls
cost one context variable lookup. A context variable, not a parameter, so the library
calls keep their signatures and a sink set by one command never leaks into another
thread's transfer; code that hands work to its own threads passes `listening()` on
to them. It lives in rbs.cas, the lowest layer that moves bytes, so the store and the
wire clients can report too. Only `contextvars` is imported (no typing, no
contextlib): this module is on `rbs job submit`'s fast path.
"""

from __future__ import annotations

import contextvars

TYPE_CHECKING = False  # typing's own constant costs start-up; checkers treat this as true
if TYPE_CHECKING:
    from typing import Protocol

    class TransferSink(Protocol):
        def expect(self, nbytes: int) -> None:
            """`nbytes` more are to be transferred."""

        def advance(self, nbytes: int) -> None:
            """`nbytes` more went through."""


_SINK: contextvars.ContextVar[TransferSink | None] = contextvars.ContextVar(
    "rbs_transfer_sink", default=None
)


def listening() -> TransferSink | None:
    """The sink this thread reports to, if any (to hand on to worker threads)."""
    return _SINK.get()


def expect(nbytes: int) -> None:
    sink = _SINK.get()
    if sink is not None and nbytes > 0:
        sink.expect(nbytes)


def advance(nbytes: int) -> None:
    sink = _SINK.get()
    if sink is not None and nbytes > 0:
        sink.advance(nbytes)


class reporting:  # lower case: used as a function, `with reporting(sink):`
    """Send this thread's transfer progress to `sink` while the block runs (None: to
    nobody, for a step whose bytes the enclosing transfer already counted)."""

    def __init__(self, sink: TransferSink | None) -> None:
        self._sink = sink
        self._token: contextvars.Token[TransferSink | None] | None = None

    def __enter__(self) -> TransferSink | None:
        self._token = _SINK.set(self._sink)
        return self._sink

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _SINK.reset(self._token)
            self._token = None
