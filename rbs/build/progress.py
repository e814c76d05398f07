"""Progress display: a live rich status on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO

from rbs.build.engine import Failure, Listener, Report
from rbs.build.graph import ActionSpec


class PlainProgress(Listener):
    """One line per action that runs (cache hits and unchanged actions stay quiet)."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stderr
        self.total = 0
        self.done = 0
        self._lock = threading.Lock()

    def start(self, total: int) -> None:
        self.total = total

    def action_started(self, spec: ActionSpec) -> None:
        with self._lock:
            print(f"[{self.done}/{self.total}] {spec.describe()}", file=self.out, flush=True)

    def action_finished(self, spec: ActionSpec, *, how: str) -> None:
        with self._lock:
            self.done += 1

    def failure(self, failure: Failure) -> None:
        with self._lock:
            self.done += 1
            print(
                f"FAILED: {failure.spec.describe()}: {failure.message}", file=self.out, flush=True
            )


class RichProgress(Listener):
    """Live display: done/total, cache hits, and the actions running right now."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.live import Live

        self.console = Console(stderr=True)
        self.live = Live(console=self.console, refresh_per_second=8, transient=True)
        self.running: dict[int, tuple[str, float]] = {}
        self.total = self.done = self.hits = 0
        self._lock = threading.Lock()

    def start(self, total: int) -> None:
        self.total = total
        self.live.start()

    def _render(self) -> Any:
        from rich.text import Text

        now = time.monotonic()
        lines = [
            f"[{self.done}/{self.total}] actions, {self.hits} cache hits, {len(self.running)} running"
        ]
        for desc, t0 in list(self.running.values())[:8]:
            lines.append(f"    {desc}  {now - t0:.1f}s")
        return Text("\n".join(lines))

    def action_started(self, spec: ActionSpec) -> None:
        with self._lock:
            self.running[id(spec)] = (spec.describe(), time.monotonic())
            self.live.update(self._render())

    def action_finished(self, spec: ActionSpec, *, how: str) -> None:
        with self._lock:
            self.running.pop(id(spec), None)
            self.done += 1
            if how in ("cached", "memo"):
                self.hits += 1
            self.live.update(self._render())

    def failure(self, failure: Failure) -> None:
        with self._lock:
            self.running.pop(id(failure.spec), None)
            self.done += 1
            self.live.update(self._render())
            self.console.print(
                f"[red]FAILED[/red]: {failure.spec.describe()}: {failure.message}",
                markup=True,
                highlight=False,
            )

    def finish(self, report: Report) -> None:
        self.live.stop()


def make_progress(force_plain: bool = False) -> Listener:
    if not force_plain and sys.stderr.isatty():
        return RichProgress()
    return PlainProgress()
