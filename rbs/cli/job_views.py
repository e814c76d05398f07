"""Tables for people: how `rbs job show/queues` print (rich, imported only here; `list` is
rbs.cli.job_table)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from rbs.client.jobs import JobInfo
from rbs.model import JobState

_STATE_STYLE = {
    JobState.PENDING.value: "yellow",
    JobState.RUNNING.value: "cyan",
    JobState.COMPLETED.value: "green",
    JobState.FAILED.value: "red",
    JobState.CANCELLED.value: "magenta",
    JobState.TIMEOUT.value: "red",
    JobState.OUT_OF_MEMORY.value: "red",
    JobState.NODE_FAIL.value: "red",
    JobState.PREEMPTED.value: "magenta",
}


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def _state(info: Mapping[str, Any]) -> str:
    state = str(info["state"])
    return f"[{_STATE_STYLE.get(state, '')}]{state}[/]"


def print_show(info: JobInfo) -> None:
    r = info.raw
    console = Console()
    t = Table(box=None, show_header=False)
    t.add_column(style="bold")
    t.add_column()
    prov: Mapping[str, str] = r.get("provenance", {})

    def row(label: str, value: Any, field: str | None = None) -> None:
        src = f"  [dim]({prov[field]})[/]" if field and field in prov else ""
        t.add_row(label, f"{value}{src}")

    row("Job", f"{info.job_id} ({info.name})", "name")
    row(
        "User",
        r.get("user", "unknown") + (f"  (child of job {r['parent']})" if r.get("parent") else ""),
    )
    row("State", _state(r) + (f":{info.reason}" if info.reason else ""))
    m = r.get("manifest", {})
    row("Command", " ".join(m.get("command", [])), "command")
    row("Queue", info.queue, "queue")
    row("Preemptible", "yes" if m.get("preemptible") else "no", "preemptible")
    if m.get("container"):
        image = f"{m['container']}, network {m.get('network') or 'host'}"
        net = prov.get("network")
        if "container" in prov and net and net != prov["container"]:
            # The network may come from elsewhere (a flag over a target's image).
            image += f"  [dim]({prov['container']}; network: {net})[/]"
            t.add_row("Container", image)
        else:
            row("Container", image, "container")
    p = r.get("priority", {})
    row(
        "Priority",
        f"{p.get('total')} = base {p.get('base')} + queue {p.get('queue_weight')} "
        f"+ age {p.get('age_bonus')}",
        "priority",
    )
    res = r.get("resources", {})
    row("CPUs", res.get("cpu"), "resources.cpu")
    row("Memory", res.get("memory"), "resources.memory")
    row("GPUs", res.get("gpus"), "resources.gpus")
    row("Time limit", r.get("time_limit") or "none", "time_limit")
    if m.get("begin_time"):
        row("Begins", _when(m["begin_time"]), "begin_time")
    if m.get("nodes", 1) != 1 or m.get("elastic"):
        row("Nodes", m.get("nodes"), "nodes")
    if r.get("dependencies"):
        row(
            "Dependencies",
            ", ".join(f"{d['dep']} ({d['state']})" for d in r["dependencies"]),
            "dependencies",
        )
    if r.get("array"):
        a = r["array"]
        done = ", ".join(f"{k} {v}" for k, v in a.get("finished", {}).items()) or "none"
        row(
            "Array",
            f"{a['spec']}: {a['total']} tasks, {a['pending']} pending, "
            f"{a['running']} running, finished: {done}",
            "array",
        )
    row("Attempts", r.get("attempts", 0))
    if m.get("max_retries"):
        row("Max retries", m["max_retries"], "max_retries")
    row("Restarts", f"at most {m.get('restarts', 0)} after worker loss", "restarts")
    if m.get("deadline"):
        row("Deadline", _when(m["deadline"]) + " (cancelled unless started by then)", "deadline")
    if m.get("input_root"):
        row("Inputs", m["input_root"], "input_root")
    _origin_rows(prov, row)
    if m.get("outputs"):
        row("Outputs", ", ".join(m["outputs"]), "outputs")
    if m.get("env"):
        row(
            "Env",
            " ".join(f"{k}={v}" for k, v in m["env"].items())
            if isinstance(m["env"], dict)
            else m["env"],
            "env",
        )
    if m.get("secrets"):
        row("Secrets", ", ".join(m["secrets"]) + " (values never shown)", "secrets")
    row("Workers", ", ".join(r.get("workers", [])) or "-")
    if r.get("exit_code") is not None or r.get("signal"):
        sig = f" (signal {r['signal']})" if r.get("signal") else ""
        row("Exit code", f"{r.get('exit_code')}{sig}")
    if r.get("peak_memory_bytes") is not None:
        row(
            "Peak memory",
            f"{r['peak_memory_bytes'] / 2**20:.1f} MiB" + ("  OOM-killed" if r.get("oom") else ""),
        )
    row("Submitted", _when(r.get("submit_time")))
    row("Started", _when(r.get("start_time")))
    row("Ended", _when(r.get("end_time")))
    for c in r.get("changes", []):
        row("Changed", f"{c['action']} by {c['by']} at {_when(c['time'])}")
    console.print(t)
    _print_attempts(console, r.get("history") or [])


def _origin_rows(prov: Mapping[str, str], row: Callable[..., None]) -> None:
    """Where a job came from: its target, git commit (dirty or not), manifest digest."""
    if prov.get("origin.target"):
        rev = prov.get("origin.rev")
        row("Target", prov["origin.target"] + (f"@{rev}" if rev else ""))
    if prov.get("origin.commit"):
        dirty = prov.get("origin.dirty") == "true"
        row("Commit", prov["origin.commit"] + ("  (dirty tree)" if dirty else "  (clean tree)"))
    if prov.get("origin.manifest"):
        row("Manifest", prov["origin.manifest"])
    if prov.get("origin.resubmit_of"):
        row("Resubmit of", f"job {prov['origin.resubmit_of']}")


def _print_attempts(console: Console, history: Sequence[Mapping[str, Any]]) -> None:
    """Every attempt: where it ran, when, and how it ended (STATE:reason, exit code)."""
    if not history:
        return
    t = Table(title="Attempts", title_justify="left", box=None)
    for column in ("Task", "Attempt", "Workers", "Started", "Ended", "State", "Exit"):
        t.add_column(column)
    for a in history:
        state = f"{_state(a)}:{a['reason']}" if a.get("reason") else _state(a)
        code = a.get("exit_code")
        t.add_row(
            "-" if a.get("task") is None else str(a["task"]),
            str(a["attempt"]),
            ", ".join(a.get("workers", [])) or "-",
            _when(a.get("start_time")),
            _when(a.get("end_time")),
            state,
            "-" if code is None else str(code),
        )
    console.print(t)


def print_queues(queues: Sequence[Mapping[str, Any]]) -> None:
    t = Table(box=None, header_style="bold")
    for col in (
        "QUEUE",
        "WEIGHT",
        "DEFAULT TIME",
        "MAX TIME",
        "PENDING",
        "RUNNING",
        "TASKS PEND/RUN",
    ):
        t.add_column(col)
    for q in queues:
        t.add_row(
            q["name"],
            str(q["priority_weight"]),
            q.get("default_time_limit") or "none",
            q.get("max_time_limit") or "none",
            str(q["pending_jobs"]),
            str(q["running_jobs"]),
            f"{q['pending_tasks']}/{q['running_tasks']}",
        )
    Console().print(t)
