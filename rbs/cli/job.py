"""`rbs job`: submit and manage batch jobs (argparse, for start-up speed: docs/design/jobs.md)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

from rbs.client.jobs import JobError, JobInfo, JobsClient

# Not `from typing import TYPE_CHECKING`: typing (like argparse) costs `rbs job submit`
# milliseconds of start-up; type checkers treat this name as true all the same.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import Any

EPILOG = "With no --server and no RBS_REMOTE, a local cluster under $RBS_HOME is used."

# `submit` flags the fast path parses (flag -> attribute); see fast_submit_args.
_VALUE_FLAGS = {
    "--server": "server",
    "--token-file": "token_file",
    "--name": "name",
    "--queue": "queue",
    "--priority": "priority",
    "--cpus": "cpus",
    "--memory-gb": "memory_gb",
    "--gpus": "gpus",
    "--time": "time",
    "--deps": "deps",
    "--array": "array",
    "--nodes": "nodes",
    "--max-retries": "max_retries",
    "--checkpoint-dir": "checkpoint_dir",
    "--script": "script",
    "--manifest": "manifest",
}
_INT_FLAGS = frozenset({"priority", "gpus", "nodes", "max_retries"})
_LIST_FLAGS = {"--env": "env", "--inputs": "inputs", "--outputs": "outputs"}
_BOOL_FLAGS = {"--no-requeue": "no_requeue", "--wait": "wait"}


class FastArgs:
    """Parsed `submit` arguments from the fast path, read like an argparse Namespace."""

    def __init__(self, values: dict[str, object]) -> None:
        self.__dict__.update(values)

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any: ...


def fast_submit_args(argv: Sequence[str]) -> FastArgs | None:
    """`submit [--flag VALUE | --flag=VALUE ...] -- COMMAND...` parsed without argparse,
    whose import and parser cost a shell loop of submits a fifth of each call's time.

    Returns None for anything else (help, errors, abbreviations, values starting with
    "-", a //pkg:target, no `--`), which argparse then parses as always; for what it
    accepts it gives exactly argparse's result (tests/unit/jobs/test_job_cli_fast.py).
    """
    if not argv or argv[0] != "submit":
        return None
    values: dict[str, object] = dict.fromkeys((*_VALUE_FLAGS.values(), *_LIST_FLAGS.values()))
    values.update(dict.fromkeys(_BOOL_FLAGS.values(), False))
    i, n = 1, len(argv)
    while i < n:
        tok = argv[i]
        if tok == "--":
            break
        if tok in _BOOL_FLAGS:
            values[_BOOL_FLAGS[tok]] = True
            i += 1
            continue
        flag, eq, value = tok.partition("=")
        name = _VALUE_FLAGS.get(flag) or _LIST_FLAGS.get(flag)
        if name is None:
            return None
        if not eq:
            if i + 1 >= n or argv[i + 1].startswith("-"):
                return None
            value = argv[i + 1]
            i += 1
        i += 1
        if name in _INT_FLAGS:
            try:
                values[name] = int(value)
            except ValueError:
                return None
        elif flag in _LIST_FLAGS:
            items = values[name]
            values[name] = [*items, value] if isinstance(items, list) else [value]
        else:
            values[name] = value
    command = list(argv[i:])
    if len(command) < 2 or command[1] == "--" or command[1].startswith("//"):
        return None
    values.update(command=command, cmd="submit", func=cmd_submit)
    return FastArgs(values)


def _client(args: argparse.Namespace | FastArgs) -> JobsClient:
    token = None
    if getattr(args, "token_file", None):
        try:
            with open(args.token_file) as f:
                token = f.read().strip()
        except OSError as e:
            raise JobError(f"--token-file {args.token_file!r}: {e.strerror}") from None
    return JobsClient(args.server, token=token)


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


def _script_command(path: str, inputs: list[str]) -> list[str]:
    from pathlib import Path

    p = Path(path)
    if not p.is_file():
        raise JobError(f"--script {path!r}: no such file")
    inputs.append(f"{p.name}={p}")
    with open(p, "rb") as f:
        shebang = f.read(2) == b"#!"
    return [f"./{p.name}"] if shebang and os.access(p, os.X_OK) else ["/bin/sh", p.name]


def _flags_after_target(args: argparse.Namespace | FastArgs, rest: list[str]) -> list[str]:
    """`submit //pkg:target --nodes 2 [-- CMD...]`: flags may follow the target."""
    cut = rest.index("--") if "--" in rest else len(rest)
    if cut:
        args.parser.parse_args(rest[:cut], namespace=args)
        return [*args.command, *rest[cut + 1 :]]
    return rest[cut + 1 :]


def cmd_submit(args: argparse.Namespace | FastArgs) -> int:
    command: list[str] = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    inputs = list(args.inputs or [])
    manifest = provenance = None
    target = None
    if command and command[0].startswith("//") and not args.script:
        target, command = command[0], _flags_after_target(args, command[1:])
    if args.script:
        if command:
            raise JobError("give either --script FILE or a command after --, not both")
        command = _script_command(args.script, inputs)
    if args.manifest:
        from rbs.wire.manifest import manifest_from_json

        try:
            with open(args.manifest, "rb") as f:
                manifest = manifest_from_json(f.read())
        except OSError as e:
            raise JobError(f"--manifest {args.manifest!r}: {e.strerror}") from None
        provenance = {"*": f"manifest {args.manifest}"}
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
    flags: dict[str, Any] = {
        "name": args.name,
        "queue": args.queue,
        "priority": args.priority,
        "cpus": args.cpus,
        "memory_gb": args.memory_gb,
        "gpus": args.gpus,
        "time": args.time,
        "deps": args.deps,
        "array": args.array,
        "env": _env_items(args.env or []) or None,
        "outputs": args.outputs or None,
        "no_requeue": args.no_requeue or None,
        "nodes": args.nodes,
        "max_retries": args.max_retries,
        "checkpoint_dir": args.checkpoint_dir,
    }
    flags = {k: v for k, v in flags.items() if v is not None}
    with _client(args) as client:
        if manifest is not None:
            from rbs.client.targets import check_queue, stage_manifest_inputs

            if args.queue is None:
                check_queue(client, manifest, provenance or {})
            from pathlib import Path

            source = Path(args.manifest) if args.manifest else None
            stage_manifest_inputs(client, manifest, source=source)
        job_id = client.submit(
            command or None, manifest=manifest, provenance=provenance, inputs=inputs, **flags
        )
        print(job_id)
        sys.stdout.flush()
        if args.wait:
            info = client.wait(job_id)
            print(f"job {job_id}: {info.state}", file=sys.stderr)
            return 0 if info.ok else 1
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with _client(args) as client:
        infos = [client.show(j) for j in args.ids]
    if args.json:
        for info in infos:
            print(json.dumps(info.raw, sort_keys=True))
        return 0
    from rbs.cli.job_views import print_show

    for info in infos:
        print_show(info)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    states = [s.strip().upper() for s in (args.state or "").split(",") if s.strip()]
    with _client(args) as client:
        jobs = client.list_jobs(states=states, queue=args.queue, history=args.history)
    if args.json:
        for info in jobs:
            print(json.dumps(info.raw, sort_keys=True))
        return 0
    from rbs.cli.job_views import print_list

    print_list(jobs)
    return 0


def cmd_queues(args: argparse.Namespace) -> int:
    with _client(args) as client:
        queues = client.queues()
    if args.json:
        print(json.dumps(queues, sort_keys=True))
        return 0
    from rbs.cli.job_views import print_queues

    print_queues(queues)
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    with _client(args) as client:
        for line in client.logs(args.id, follow=args.follow, tail=args.tail):
            if args.json:
                print(line.to_json(), flush=args.follow)
            else:
                stream = sys.stderr if line.stream == "err" else sys.stdout
                prefix = "[rbs] " if line.stream == "sys" else ""
                print(prefix + line.text, file=stream, flush=args.follow)
    return 0


def cmd_wait(args: argparse.Namespace) -> int:
    bad: list[JobInfo] = []
    with _client(args) as client:
        for job_id in args.ids:
            info = client.wait(job_id, timeout=args.timeout)
            print(f"{info.job_id}\t{info.state}")
            if not info.ok:
                bad.append(info)
    return 1 if bad else 0


def cmd_cancel(args: argparse.Namespace) -> int:
    with _client(args) as client:
        for job_id in client.cancel(args.ids):
            print(f"cancelled {job_id}")
    return 0


def cmd_outputs(args: argparse.Namespace) -> int:
    with _client(args) as client:
        dest = client.outputs(args.id, args.dest)
    print(dest)
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--server", help="cluster address HOST:PORT (default: $RBS_REMOTE, else local)")
    p.add_argument(
        "--token-file", help="file holding the cluster's token (default: $RBS_REMOTE_TOKEN)"
    )


def build_parser() -> argparse.ArgumentParser:
    import argparse

    ap = argparse.ArgumentParser(
        prog="rbs job", description="Submit and manage batch jobs.", epilog=EPILOG
    )
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    s = sub.add_parser(
        "submit",
        help="submit a command, script, manifest or //pkg:target",
        usage="rbs job submit [flags] -- COMMAND [ARGS...] | --script FILE | //pkg:target",
        epilog=EPILOG,
    )
    _common(s)
    s.add_argument("--name", help="job name (default: the command or script name)")
    s.add_argument("--queue", help="queue (default: batch)")
    s.add_argument("--priority", type=int, help="higher runs first; waiting adds an age bonus")
    s.add_argument("--cpus", help="cpus to reserve: 2, 0.5, 500m")
    s.add_argument("--memory-gb", help="memory to reserve (hard limit), in GiB")
    s.add_argument("--gpus", type=int, help="whole GPUs to pin (CUDA_VISIBLE_DEVICES)")
    s.add_argument("--time", help="time limit: 30m, 2h, 1d, 1h30m or SECONDS")
    s.add_argument("--deps", help="afterok:ID,afterany:ID,afternotok:ID")
    s.add_argument("--array", help="task indices: 0-99, 1,3,7, 0-99%%10")
    s.add_argument(
        "--env", action="append", metavar="KEY[=VALUE]", help="set (or copy) a variable; repeatable"
    )
    s.add_argument(
        "--inputs",
        action="append",
        metavar="PATH|DEST=SRC",
        help="stage into the working directory; repeatable",
    )
    s.add_argument(
        "--outputs",
        action="append",
        metavar="PATH",
        help="record PATH into the CAS when the job ends; repeatable",
    )
    s.add_argument(
        "--no-requeue",
        action="store_true",
        help="end as NODE_FAIL on worker loss instead of requeuing",
    )
    s.add_argument("--nodes", type=int, help="run on N workers at once (a gang)")
    s.add_argument("--max-retries", type=int, help="retry a failed job up to N times")
    s.add_argument(
        "--checkpoint-dir", help="folder saved after each attempt and restored before the next"
    )
    s.add_argument("--script", help="run this script file (staged with the job)")
    s.add_argument("--manifest", help="submit a FILE.job.json built earlier")
    s.add_argument(
        "--wait",
        action="store_true",
        help="wait for the job to end; exit non-zero unless COMPLETED",
    )
    s.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...] or //pkg:target")
    s.set_defaults(func=cmd_submit, parser=s)

    p = sub.add_parser("show", help="a job's state, reason, priority, resources and history")
    _common(p)
    p.add_argument("ids", nargs="+", metavar="ID")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("list", help="active jobs (--history: finished ones too)")
    _common(p)
    p.add_argument("--state", help="comma-separated states, e.g. PENDING,RUNNING")
    p.add_argument("--queue")
    p.add_argument("--history", action="store_true", help="include finished jobs")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("logs", help="a job's numbered log lines (-f follows live)")
    _common(p)
    p.add_argument("id", metavar="ID")
    p.add_argument("-f", "--follow", action="store_true")
    p.add_argument("--tail", type=int, metavar="N")
    p.add_argument(
        "--json", action="store_true", help="one object per line: seq, time, stream, text"
    )
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser("wait", help="wait for jobs to end; non-zero exit if any did not complete")
    _common(p)
    p.add_argument("ids", nargs="+", metavar="ID")
    p.add_argument("--timeout", type=float, help="seconds to wait at most")
    p.set_defaults(func=cmd_wait)

    p = sub.add_parser("cancel", help="cancel jobs or array tasks (ID or ID_INDEX)")
    _common(p)
    p.add_argument("ids", nargs="+", metavar="ID")
    p.set_defaults(func=cmd_cancel)

    p = sub.add_parser("outputs", help="download a job's recorded outputs")
    _common(p)
    p.add_argument("id", metavar="ID")
    p.add_argument("--dest", help="folder to write (default ./job-ID-outputs/)")
    p.set_defaults(func=cmd_outputs)

    p = sub.add_parser("queues", help="queues: priority weights, time limits, occupancy")
    _common(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_queues)
    return ap


def main(argv: Sequence[str]) -> int:
    args = fast_submit_args(argv) or build_parser().parse_args(list(argv))
    try:
        return int(args.func(args))
    except (JobError, ValueError, OSError) as e:
        print(f"rbs job {args.cmd}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
