"""How a job's ending reads on the command line: `STATE:reason`, its exit status, and following its log.

`rbs job submit --wait` and `-f` exit with the job's own status (the README's table):
0 when it COMPLETED, its exit code N when it FAILED (128+signal when a signal ended it;
the highest task code for an array or a gang), and fixed codes for the endings that
have no exit code of their own. Ctrl-C while following leaves the job running and
exits 130, naming the command that follows it again.

While the job waits to start, a terminal on stderr shows one status line that updates
in place (`job 12: PENDING:Resources`) and is erased once it starts or ends; in a pipe
or a file nothing is written, so scripts read only the log and the final line.

On the path of `rbs job submit`, so standard library only (no click, no typing).
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from rbs.client.jobs import JobsClient
    from rbs.model import LogLine
    from rbs.wire.jobs_api import JobInfo

# The exit statuses of endings without an exit code of their own (README: "Exit codes").
FIXED_STATUS = {
    "TIMEOUT": 124,  # as timeout(1)
    "CANCELLED": 122,
    "NODE_FAIL": 120,
    "PREEMPTED": 121,
    "OUT_OF_MEMORY": 137,  # 128 + SIGKILL, as the kernel's OOM kill reads elsewhere
}
INTERRUPTED = 130  # Ctrl-C while following: the job goes on
STATUS_EVERY = 1.0  # seconds between refreshes of the status line


def state_text(state: str, reason: str | None) -> str:
    """`FAILED:exit 3`, `NODE_FAIL:worker_lost`, `PENDING:Priority`, or just `COMPLETED`."""
    return f"{state}:{reason}" if reason else state


def exit_status(info: JobInfo) -> int:
    """The status `submit --wait` and `-f` exit with for an ended job."""
    if info.state == "COMPLETED":
        return 0
    fixed = FIXED_STATUS.get(info.state)
    if fixed is not None:
        return fixed
    code = info.exit_code
    # FAILED with no code of its own: it never started (its log says why).
    return code if isinstance(code, int) and 0 < code < 256 else 1


class _StatusLine:
    """One line on a terminal's stderr, rewritten in place, erased by `clear`."""

    def __init__(self) -> None:
        self.shown = False

    def show(self, text: str) -> None:
        sys.stderr.write(f"\r\x1b[K{text}")
        sys.stderr.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
            self.shown = False


def wait(client: JobsClient, job_id: str) -> JobInfo:
    """Wait for the job to end; while stderr is a terminal, with its state and pending
    reason as a status line."""
    if not sys.stderr.isatty():
        return client.wait(job_id)
    return _poll(client, job_id, until_started=False)


def _poll(client: JobsClient, job_id: str, *, until_started: bool) -> JobInfo:
    """Wait, showing the state as a status line, until the job ends (or leaves PENDING)."""
    line = _StatusLine()
    try:
        info = client.show(job_id)  # a job that started already is followed at once
        while True:  # ends with the job: each turn is one bounded long poll
            if info.done or (until_started and info.state != "PENDING"):
                return info
            line.show(f"job {job_id}: {state_text(info.state, info.reason)}")
            info = client.wait(job_id, timeout=STATUS_EVERY)  # answers at once if it ends
    finally:
        line.clear()


def where(line: LogLine, gang: bool) -> str:
    """The label of a line's origin: `[3] ` for array task 3, `[r1] ` for gang rank 1."""
    parts = []
    if line.task is not None:
        parts.append(str(line.task))
    if gang:
        parts.append(f"r{line.rank}")
    return f"[{'.'.join(parts)}] " if parts else ""


def print_line(line: LogLine, *, label: bool, gang: bool, flush: bool) -> None:
    stream = sys.stderr if line.stream.value == "err" else sys.stdout
    prefix = where(line, gang) if label else ""
    if line.stream.value == "sys":
        prefix += "[rbs] "
    print(prefix + line.text, file=stream, flush=flush)


def follow(client: JobsClient, job_id: str, *, label: bool | None = None) -> int:
    """Stream a job's log until it ends; its exit status, or 130 on Ctrl-C (job left running).

    `label` None: label lines only when the job is an array or a gang, so that plain
    output always says which line came from where."""
    try:
        gang = False
        if label is None:
            raw = client.show(job_id).raw
            gang = int(raw.get("manifest", {}).get("nodes", 1)) > 1
            label = gang or raw.get("array") is not None
        if sys.stderr.isatty():  # the log stream itself waits for the start
            _poll(client, job_id, until_started=True)
        for line in client.logs(job_id, follow=True):
            print_line(line, label=label, gang=gang, flush=True)
        info = client.wait(job_id)
    except KeyboardInterrupt:
        print(
            f"\nrbs: stopped following job {job_id}; it goes on running. "
            f"Follow it again with: rbs job logs -f {job_id}",
            file=sys.stderr,
        )
        return INTERRUPTED
    print(f"job {job_id}: {state_text(info.state, info.reason)}", file=sys.stderr)
    return exit_status(info)
