"""`rbs build`, `run`, `test`, `query`, `clean`: the command-line face of rbs.build."""

from __future__ import annotations

import functools
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click

from rbs.build.errors import BuildError


def _interruptible(f: Callable[..., Any]) -> Callable[..., Any]:
    """Ctrl-C ends a command with exit code 130 and one line, not a traceback."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return f(*args, **kwargs)
        except KeyboardInterrupt:
            click.echo("rbs: interrupted; running actions were stopped", err=True)
            sys.exit(130)

    return wrapper


def _fail(e: BuildError) -> NoReturn:
    click.echo(e.render(), err=True)
    sys.exit(1)


def _workspace() -> tuple[Path, str]:
    from rbs.build.workspace import find_root

    root = find_root(Path.cwd())
    rel = Path.cwd().resolve().relative_to(root).as_posix()
    return root, "" if rel == "." else rel


def build_options(
    jobs: int | None,
    keep_going: bool,
    plain: bool,
    test_timeout: int = 0,
    output_groups: tuple[str, ...] = (),
) -> Any:
    """The one place where command-line options become BuildOptions (and pick a backend).

    A remote runner (`--remote host:port`) plugs in here as `backend=`.
    """
    from rbs.build.driver import BuildOptions
    from rbs.build.progress import make_progress

    if jobs is not None and jobs < 1:
        raise click.BadParameter(f"-j must be at least 1, got {jobs}", param_hint="-j/--jobs")
    from rbs.cli.remote_build import remote_backend_from_context

    backend = remote_backend_from_context()
    from rbs.cli.build_config import resolve_settings

    ctx = click.get_current_context(silent=True)
    settings = resolve_settings((ctx.info_name if ctx else None) or "build")
    for warning in settings.warnings:
        click.echo(f"rbs: {warning}", err=True)
    jobs = jobs if jobs is not None else settings.jobs
    keep_going = keep_going or bool(settings.keep_going)
    if backend is not None and jobs is None:
        jobs = 16  # remote actions wait on the cluster, not on local cores
    return BuildOptions(
        jobs=jobs or os.cpu_count() or 1,
        keep_going=keep_going,
        listener=make_progress(plain),
        backend=backend,
        output_groups=_output_groups(output_groups),
        config=settings.config,
    )


def _output_groups(values: tuple[str, ...]) -> tuple[str, ...]:
    from rbs.build.output_groups import parse_output_groups

    try:
        return parse_output_groups(values)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--output_groups") from None


def _settings_args(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Patterns without the `--//pkg:flag=value` build settings among them."""
    from rbs.cli.build_config import split_settings

    return split_settings(ctx, value)


def _common(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option(
        "-j", "--jobs", type=int, default=None, help="Actions to run at once (default: cores)."
    )(f)
    f = click.option(
        "-k",
        "--keep-going",
        "--keep_going",
        "keep_going",
        is_flag=True,
        help="Build as much as possible after a failure.",
    )(f)
    f = click.option("--plain", is_flag=True, help="Plain progress lines even on a terminal.")(f)
    from rbs.cli.build_config import config_options
    from rbs.cli.remote_build import remote_options

    return config_options(remote_options(f))


def _summary(result: Any, started: float) -> None:
    rep = result.report
    took = time.monotonic() - started
    if result.up_to_date:
        click.echo(f"rbs: up to date ({took:.2f}s)", err=True)
        return
    click.echo(
        f"rbs: {rep.total} actions: {rep.executed} run, {rep.cache_hits} cache hits, "
        f"{rep.memo_hits} unchanged ({took:.2f}s)",
        err=True,
    )


@click.command("build", context_settings={"ignore_unknown_options": True})
@click.argument("patterns", nargs=-1, required=True, callback=_settings_args)
@_common
@click.option(
    "--output_groups",
    "--output-groups",
    "output_groups",
    multiple=True,
    help="Build these output groups (a,b) or change the default set (+a,-default).",
)
@_interruptible
def build(
    patterns: tuple[str, ...],
    jobs: int | None,
    keep_going: bool,
    plain: bool,
    output_groups: tuple[str, ...] = (),
) -> None:
    """Build targets: //pkg:name, //pkg:all, //pkg/..., //... ."""
    from rbs.build.driver import run_build
    from rbs.build.engine import out_path

    started, wall = time.monotonic(), time.time()
    try:
        root, cwd_pkg = _workspace()
        result = run_build(
            root,
            patterns,
            options=build_options(jobs, keep_going, plain, output_groups=output_groups),
            cwd_package=cwd_pkg,
        )
    except BuildError as e:
        _fail(e)
    _summary(result, started)
    from rbs.cli.build_bes import record_invocation

    record_invocation("build", patterns, result, wall, 0 if result.ok else 1)
    for err in result.load_errors:
        click.echo(err.render(), err=True)
    if not result.ok:
        failed = [f"{len(result.report.failures)} action(s) failed"] * bool(
            result.report.failures or not result.load_errors
        )
        if result.load_errors:
            failed.append(
                f"{len(result.load_errors)} package(s) or target(s) failed to load or analyse"
            )
        click.echo(f"rbs: build failed: {'; '.join(failed)}", err=True)
        sys.exit(1)
    if result.graph is not None and len(result.labels) <= 20:
        for label in result.labels:
            info = result.graph.targets[label]
            click.echo(f"Target {label} up-to-date:", err=True)
            shown = info.files
            if output_groups:
                from rbs.build.output_groups import group_files

                shown = tuple(group_files(info, _output_groups(output_groups)))
            for f in shown:
                click.echo(f"  {f.path if f.is_source else out_path(f.path)}", err=True)
            if label in result.manifests:
                click.echo(f"  {result.manifests[label]}", err=True)


@click.command("test", context_settings={"ignore_unknown_options": True})
@click.argument("patterns", nargs=-1, required=True, callback=_settings_args)
@_common
@click.option(
    "--test-timeout",
    "--test_timeout",
    "test_timeout",
    type=int,
    default=0,
    help="Seconds each test may run (default: by its size: small 60, medium 300, large 900).",
)
@_interruptible
def test(
    patterns: tuple[str, ...], jobs: int | None, keep_going: bool, plain: bool, test_timeout: int
) -> None:
    """Build and run the tests among targets; exit 3 when a test fails."""
    from rbs.build.driver import run_build
    from rbs.build.runner import TIMEOUT_EXIT

    started, wall = time.monotonic(), time.time()
    try:
        root, cwd_pkg = _workspace()
        result = run_build(
            root,
            patterns,
            options=build_options(jobs, True, plain),
            cwd_package=cwd_pkg,
            mode="test",
        )
    except BuildError as e:
        _fail(e)
    assert result.graph is not None
    graph = result.graph
    passed = failed = 0
    for idx, (code, cached, log) in sorted(
        result.report.tests.items(), key=lambda kv: str(graph.actions[kv[0]].owner)
    ):
        owner = graph.actions[idx].owner
        if code == 0:
            passed += 1
            click.echo(f"{owner}  {'(cached) ' if cached else ''}PASSED")
        else:
            failed += 1
            status = "TIMEOUT" if code == TIMEOUT_EXIT else f"FAILED (exit code {code})"
            click.echo(f"{owner}  {status}")
            text = log.decode(errors="replace").rstrip()
            if text:
                click.echo("\n".join("    " + line for line in text.splitlines()[-40:]))
    not_run = [
        a.owner
        for i, a in enumerate(graph.actions)
        if a.is_test and a.owner in result.labels and i not in result.report.tests
    ]
    for owner in not_run:
        click.echo(f"{owner}  NO STATUS (its build failed)")
    _summary(result, started)
    click.echo(f"rbs: {passed} passed, {failed} failed, {len(not_run)} not run")
    if not result.labels:
        click.echo("rbs: no test targets matched", err=True)
    for err in result.load_errors:
        click.echo(err.render(), err=True)
    bad = failed or not_run or result.load_errors or (not result.ok and not result.report.tests)
    code = (3 if failed else 1) if bad else 0
    from rbs.cli.build_bes import record_invocation

    record_invocation("test", patterns, result, wall, code)
    if code:
        sys.exit(code)


@click.command("run", context_settings={"ignore_unknown_options": True})
@click.argument("target")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@_common
@_interruptible
def run(
    target: str, args: tuple[str, ...], jobs: int | None, keep_going: bool, plain: bool
) -> None:
    """Build an executable target and run it: rbs run //pkg:bin -- ARGS."""
    from rbs.build.driver import run_build
    from rbs.build.engine import out_path

    try:
        root, cwd_pkg = _workspace()
        result = run_build(
            root,
            [target],
            options=build_options(jobs, keep_going, plain),
            cwd_package=cwd_pkg,
            mode="run",
        )
        if not result.ok:
            click.echo("rbs: build failed; not running", err=True)
            sys.exit(1)
        assert result.graph is not None
        if len(result.labels) != 1:
            raise BuildError(
                f"{target} names {len(result.labels)} targets",
                hint="rbs run takes exactly one target",
            )
        info = result.graph.targets[result.labels[0]]
        if info.executable is None:
            raise BuildError(
                f"{info.label} ({info.kind}) is not executable",
                hint="rbs run works on sh_binary, py_binary, tests and other executable rules",
            )
    except BuildError as e:
        _fail(e)
    exe = root / out_path(info.executable.path)
    rf = Path(f"{exe}.runfiles")
    env = dict(
        os.environ,
        RUNFILES_DIR=str(rf),
        BUILD_WORKSPACE_DIRECTORY=str(root),
        BUILD_WORKING_DIRECTORY=os.getcwd(),
    )
    env.update(info.env)
    sys.stdout.flush()
    sys.stderr.flush()
    os.chdir(rf / result.graph.workspace_name)
    # As with Bazel, the target's `args` come first, then those after `--`.
    os.execve(exe, [str(exe), *info.args, *args], env)


@click.command("query")
@click.argument("expression")
@click.option(
    "--output",
    type=click.Choice(["label", "label_kind"]),
    default="label",
    help="What to print per target.",
)
def query(expression: str, output: str) -> None:
    """List targets: rbs query //..., rbs query 'deps(//pkg:x)'."""
    from rbs.build.loader import Loader
    from rbs.build.query import run_query
    from rbs.build.workspace import Workspace

    try:
        root, cwd_pkg = _workspace()
        rows = run_query(Loader(Workspace(root=root)), expression, cwd_package=cwd_pkg)
    except BuildError as e:
        _fail(e)
    for label, kind in rows:
        click.echo(f"{kind} {label}" if output == "label_kind" else str(label))


@click.command("clean")
@click.option(
    "--expunge", is_flag=True, help="Also delete the local store and action cache (.rbs/)."
)
def clean(expunge: bool) -> None:
    """Delete rbs-out/ and the build state (and with --expunge, all of .rbs/)."""
    try:
        root, _ = _workspace()
    except BuildError as e:
        _fail(e)
    targets = [root / "rbs-out", root / ".rbs" / "state", root / ".rbs" / "sandbox"]
    if expunge:
        targets.append(root / ".rbs")
    for p in targets:
        shutil.rmtree(p, ignore_errors=True)
    click.echo(
        f"rbs: cleaned {'rbs-out/ and .rbs/' if expunge else 'rbs-out/ and the build state'}",
        err=True,
    )
