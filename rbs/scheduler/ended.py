"""The final states of the ended jobs a core forgot: one byte per job id.

Job ids are dense, so a `bytearray` indexed by id holds a million ended jobs' states in
about a megabyte. Filled by rbs/scheduler/compaction.py and by a restore.
"""

from __future__ import annotations

from collections.abc import Iterator

from rbs.model import JobState

_STATES = tuple(JobState)
_CODE = {s: i + 1 for i, s in enumerate(_STATES)}  # 0: not forgotten


class EndedStates:
    """job id -> final state of the jobs the core forgot, one byte per id."""

    __slots__ = ("_codes", "_count", "waiting")

    def __init__(self) -> None:
        self._codes = bytearray()
        self._count = 0
        self.waiting: set[int] = set()  # ended, but an attempt of theirs is still stopping

    def add(self, job_id: int, state: JobState) -> None:
        if not state.terminal:
            raise ValueError(f"job {job_id} is {state.value}: only an ended job is forgotten")
        if job_id >= len(self._codes):
            self._codes.extend(bytes(max(job_id + 1 - len(self._codes), len(self._codes))))
        self._count += self._codes[job_id] == 0
        self._codes[job_id] = _CODE[state]

    def get(self, job_id: int) -> JobState | None:
        if 0 <= job_id < len(self._codes) and self._codes[job_id]:
            return _STATES[self._codes[job_id] - 1]
        return None

    def __contains__(self, job_id: int) -> bool:
        return self.get(job_id) is not None

    def __len__(self) -> int:
        return self._count

    def items(self) -> Iterator[tuple[int, JobState]]:
        for job_id, code in enumerate(self._codes):
            if code:
                yield job_id, _STATES[code - 1]

    @property
    def nbytes(self) -> int:
        """The bytes the map holds (for the memory checks)."""
        return len(self._codes)
