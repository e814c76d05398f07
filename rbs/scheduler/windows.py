"""Maintenance windows (`rbs job reserve`) and drains (`rbs remote drain`) in the core.

A window holds its workers from `start` to `end`. The pass sees it as a promise made to
nobody, in the same table as the promises made to blocked jobs (`Pass.reserved`: worker
-> the moment it is held from): a job may start on an affected worker only if its time
limit ends by the window's start, so short jobs still fill the gap (backfill), and a
job without a time limit, which could run into the window, does not start there at all.
From its start to its end the worker takes nothing new; what already runs keeps running
(as in Slurm) and its workers drain. A drain is a window from now with no end.

The windows come from the server (its reservations file), whole, in a `SetWindows`
event whenever they change or one ends; the core keeps no history of them. What a pass
pays (`WindowHolds`): nothing without windows; with some, one step per window plus one
entry per worker a window names. A window over every worker is one number, whatever the
cluster's size, and placement asks about a worker only when it meets one (O(1) each).
"""

from __future__ import annotations

import math

from rbs.scheduler.events import SetWindows, Update, Window
from rbs.scheduler.instructions import Accepted, Rejected
from rbs.scheduler.update import update_job

TYPE_CHECKING = False
if TYPE_CHECKING:
    from rbs.scheduler.state import SchedState

INF = math.inf
MAINTENANCE = "Maintenance"  # the pending reason of a job held off only by a window


def set_windows(st: SchedState, ev: SetWindows) -> None:
    st.windows = tuple(w for w in ev.windows if w.end > st.now)
    st.need_pass = True


class WindowHolds:
    """When the windows hold each worker from (now, for one in a window), for one pass:
    `every` for the windows over every worker, `some` for the workers others name."""

    __slots__ = ("every", "some")

    def __init__(self, st: SchedState) -> None:
        now = st.now
        self.every = INF
        self.some: dict[str, float] = {}
        work = st.work
        for w in st.windows:
            work.workers_examined += 1  # one step per window, one per worker it names
            if w.end <= now:
                continue
            at = max(w.start, now)
            if not w.workers:
                self.every = min(self.every, at)
                continue
            for wid in w.workers:
                work.workers_examined += 1
                if at < self.some.get(wid, INF):
                    self.some[wid] = at

    def __bool__(self) -> bool:
        return self.every < INF or bool(self.some)

    def at(self, worker_id: str) -> float | None:
        """When a window holds `worker_id` from, or None when none does."""
        t = min(self.every, self.some.get(worker_id, INF))
        return None if t == INF else t


def draining(st: SchedState, worker_id: str) -> Window | None:
    """The window the worker is in now, if any."""
    for w in st.windows:
        if w.start <= st.now < w.end and w.affects(worker_id):
            return w
    return None


def operator_event(st: SchedState, ev: Update | SetWindows) -> list[Accepted | Rejected]:
    """The events an operator or owner sends that the core's dispatch hands on here."""
    if isinstance(ev, SetWindows):
        set_windows(st, ev)
        return []
    return [update_job(st, ev)]
