"""`rbs job submit`: its flags, its work, and the fast path that skips click for a plain submit.

The flags are declared once, in SUBMIT_FLAGS: rbs.cli.job makes the click options from
them, and `fast_submit_args` parses a plain submit (known `--flag VALUE` pairs, then
`-- COMMAND`) into exactly the parameters click would give, so a shell loop of submits
pays for neither click (~30 ms) nor argparse. Anything else goes to the click command.
This module imports only the standard library and rbs.client.jobs on that path (no
`typing`, no `argparse`): docs/design/jobs.md.
"""

from __future__ import annotations

import os
import sys

from rbs.client.errors import JobError

# Not `from typing import TYPE_CHECKING`: typing costs `rbs job submit` milliseconds of
# start-up; type checkers treat this name as true all the same.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from contextlib import AbstractContextManager
    from typing import Any, NoReturn

    from rbs.client.jobs import JobsClient

# How a flag takes its value: TEXT and INT take one (the last one given wins), LIST one
# per use (repeatable, kept in order), FLAG none.
TEXT, INT, LIST, FLAG = "text", "int", "list", "flag"

# (flag, kind, metavar, help). Every `rbs job` command takes COMMON_FLAGS.
COMMON_FLAGS: tuple[tuple[str, str, str, str], ...] = (
    (
        "--server",
        TEXT,
        "HOST:PORT",
        "Cluster address HOST:PORT (default: $RBS_REMOTE, else the local cluster).",
    ),
    (
        "--token-file",
        TEXT,
        "FILE",
        "File holding the cluster's token (default: $RBS_REMOTE_TOKEN).",
    ),
    (
        "--tls-ca",
        TEXT,
        "FILE",
        "Use TLS, trusting the server's certificate from this CA file (PEM) "
        "(default: $RBS_REMOTE_TLS_CA).",
    ),
)
# `--tls-ca FILE` means RBS_REMOTE_TLS_CA=FILE for this process (rbs.client.jobs.TLS_CA_ENV,
# not imported: `rbs job --help` does without that module), so no command passes it on.
TLS_CA_ENV = "RBS_REMOTE_TLS_CA"


def use_tls_ca(path: str | None) -> None:
    """What `--tls-ca FILE` does: trust FILE's CA for this process's connections."""
    if path:
        os.environ[TLS_CA_ENV] = path


SUBMIT_FLAGS: tuple[tuple[str, str, str, str], ...] = (
    *COMMON_FLAGS,
    ("--name", TEXT, "NAME", "Job name (default: the command or script name)."),
    ("--queue", TEXT, "QUEUE", "Queue (default: batch)."),
    ("--priority", INT, "N", "Higher runs first; waiting adds an age bonus."),
    ("--cpus", TEXT, "CPUS", "CPUs to reserve: 2, 0.5, 500m."),
    ("--memory-gb", TEXT, "GIB", "Memory to reserve (a hard limit), in GiB."),
    ("--gpus", INT, "N", "Whole GPUs to pin (CUDA_VISIBLE_DEVICES)."),
    ("--time", TEXT, "LIMIT", "Time limit: 30m, 2h, 1d, 1h30m or SECONDS."),
    ("--deps", TEXT, "DEPS", "Dependencies: afterok:ID,afterany:ID,afternotok:ID."),
    ("--array", TEXT, "INDICES", "Task indices: 0-99, 1,3,7, 0-99%10 (at most 10 at once)."),
    ("--env", LIST, "KEY[=VALUE]", "Set (or copy from here) a variable; repeatable."),
    ("--inputs", LIST, "PATH|DEST=SRC", "Stage into the working directory; repeatable."),
    ("--outputs", LIST, "PATH", "Record PATH into the CAS when the job ends; repeatable."),
    ("--cpu-cores", TEXT, "0-3,6", "Pin the job to these core ids of its worker (cpuset)."),
    ("--max-iobps", TEXT, "RATE", "Cap reads and writes, each, to RATE bytes/s (10M, 50Mi)."),
    (
        "--secret",
        LIST,
        "NAME|NAME=@FILE",
        "A secret in the job's environment, from yours or a file; masked in logs; repeatable.",
    ),
    ("--no-requeue", FLAG, "", "End as NODE_FAIL on worker loss instead of requeuing."),
    ("--preemptible", FLAG, "", "Let jobs of a higher tier stop this one (requeued or ended)."),
    ("--restarts", INT, "N", "Requeue after worker loss at most N times (default 10)."),
    ("--deadline", TEXT, "WHEN", "Cancel the job unless it started by WHEN: now+2h, ISO time."),
    ("--nodes", INT, "N", "Run on N workers at once (a gang)."),
    ("--max-retries", INT, "N", "Retry a failed job up to N times."),
    ("--checkpoint-dir", TEXT, "DIR", "Folder saved after each attempt, restored before the next."),
    ("--begin", TEXT, "WHEN", "Start no earlier than WHEN: 30m, now+1h, tomorrow 09:00, ISO."),
    ("--schedule", TEXT, "WHEN", "The same as --begin."),
    ("--container", TEXT, "IMAGE", "Run in this OCI image on a worker with podman or Docker."),
    ("--network", TEXT, "host|none", "The container's network: host (default) or none."),
    (
        "--script",
        TEXT,
        "FILE",
        "Run this script (staged; its shebang, #RBS and #SBATCH lines); ARGS follow it.",
    ),
    ("--manifest", TEXT, "FILE", "Submit a FILE.job.json built earlier."),
    ("--wait", FLAG, "", "Wait for the job to end; exit with its exit status."),
    ("--follow", FLAG, "", "Stream the job's log until it ends (-f); exit with its status."),
    ("--interactive", FLAG, "", "Attach: stdin to the job, its output here (-i); its status."),
    ("--pty", FLAG, "", "With -i: a pseudo-terminal, as srun --pty (~. detaches, ~C cancels)."),
)
SHORT_FLAGS = {"-f": "--follow", "-i": "--interactive"}
USAGE = "[OPTIONS] -- COMMAND [ARGS...] | --script FILE | //pkg:target"


def param_name(flag: str) -> str:
    """The parameter a flag sets, named as click names it: --memory-gb -> memory_gb."""
    return flag[2:].replace("-", "_")


_KINDS = {flag: kind for flag, kind, _, _ in SUBMIT_FLAGS}
_DEFAULTS: dict[str, object] = {
    param_name(flag): {LIST: (), FLAG: False}.get(kind) for flag, kind in _KINDS.items()
}


def fast_submit_args(argv: Sequence[str]) -> dict[str, object] | None:
    """`submit [--flag VALUE | --flag=VALUE ...] -- COMMAND...` parsed without click.

    Returns None for anything else (help, errors, abbreviations, values starting with
    "-", a //pkg:target, no `--`), which the click command then parses as always; for
    what it accepts it gives exactly click's parameters (tests/unit/cli/test_job_cli_fast.py).
    """
    if not argv or argv[0] != "submit":
        return None
    values = dict(_DEFAULTS)
    i, n = 1, len(argv)
    while i < n:
        tok = SHORT_FLAGS.get(argv[i], argv[i])
        if tok == "--":
            break
        if _KINDS.get(tok) == FLAG:
            values[param_name(tok)] = True
            i += 1
            continue
        flag, eq, value = tok.partition("=")
        kind = _KINDS.get(flag)
        if kind is None or kind == FLAG:
            return None
        if not eq:
            if i + 1 >= n or argv[i + 1].startswith("-"):
                return None
            value = argv[i + 1]
            i += 1
        i += 1
        name = param_name(flag)
        if kind == INT:
            try:
                values[name] = int(value)
            except ValueError:
                return None
        elif kind == LIST:
            items = values[name]
            values[name] = (*items, value) if isinstance(items, tuple) else (value,)
        else:
            values[name] = value
    command = tuple(argv[i + 1 :])
    if i >= n or not command or command[0] == "--" or command[0].startswith("//"):
        return None
    values["command"] = command
    ca = values.pop("tls_ca")
    use_tls_ca(ca if isinstance(ca, str) else None)
    return values


def fast_main(argv: Sequence[str]) -> int | None:
    """The fast entry point of `rbs job`: a plain submit's exit code, or None for click."""
    params = fast_submit_args(argv)
    if params is None:
        return None
    code = report("submit", lambda: submit(params))
    if not any(params[k] for k in ("script", "wait", "follow", "interactive")):
        end_now(code)
    return code


def end_now(code: int) -> NoReturn:
    """Exit a plain submit without the interpreter's teardown (~2 ms of freeing every
    module, a tenth of the call): it has printed its answer and closed its connection,
    and has no threads or exit handlers (a --script submit removes a folder at exit)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def report(cmd: str, run: Callable[[], int]) -> int:
    """Run one `rbs job` command: its exit code, or 2 and one line naming what was wrong."""
    try:
        return int(run())
    except BrokenPipeError:
        # `rbs job logs 7 | head`: the reader has what it wanted; end as other tools do.
        from rbs.cli.guard import pipe_closed

        pipe_closed()
        return 141  # pragma: no cover - pipe_closed ends the process
    except (JobError, ValueError, OSError) as e:
        print(f"rbs job {cmd}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def client_for(server: str | None, token_file: str | None) -> JobsClient:
    """The jobs client for --server and --token-file (both optional)."""
    # Imported here, not above, so that `rbs job --help` does without it (and its json).
    from rbs.client.jobs import JobsClient

    token = None
    if token_file:
        try:
            with open(token_file) as f:
                token = f.read().strip()
        except OSError as e:
            raise JobError(f"--token-file {token_file!r}: {e.strerror}") from None
    return JobsClient(server, token=token)


def _env_items(items: Sequence[str]) -> list[str]:
    out = []
    for item in items:
        if "=" in item:
            out.append(item)
            continue
        value = os.environ.get(item)
        if value is None:
            raise JobError(
                f"--env {item}: {item} is not set in your environment; "
                f"set it or pass --env {item}=VALUE"
            )
        out.append(f"{item}={value}")
    return out


def _begin(params: Mapping[str, Any], cmd: str = "submit") -> int | str | None:
    """--begin (or --schedule) as epoch seconds, "" to clear one, None when not given."""
    flag = "--begin" if params.get("begin") is not None else "--schedule"
    text = params.get(flag[2:])
    if text is None:
        return None
    if not text.strip():
        return ""  # clears a begin time a target or manifest set
    import time

    from rbs.cli.when import parse_begin

    now = time.time()
    when = parse_begin(text, now, flag=flag)
    if when < now - 1:
        at = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(when))
        print(
            f"rbs job {cmd}: note: {flag} {text!r} ({at}) has passed; the job may start at once",
            file=sys.stderr,
        )
        return ""
    return int(when + 0.5)


def _check_program(command: Sequence[str]) -> None:
    """Refuse a relative program (./prepare.sh) in a job whose folder will hold nothing."""
    program = command[0]
    if "/" in program and not os.path.isabs(program):
        raise JobError(
            f"{program!r} is a relative path, but nothing is shared with the job: its folder "
            f"holds only what --inputs stages. Stage the files with --inputs . (or --inputs "
            f"{program}), or run a script with --script {program}"
        )


def _check_pty(params: Mapping[str, Any]) -> None:
    """--pty needs -i and a terminal to be the job's (-i alone takes piped stdin)."""
    if not params["pty"]:
        return
    if not params["interactive"]:
        raise JobError("--pty needs --interactive (-i): rbs job submit -i --pty -- bash")
    if not os.isatty(0):
        raise JobError(
            "--pty needs a terminal on stdin (it is a pipe or a file here); "
            "use -i alone to feed the job's stdin from a pipe"
        )


class _NoTransfer:
    """What a submit that stages nothing wraps its call in, instead of a transfer bar."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _staging_bar(stages: bool) -> AbstractContextManager[object]:
    """A progress bar for the inputs a submit stages (drawn for a big upload, on a
    terminal); for a submit that stages none, not even rbs.cli.progress is loaded."""
    if not stages:
        return _NoTransfer()
    from rbs.cli.progress import transfer_bar

    return transfer_bar("staging inputs")


def submit(params: Mapping[str, Any], target: str | None = None) -> int:
    """Submit one job from `rbs job submit`'s parameters (and a //pkg:target, if one was named)."""
    if params["script"]:
        from rbs.cli.script_directives import script_params

        params, notes = script_params(params, _KINDS)
        for note in notes:
            print(f"rbs job submit: note: {note}", file=sys.stderr)
    _check_pty(params)
    command: list[str] = list(params["command"])
    inputs = list(params["inputs"])
    manifest_path = params["manifest"]
    manifest = provenance = None
    if manifest_path:
        from rbs.wire.manifest import manifest_from_json, provenance_for

        try:
            with open(manifest_path, "rb") as f:
                manifest = manifest_from_json(f.read())
        except OSError as e:
            raise JobError(f"--manifest {manifest_path!r}: {e.strerror}") from None
        provenance = provenance_for(manifest, f"manifest {manifest_path}")
    elif target is not None:
        from rbs.client.targets import build_job_target

        manifest, provenance = build_job_target(target)
    if manifest is not None and manifest.input_root is not None and inputs:
        raise JobError(
            "--inputs cannot be added to a job that has its input tree (a //pkg:target or "
            "a built manifest): the tree is the target's binary, runfiles and data; add the "
            "files to the target's data instead"
        )
    if manifest is None and not command:
        raise JobError(
            "nothing to run: give a command after --, --script FILE, "
            "--manifest FILE.job.json or a //pkg:target"
        )
    if manifest is None and not inputs and not params["checkpoint_dir"]:
        _check_program(command)
    flags: dict[str, Any] = {
        "name": params["name"],
        "queue": params["queue"],
        "priority": params["priority"],
        "cpus": params["cpus"],
        "memory_gb": params["memory_gb"],
        "gpus": params["gpus"],
        "time": params["time"],
        "deps": params["deps"],
        "array": params["array"],
        "env": _env_items(params["env"]) or None,
        "outputs": list(params["outputs"]) or None,
        "no_requeue": params["no_requeue"] or None,
        "preemptible": params["preemptible"] or None,
        "interactive": params["interactive"] or None,
        "pty": params["pty"] or None,
        "nodes": params["nodes"],
        "max_retries": params["max_retries"],
        "restarts": params["restarts"],
        "deadline": params["deadline"],
        "checkpoint_dir": params["checkpoint_dir"],
        "cpu_cores": params["cpu_cores"],
        "max_iobps": params["max_iobps"],
        "begin": _begin(params),
        "container": params["container"],
        "network": params["network"],
    }
    named = manifest.secrets if manifest is not None else ()
    secret_names: list[str] = []
    secrets: dict[str, str] = {}
    if params["secret"] or named:  # most submits have none: their module is not loaded
        from rbs.client.secrets import read_secrets

        secret_names, secrets = read_secrets(params["secret"], named)
    flags["secret"] = secret_names or None
    flags = {k: v for k, v in flags.items() if v is not None}
    with (
        client_for(params["server"], params["token_file"]) as client,
        _staging_bar(bool(inputs) or manifest is not None),
    ):
        if manifest is not None:
            from rbs.client.targets import check_queue, stage_manifest_inputs

            if params["queue"] is None:
                check_queue(client, manifest, provenance or {})
            from pathlib import Path

            source = Path(manifest_path) if manifest_path else None
            stage_manifest_inputs(client, manifest, source=source)
        job_id = client.submit(
            command or None,
            manifest=manifest,
            provenance=provenance,
            inputs=inputs,
            secrets=secrets,
            **flags,
        )
        if params["interactive"]:  # stdout is the job's alone
            print(f"rbs: job {job_id}", file=sys.stderr, flush=True)
            from rbs.cli.job_attach import attach

            return attach(client, job_id, pty=bool(params["pty"]))
        print(job_id)
        sys.stdout.flush()
        if params["follow"] or params["wait"]:
            from rbs.cli.job_follow import exit_status, follow, state_text, wait

            if params["follow"]:
                return follow(client, job_id)
            info = wait(client, job_id)  # a status line with the pending reason, on a terminal
            print(f"job {job_id}: {state_text(info.state, info.reason)}", file=sys.stderr)
            return exit_status(info)
    return 0
