"""One ack for a run's last log lines and its result (Workers protocol 4).

A worker puts a finished run's last unsent log lines into its JobFinished
(`JobFinishedReport.lines`) instead of a LogLines of their own. The hub hands them to
the job listener first, as the batch they stand for, then the result: the lines are
stored (and deduplicated by seq) exactly as a LogLines' would be, before the result is
looked at. The Ack the log intake sends for them once they are stored is not sent on
its own: it is held here and folded into the run's ResultAck (`ResultAck.log_seq`),
which goes out once the result is journaled. So a short job costs the stream one
message each way after its lease, where it cost two.

Nothing is acknowledged that is not stored: lines the intake could not store at once
(a full disk) are acked later by a plain Ack, and the ResultAck then says nothing of
them (`log_seq` 0). A held ack whose ResultAck never comes (the stream ended first)
is harmless: the worker re-sends unacknowledged lines on its next stream. At most
`MAX_HELD` are held; past that the oldest goes out as its plain Ack.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Awaitable, Callable

from rbs.wire.workers_jobs import JobFinishedReport, JobReport, LogAck, ResultAck, final_batch
from rbs.wire.workers_session import ServerOrder

MAX_HELD = 10_000


class FinalAcks:
    """Folds the Ack of a result's own lines into its ResultAck; see the module docstring."""

    def __init__(self, send: Callable[[str, ServerOrder], object]) -> None:
        self._send = send  # the hub's send, for an ack let go unfolded
        self._deferring: str | None = None
        self._held: collections.OrderedDict[str, tuple[str, LogAck]] = collections.OrderedDict()

    @property
    def held(self) -> int:
        return len(self._held)

    async def deliver(
        self,
        worker_id: str,
        report: JobReport,
        handle: Callable[[str, JobReport], Awaitable[None]],
    ) -> None:
        """Hand `report` to `handle`; a JobFinished's lines first, as their own batch."""
        if isinstance(report, JobFinishedReport) and report.lines:
            self._deferring = report.lease_id
            try:
                await handle(worker_id, final_batch(report))
            finally:
                self._deferring = None
            report = dataclasses.replace(report, lines=())
        await handle(worker_id, report)

    def outgoing(self, worker_id: str, order: ServerOrder) -> ServerOrder | None:
        """The order to send for `order`: None for an ack held for its ResultAck, the
        ResultAck with the held ack's seq, else `order` itself."""
        if isinstance(order, LogAck) and order.lease_id == self._deferring:
            self._held[order.lease_id] = (worker_id, order)
            while len(self._held) > MAX_HELD:
                wid, oldest = self._held.popitem(last=False)[1]
                self._send(wid, oldest)
            return None
        if isinstance(order, ResultAck) and not order.log_seq:
            held = self._held.pop(order.lease_id, None)
            if held is not None:
                return ResultAck(lease_id=order.lease_id, log_seq=held[1].log_seq)
        return order
