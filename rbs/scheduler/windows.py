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
pays: nothing without windows; with some, one entry per affected worker (O(workers) for
a window over every worker), which is rare and short-lived.
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


def holds(st: SchedState) -> dict[str, float]:
    """Worker -> the moment from which a window holds it (now, for one in a window)."""
    out: dict[str, float] = {}
    now = st.now
    for w in st.windows:
        if w.end <= now:
            continue
        at = max(w.start, now)
        for wid in w.workers or st.workers:
            if wid in st.workers and at < out.get(wid, INF):
                out[wid] = at
    return out


def draining(st: SchedState, worker_id: str) -> Window | None:
    """The window the worker is in now, if any."""
    for w in st.windows:
        if w.start <= st.now < w.end and w.affects(worker_id):
            return w
    return None


def without_windows(st: SchedState, reserved: dict[str, float]) -> dict[str, float]:
    """The pass's promises to blocked jobs alone: `reserved` less the windows' holds."""
    held = holds(st)
    return {wid: t for wid, t in reserved.items() if held.get(wid) != t}


def operator_event(st: SchedState, ev: Update | SetWindows) -> list[Accepted | Rejected]:
    """The events an operator or owner sends that the core's dispatch hands on here."""
    if isinstance(ev, SetWindows):
        set_windows(st, ev)
        return []
    return [update_job(st, ev)]
