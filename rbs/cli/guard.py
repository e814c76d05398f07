"""The `rbs` command's last line of defence: no Python traceback ever reaches a user.

Every command reports its own errors (one line naming the flag, the file or the address
and what to do). What escapes them is either a pipe the reader closed early
(`rbs job logs 7 | head`), which ends quietly the way other command-line tools end (by
SIGPIPE, status 141 in the shell), or a bug in rbs, which prints one line saying so and
how to see the traceback (RBS_DEBUG=1). This module imports only the standard library's
smallest parts: it wraps `rbs job submit`'s fast path too.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

DEBUG_ENV = "RBS_DEBUG"
REPORT_HINT = (
    "this is a bug in rbs: please report it with the command you ran and the output "
    f"of the same command with {DEBUG_ENV}=1 (which shows the traceback)"
)


def debugging() -> bool:
    """Whether RBS_DEBUG asks for tracebacks (any value but empty, 0, false, no)."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


def pipe_closed() -> None:
    """End the process as a tool whose reader went away: quietly, by SIGPIPE."""
    # Whatever is still buffered for stdout would fail again at exit and print
    # "Exception ignored ... BrokenPipeError": point stdout at /dev/null first.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    import signal

    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGPIPE)
    sys.exit(128 + signal.SIGPIPE)  # pragma: no cover - the signal ends the process first


def guarded(run: Callable[[], object]) -> None:
    """Run the command line: exit codes and click's own errors pass through; a closed
    pipe ends quietly; Ctrl-C exits 130; anything else is one line, not a traceback."""
    try:
        run()
    except SystemExit:
        raise
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        pipe_closed()
    except BaseException as e:  # the point of this function: nothing escapes as a traceback
        if debugging():
            raise
        text = str(e).strip().splitlines()[0] if str(e).strip() else ""
        what = f"{type(e).__name__}: {text}" if text else type(e).__name__
        print(f"rbs: internal error: {what}", file=sys.stderr)
        print(f"rbs: {REPORT_HINT}", file=sys.stderr)
        sys.exit(70)  # EX_SOFTWARE (sysexits.h): an internal software error
