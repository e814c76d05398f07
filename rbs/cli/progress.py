"""Progress bars for long transfers: bytes, rate and time left, on a terminal only.

`transfer_bar(label)` wraps a command's transfer (staging inputs, fetching outputs,
`rbs cas put/get`). It listens to rbs.cas.transfer and shows a bar on stderr only once
the bytes expected reach `BAR_MIN_BYTES` and stderr is a terminal; only then is rich's
progress module imported, so a small `rbs job submit` pays nothing for it
(bench/cli_startup.py); for the same reason this module imports neither typing nor
contextlib.
"""

from __future__ import annotations

import sys

from rbs.cas.transfer import reporting

TYPE_CHECKING = False  # typing's own constant costs start-up; checkers treat this as true
if TYPE_CHECKING:
    from typing import Any

    from rich.console import Console
    from rich.progress import Progress, TaskID

BAR_MIN_BYTES = 32 << 20  # smaller transfers end before a bar would help


class _Bar:
    """A TransferSink that counts, and draws once the transfer proves big enough."""

    def __init__(self, label: str, console: Console | None, min_bytes: int) -> None:
        self.label = label
        self.total = 0
        self.done = 0
        self._console = console
        self._min = min_bytes
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def expect(self, nbytes: int) -> None:
        self.total += nbytes
        if self._progress is None and self.total >= self._min and self._on_terminal():
            self._start()
        self._draw()

    def advance(self, nbytes: int) -> None:
        self.done += nbytes
        self._draw()
        if self.done >= self.total:
            self.stop()  # gone before the command prints what comes next

    def _on_terminal(self) -> bool:
        if self._console is not None:
            return bool(self._console.is_terminal)
        return sys.stderr.isatty()

    def _start(self) -> None:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        kw: dict[str, Any] = {"transient": True}
        if self._console is not None:
            kw["console"] = self._console
        else:
            from rich.console import Console

            kw["console"] = Console(stderr=True)
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            **kw,
        )
        self._progress.start()
        self._task = self._progress.add_task(self.label, total=self.total)

    def _draw(self) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, total=self.total, completed=self.done)

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress, self._task = None, None


class transfer_bar:  # lower case: used as a function, `with transfer_bar("label"):`
    """Show the block's transfers as one bar labelled `label`, when worth it."""

    def __init__(
        self, label: str, *, console: Console | None = None, min_bytes: int = BAR_MIN_BYTES
    ) -> None:
        self._bar = _Bar(label, console, min_bytes)
        self._reporting = reporting(self._bar)

    def __enter__(self) -> _Bar:
        self._reporting.__enter__()
        return self._bar

    def __exit__(self, *exc: object) -> None:
        try:
            self._bar.stop()
        finally:
            self._reporting.__exit__(*exc)
