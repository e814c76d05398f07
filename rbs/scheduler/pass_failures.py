"""What one scheduling pass has learnt to fail, and how a later shape is checked against it.

Capacity only shrinks and reservations only grow during a pass, so a task shape at
least as big as one that failed (cpu, memory, GPUs, nodes, time limit, container)
fails too, and so does a single-node request at least as big as one no worker has
free. The pass asks that question for every job it meets, and again for the queue's
shapes when it checks whether anything left can start (`Pass._all_fail`).

The failures only ever grow, by appending, so each shape's answer is kept with how
far down the list it was checked: a later question about the same shape compares only
the failures added since. A shape that matched keeps its first match (a later one
can never come first), so the answer is the one a full scan would give, and the
comparisons made in a pass are at most (shapes asked) x (failures), never that again
per question. `Work.failure_checks` counts them.
"""

from __future__ import annotations

from rbs.scheduler.policy import Shape
from rbs.scheduler.workers import Work

Request = tuple[int, int, int]  # cpu millis, memory bytes, GPUs of one node


class PassFailures:
    """The shapes and requests found not to fit in one pass, with per-shape answers kept."""

    __slots__ = (
        "_checked",
        "_matched",
        "_no_room",
        "_no_room_min",
        "_room_checked",
        "failed",
        "work",
    )

    def __init__(self, work: Work) -> None:
        self.work = work
        self.failed: list[tuple[Shape, str]] = []  # in the order they failed
        # Single-node requests no worker has free, reservations or not, and every
        # request known to be at least as big as one of them.
        self._no_room: set[Request] = set()
        self._no_room_min: list[Request] = []
        self._room_checked: dict[Request, int] = {}  # the same for `_no_room_min`
        self._checked: dict[Shape, int] = {}  # how many of `failed` a shape was checked against
        self._matched: dict[Shape, str] = {}  # the reason of the first failure it is as big as

    def __bool__(self) -> bool:
        return bool(self.failed)

    def add(self, shape: Shape, why: str) -> None:
        self.failed.append((shape, why))

    def add_no_room(self, req: Request) -> None:
        self._no_room.add(req)
        self._no_room_min.append(req)

    def known_to_fail(self, shape: Shape) -> str | None:
        """The reason `shape` cannot start, if that follows from the failures so far."""
        if self.no_room((shape[0], shape[1], shape[2])):
            return "Resources"
        why = self._matched.get(shape)
        if why is not None:
            return why
        failed = self.failed
        start = self._checked.get(shape, 0)
        work = self.work
        for i in range(start, len(failed)):
            work.failure_checks += 1
            f, why = failed[i]
            if (
                f[0] <= shape[0]
                and f[1] <= shape[1]
                and f[2] <= shape[2]
                and f[3] <= shape[3]
                and f[4] <= shape[4]
                and f[5] <= shape[5]
            ):
                self._matched[shape] = why
                return why
        self._checked[shape] = len(failed)
        return None

    def no_room(self, req: Request) -> bool:
        """Whether no worker has `req` free (it is at least as big as such a request)."""
        if req in self._no_room:
            return True
        mins = self._no_room_min
        start = self._room_checked.get(req, 0)
        work = self.work
        cpu, mem, gpus = req
        for i in range(start, len(mins)):
            work.failure_checks += 1
            c, m, g = mins[i]
            if c <= cpu and m <= mem and g <= gpus:
                self._no_room.add(req)
                return True
        self._room_checked[req] = len(mins)
        return False
