"""Transfer progress bars: drawn on a terminal for big transfers only, rich loaded only then."""

from __future__ import annotations

import io
import subprocess
import sys

from rich.console import Console

from rbs.cas import transfer
from rbs.cli.progress import transfer_bar


def _terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=100), out


def test_a_big_transfer_on_a_terminal_draws_bytes_rate_and_eta() -> None:
    console, out = _terminal()
    with transfer_bar("staging inputs", console=console, min_bytes=1 << 20) as bar:
        transfer.expect(64 << 20)
        for _ in range(8):
            transfer.advance(4 << 20)
        drawn = out.getvalue()
        transfer.advance(32 << 20)
    assert (bar.total, bar.done) == (64 << 20, 64 << 20)
    assert "staging inputs" in drawn
    assert "/67.1 MB" in drawn  # rich's DownloadColumn: done/total in decimal units


def test_a_small_transfer_draws_nothing() -> None:
    console, out = _terminal()
    with transfer_bar("fetching outputs", console=console, min_bytes=32 << 20) as bar:
        transfer.expect(1 << 20)
        transfer.advance(1 << 20)
    assert bar.done == 1 << 20
    assert out.getvalue() == ""


def test_no_terminal_draws_nothing_and_never_imports_rich_progress() -> None:
    code = (
        "import sys\n"
        "from rbs.cli.progress import transfer_bar\n"
        "from rbs.cas import transfer\n"
        "with transfer_bar('staging inputs', min_bytes=1):\n"
        "    transfer.expect(1 << 30)\n"
        "    transfer.advance(1 << 30)\n"
        "print('rich.progress' in sys.modules, 'rich' in sys.modules)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert r.stdout.split() == ["False", "False"]
    assert r.stderr == ""


def test_reports_outside_a_bar_go_nowhere() -> None:
    transfer.expect(10)  # no sink installed: nothing to call, nothing raised
    transfer.advance(10)
    with transfer_bar("x", min_bytes=1 << 40) as bar:
        transfer.advance(5)
    transfer.advance(7)
    assert bar.done == 5
