"""What a chaos test counts: runs that were lost, ran twice, or overlapped.

A `Ledger` wraps each task's command in a small shell prologue and epilogue:

- it takes an exclusive `flock` on `<dir>/locks/<key>` for the run's whole life (the
  lock fd is inherited by the payload and released by the kernel when the last
  process holding it dies, kill -9 included), and if the lock is held, writes the
  key to `overlaps` instead of running: two attempts of one task alive at once;
- it appends `start <key> <attempt>` before the payload and `end <key> <attempt>`
  after it (single small O_APPEND writes: atomic).

A task whose run ended more than once ran twice (a finished run ran again); a task
with no end was lost. A started attempt with no end is one a fault killed, which a
requeue may legitimately follow. `Counts` is what each chaos test asserts and what
`tests/conftest.py` prints in its summary (`pytest -m chaos`).
"""

from __future__ import annotations

import collections
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Counts:
    tasks: int
    runs: int  # attempts started
    lost: tuple[str, ...]
    twice: tuple[str, ...]
    overlaps: tuple[str, ...]

    def ok(self) -> bool:
        return not (self.lost or self.twice or self.overlaps)

    def summary(self) -> str:
        return (
            f"{self.tasks} tasks, {self.runs} runs started: {len(self.lost)} lost, "
            f"{len(self.twice)} ran twice, {len(self.overlaps)} overlapping attempts"
        )


class Ledger:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "locks").mkdir(parents=True, exist_ok=True)
        self.runs = root / "runs"
        self.overlap_file = root / "overlaps"

    def wrap(self, payload: str, key: str = '"$RBS_ARRAY_INDEX"') -> list[str]:
        """argv for a task: `key` is a shell word (the array index by default)."""
        locks, runs, over = (
            shlex.quote(str(p)) for p in (self.root / "locks", self.runs, self.overlap_file)
        )
        script = (
            f'k={key}; exec 9>{locks}/"$k"; '
            f'flock -n 9 || {{ echo "$k" >> {over}; exit 3; }}; '
            f'echo "start $k $RBS_ATTEMPT" >> {runs}; '
            f"{payload}\n"
            f'rc=$?; echo "end $k $RBS_ATTEMPT" >> {runs}; exit $rc'
        )
        return ["sh", "-c", script]

    def entries(self) -> list[tuple[str, str, str]]:
        if not self.runs.exists():
            return []
        out = []
        for line in self.runs.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:
                out.append((parts[0], parts[1], parts[2]))
        return out

    def started(self) -> int:
        return sum(1 for kind, _, _ in self.entries() if kind == "start")

    def ended(self) -> int:
        return sum(1 for kind, _, _ in self.entries() if kind == "end")

    def counts(self, keys: Iterable[str]) -> Counts:
        keys = list(keys)
        entries = self.entries()
        ends = collections.Counter(k for kind, k, _ in entries if kind == "end")
        overlaps = self.overlap_file.read_text().split() if self.overlap_file.exists() else []
        return Counts(
            tasks=len(keys),
            runs=sum(1 for kind, _, _ in entries if kind == "start"),
            lost=tuple(k for k in keys if ends[k] == 0),
            twice=tuple(k for k in keys if ends[k] > 1),
            overlaps=tuple(sorted(set(overlaps))),
        )


# Filled by the `chaos_counts` fixture (tests/conftest.py), printed at the end of the run.
RECORDED: list[tuple[str, Counts]] = []
