"""An interactive run's input on the worker, held until its supervisor has started it.

The server sends a job's input (`JobInput`: keys, an EOF, a signal, a --pty client's
window size) once the job is placed, which is before its run exists on the worker
while the worker stages its inputs or looks up its container image; the supervisor
also drops input for a run it is still spawning. So the job host gives each run's
input to an `InputGate` (docs/design/interactive.md): closed, it keeps the requests in
order, at most `MAX_HELD_BYTES` of data and `MAX_HELD` requests (past either, the rest
is dropped, as a pipe that nobody reads would stop taking it); at the run's `Started`
it sends them, and from then on sends each at once.
"""

from __future__ import annotations

from collections.abc import Callable

from rbs.executor.supervisor_proto import Input, SignalRun

MAX_HELD = 1024  # requests held for a run that has not started
MAX_HELD_BYTES = 1 << 20  # their data (base64), at most


class InputGate:
    """One run's input requests: held until `start`, then passed on."""

    def __init__(self) -> None:
        self.open = False
        self.held: list[Input | SignalRun] = []
        self.held_bytes = 0

    def offer(self, msg: Input | SignalRun, send: Callable[[Input | SignalRun], None]) -> None:
        if self.open:
            send(msg)
            return
        size = len(msg.data) if isinstance(msg, Input) else 0
        if len(self.held) >= MAX_HELD or self.held_bytes + size > MAX_HELD_BYTES:
            return  # past the bounds: dropped
        self.held.append(msg)
        self.held_bytes += size

    def start(self, send: Callable[[Input | SignalRun], None]) -> None:
        """The run started: what was held, in order, then each request as it comes."""
        self.open = True
        held, self.held, self.held_bytes = self.held, [], 0
        for msg in held:
            send(msg)
