"""`rbs job`: submit and manage batch jobs on the cluster (the click commands).

A plain `rbs job submit ... -- COMMAND` never gets here: rbs.cli.job_submit answers it
before click is imported. These commands read their flags as `rbs job` always has
(argparse's rules, see JobCommand), so every command line that worked still works.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from rbs.cli.job_reserve import reservations, reserve
from rbs.cli.job_resubmit import RESUBMIT_FLAGS, resubmit_job
from rbs.cli.job_submit import (
    COMMON_FLAGS,
    FLAG,
    INT,
    LIST,
    SHORT_FLAGS,
    SUBMIT_FLAGS,
    USAGE,
    client_for,
    report,
    use_tls_ca,
)
from rbs.cli.job_submit import submit as submit_job
from rbs.cli.job_telemetry import telemetry as telemetry_command
from rbs.cli.job_update import update as update_command

if TYPE_CHECKING:
    from rbs.wire.jobs_api import JobInfo

F = TypeVar("F", bound=Callable[..., Any])

LIST_ROWS = 100  # `rbs job list` rows unless --limit or --all

EPILOG = "With no --server and no RBS_REMOTE, a local cluster under $RBS_HOME is used."

# argparse reads these as values, not flags, when no option looks like a number.
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def _looks_like_flag(arg: str) -> bool:
    return (
        arg.startswith("-") and len(arg) > 1 and " " not in arg and not _NEGATIVE_NUMBER.match(arg)
    )


def argparse_style(cmd: click.Command, ctx: click.Context, args: Sequence[str]) -> list[str]:
    """`args` with each long flag cut to a unique prefix written in full (`--mem 4` is
    `--memory-gb 4`), refusing ambiguous prefixes and flag values that look like flags
    (`--name --wait`): the rules `rbs job` kept from argparse, which click lacks."""
    takes_value: dict[str, bool] = {}
    for param in cmd.get_params(ctx):
        if isinstance(param, click.Option):
            for opt in (*param.opts, *param.secondary_opts):
                if opt.startswith("--"):
                    takes_value[opt] = not (param.is_flag or param.count)
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--" or (not _looks_like_flag(arg) and not ctx.allow_interspersed_args):
            return [*out, *args[i:]]
        i += 1
        if not arg.startswith("--"):
            out.append(arg)
            continue
        flag, eq, value = arg.partition("=")
        if flag not in takes_value:
            matches = [opt for opt in takes_value if opt.startswith(flag)]
            if len(matches) > 1 and not ctx.resilient_parsing:
                raise click.UsageError(
                    f"ambiguous option: {flag} could match {', '.join(matches)}", ctx
                )
            if len(matches) != 1:
                out.append(arg)  # unknown: click names it and suggests the closest
                continue
            flag = matches[0]
        out.append(flag + eq + value)
        if takes_value[flag] and not eq and i < len(args):
            if _looks_like_flag(args[i]) and not ctx.resilient_parsing:
                raise click.BadOptionUsage(
                    flag,
                    f"Option '{flag}' requires an argument; for a value that starts "
                    f"with '-', write {flag}=VALUE.",
                    ctx,
                )
            out.append(args[i])
            i += 1
    return out


class JobCommand(click.Command):
    """A `rbs job` command: click parsing, after `argparse_style`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, argparse_style(self, ctx, args))


class SubmitCommand(JobCommand):
    """`rbs job submit`, whose usage line names its three forms."""

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return [USAGE]


class JobGroup(click.Group):
    command_class = JobCommand


def _options(flags: Sequence[tuple[str, str, str, str]]) -> Callable[[F], F]:
    """Click options for rows of rbs.cli.job_submit's flag tables."""

    def add(f: F) -> F:
        for flag, kind, metavar, text in reversed(flags):
            if kind == FLAG:
                short = [s for s, long in SHORT_FLAGS.items() if long == flag]
                f = click.option(flag, *short, is_flag=True, help=text)(f)
            elif flag == "--tls-ca":
                f = click.option(
                    flag,
                    metavar=metavar,
                    help=text,
                    expose_value=False,
                    callback=lambda _ctx, _param, value: use_tls_ca(value),
                )(f)
            else:
                kw: dict[str, Any] = {"type": int} if kind == INT else {}
                f = click.option(flag, metavar=metavar, multiple=kind == LIST, help=text, **kw)(f)
        return f

    return add


def _done(cmd: str, run: Callable[[], int]) -> None:
    code = report(cmd, run)
    if code:
        sys.exit(code)


@click.group("job", cls=JobGroup, epilog=EPILOG)
def job() -> None:
    """Submit and manage batch jobs."""


@job.command(
    "submit",
    cls=SubmitCommand,
    epilog=EPILOG,
    context_settings={"allow_interspersed_args": False},
)
@_options(SUBMIT_FLAGS)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def submit(ctx: click.Context, /, **params: Any) -> None:
    """Submit a command, script, manifest or //pkg:target.

    The command runs as given after `--`. A //pkg:target is built first; flags may
    also follow it, and a command after `--` then replaces the target's arguments.
    """
    target = None
    command = params["command"]
    if command and command[0].startswith("//") and not params["script"]:
        target = command[0]
        params = _flags_after_target(ctx, params, list(command[1:]))
    _done("submit", lambda: submit_job(params, target))


def _flags_after_target(
    ctx: click.Context, params: Mapping[str, Any], rest: list[str]
) -> dict[str, Any]:
    """`submit //pkg:target --nodes 2 [-- CMD...]`: the flags after the target, parsed too."""
    cut = rest.index("--") if "--" in rest else len(rest)
    merged = dict(params)
    if not cut:
        merged["command"] = tuple(rest[1:])
        return merged
    again = ctx.command.make_context(ctx.info_name, rest[:cut], parent=ctx.parent)
    for param in ctx.command.params:
        name = param.name
        if not name or again.get_parameter_source(name) is not ParameterSource.COMMANDLINE:
            continue
        value = again.params[name]
        repeated = isinstance(param, click.Option) and param.multiple
        merged[name] = (*params[name], *value) if repeated else value
    merged["command"] = (*again.params["command"], *rest[cut + 1 :])
    return merged


@job.command("resubmit", epilog=EPILOG)
@_options(RESUBMIT_FLAGS)
@click.argument("job_id", metavar="ID")
def resubmit(**params: Any) -> None:
    """Run a job's manifest and input root again, byte for byte; flags override it."""
    _done("resubmit", lambda: resubmit_job(params))


@job.command("show")
@_options(COMMON_FLAGS)
@click.argument("ids", nargs=-1, required=True, metavar="ID...")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per job.")
def show(server: str | None, token_file: str | None, ids: tuple[str, ...], as_json: bool) -> None:
    """A job's state, reason, priority, resources and history."""

    def run() -> int:
        with client_for(server, token_file) as client:
            infos = [client.show(j) for j in ids]
            if as_json:
                for info in infos:
                    print(json.dumps(info.raw, sort_keys=True))
                return 0
            latest = [_latest_sample(client, j) for j in ids]
        from rbs.cli.job_telemetry import latest_line
        from rbs.cli.job_views import print_show

        for info, sample in zip(infos, latest, strict=True):
            print_show(info)
            if sample is not None:
                print(f"Telemetry  {latest_line(sample)}")
        return 0

    _done("show", run)


def _latest_sample(client: Any, job_id: str) -> dict[str, Any] | None:
    """The job's newest telemetry sample; None when it has none (or the server predates
    telemetry)."""
    from rbs.client.errors import JobError

    try:
        samples = client.telemetry(job_id, last=True)
    except JobError:
        return None
    return samples[-1] if samples else None


@job.command("list")
@_options(COMMON_FLAGS)
@click.option("--state", metavar="STATES", help="Comma-separated states, e.g. PENDING,RUNNING.")
@click.option("--queue", metavar="QUEUE", help="Only jobs in this queue.")
@click.option("--user", metavar="USER", help="Only jobs this user submitted.")
@click.option("--name", metavar="NAME", help="Only jobs of this name (a glob with * and ?).")
@click.option("--parent", metavar="ID", help="Only jobs that job ID's runs submitted.")
@click.option("--history", is_flag=True, help="Include finished jobs.")
@click.option(
    "--sort",
    type=click.Choice(["id", "submit", "state", "priority"]),
    default="id",
    show_default=True,
    help="Order of the rows (priority: highest first).",
)
@click.option("--order", type=click.Choice(["asc", "desc"]), help="Ascending or descending.")
@click.option(
    "--limit",
    type=click.IntRange(1, 1000),
    metavar="N",
    help=f"Show at most N rows (default {LIST_ROWS}).",
)
@click.option("--all", "show_all", is_flag=True, help="Show every matching job, page by page.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def list_jobs(
    server: str | None,
    token_file: str | None,
    state: str | None,
    queue: str | None,
    user: str | None,
    name: str | None,
    parent: str | None,
    history: bool,
    sort: str,
    order: str | None,
    limit: int | None,
    show_all: bool,
    as_json: bool,
) -> None:
    """Active jobs (--history: finished ones too), at most 100 rows unless --all."""
    if show_all and limit is not None:
        raise click.UsageError("--all and --limit: give one of them")

    def run() -> int:
        from rbs.cli.job_table import footer, print_lines, table_lines

        states = [s.strip().upper() for s in (state or "").split(",") if s.strip()]
        shown = 0
        total = 0
        cursor = None
        with client_for(server, token_file) as client:
            for _ in range(1 << 30):  # bounded by the jobs: each page moves the cursor on
                page, total, cursor = client.list_page(
                    states=states,
                    queue=queue,
                    history=history,
                    user=user,
                    name=name,
                    parent=parent,
                    sort=sort,
                    order=order,
                    limit=1000 if show_all else (limit or LIST_ROWS),
                    cursor=cursor,
                )
                shown += len(page)
                if as_json:
                    print_lines(json.dumps(info.raw, sort_keys=True) for info in page)
                elif page:
                    print_lines(table_lines(page))
                if not show_all or cursor is None:
                    break
        note = footer(shown, total)
        if as_json:
            if note:
                print(note, file=sys.stderr)
        elif not shown:
            print("no jobs")
        elif note:
            print(note)
        return 0

    _done("list", run)


@job.command("attach")
@_options(COMMON_FLAGS)
@click.argument("job_id", metavar="ID")
def attach(server: str | None, token_file: str | None, job_id: str) -> None:
    """Reattach to a job submitted with -i: its output from now on, your stdin to it."""

    def run() -> int:
        from rbs.cli.job_attach import attach as attach_job

        with client_for(server, token_file) as client:
            return attach_job(client, job_id, after="now")

    _done("attach", run)


@job.command("logs")
@_options(COMMON_FLAGS)
@click.argument("job_id", metavar="ID")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the job ends.")
@click.option("--tail", type=int, metavar="N", help="Only the last N lines.")
@click.option(
    "--json", "as_json", is_flag=True, help="One object per line: seq, time, stream, text."
)
@click.option(
    "--label",
    is_flag=True,
    help="Prefix each line with its array task or gang rank ([3], [r1]); arrays and gangs "
    "always are.",
)
def logs(
    server: str | None,
    token_file: str | None,
    job_id: str,
    follow: bool,
    tail: int | None,
    as_json: bool,
    label: bool,
) -> None:
    """A job's numbered log lines (-f follows live)."""

    def run() -> int:
        from rbs.cli.job_follow import INTERRUPTED, print_line
        from rbs.wire.jobs_api import log_line_json

        with client_for(server, token_file) as client:
            raw = client.show(job_id).raw
            gang = int(raw.get("manifest", {}).get("nodes", 1)) > 1
            # One array task (ID_INDEX) needs no label; a whole array or a gang always has them.
            labelled = label or gang or (raw.get("array") is not None and "_" not in job_id)
            try:
                for line in client.logs(job_id, follow=follow, tail=tail):
                    if as_json:
                        print(log_line_json(line), flush=follow)
                    else:
                        print_line(line, label=labelled, gang=gang, flush=follow)
            except KeyboardInterrupt:
                if not follow:
                    raise
                print(f"\nrbs: stopped following job {job_id}; it goes on running", file=sys.stderr)
                return INTERRUPTED
        return 0

    _done("logs", run)


@job.command("wait")
@_options(COMMON_FLAGS)
@click.argument("ids", nargs=-1, required=True, metavar="ID...")
@click.option("--timeout", type=float, metavar="SECONDS", help="Seconds to wait at most.")
def wait(
    server: str | None, token_file: str | None, ids: tuple[str, ...], timeout: float | None
) -> None:
    """Wait for jobs to end; non-zero exit if any did not complete."""

    def run() -> int:
        bad: list[JobInfo] = []
        with client_for(server, token_file) as client:
            for job_id in ids:
                info = client.wait(job_id, timeout=timeout)
                print(f"{info.job_id}\t{info.state}")
                if not info.ok:
                    bad.append(info)
        return 1 if bad else 0

    _done("wait", run)


@job.command("cancel")
@_options(COMMON_FLAGS)
@click.argument("ids", nargs=-1, required=True, metavar="ID...")
def cancel(server: str | None, token_file: str | None, ids: tuple[str, ...]) -> None:
    """Cancel jobs or array tasks (ID or ID_INDEX)."""

    def run() -> int:
        from rbs.cli.job_follow import state_text

        with client_for(server, token_file) as client:
            ended: list[tuple[str, JobInfo]] = []
            live: list[tuple[str, JobInfo]] = []
            for target in ids:
                info = client.show(target.partition("_")[0])
                (ended if info.done else live).append((target, info))
            for target, info in ended:
                print(
                    f"rbs job cancel: job {target} had already ended "
                    f"({state_text(info.state, info.reason)}); nothing to cancel",
                    file=sys.stderr,
                )
            if live:
                for job_id in client.cancel([t for t, _ in live]):
                    print(f"cancelled {job_id}")
        return 1 if ended else 0

    _done("cancel", run)


job.add_command(update_command)  # rbs/cli/job_update.py
job.add_command(reserve)  # rbs/cli/job_reserve.py
job.add_command(reservations)
job.add_command(telemetry_command)  # rbs/cli/job_telemetry.py


@job.command("outputs")
@_options(COMMON_FLAGS)
@click.argument("job_id", metavar="ID")
@click.option("--dest", metavar="DIR", help="Folder to write (default: ./job-ID-outputs/).")
def outputs(server: str | None, token_file: str | None, job_id: str, dest: str | None) -> None:
    """Download a job's recorded outputs."""

    def run() -> int:
        from rbs.cli.progress import transfer_bar

        with client_for(server, token_file) as client, transfer_bar("fetching outputs"):
            where = client.outputs(job_id, dest)
        print(where)
        return 0

    _done("outputs", run)


@job.command("queues")
@_options(COMMON_FLAGS)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for programs.")
def queues(server: str | None, token_file: str | None, as_json: bool) -> None:
    """Queues: priority weights, time limits, occupancy."""

    def run() -> int:
        with client_for(server, token_file) as client:
            found = client.queues()
        if as_json:
            print(json.dumps(found, sort_keys=True))
            return 0
        from rbs.cli.job_views import print_queues

        print_queues(found)
        return 0

    _done("queues", run)
