"""The click root group: lazily imports each registered command on first use."""

from __future__ import annotations

import importlib

import click

from rbs import __version__
from rbs.cli.main import COMMANDS, FAST_COMMANDS


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *FAST_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in FAST_COMMANDS:
            return _forwarder(cmd_name)
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module, attr, _ = entry
        cmd = getattr(importlib.import_module(module), attr)
        assert isinstance(cmd, click.Command)
        return cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        table = {**COMMANDS, **FAST_COMMANDS}
        rows = [(name, table[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _forwarder(name: str) -> click.Command:
    """A click stand-in for a fast command, so `rbs --help` lists it."""
    module, attr, short = FAST_COMMANDS[name]

    @click.command(
        name=name,
        help=short,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        add_help_option=False,
    )
    @click.pass_context
    def forward(ctx: click.Context) -> None:
        ctx.exit(getattr(importlib.import_module(module), attr)(list(ctx.args)))

    return forward


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rbs")
def cli() -> None:
    """rbs: Starlark builds, a remote cache and executor, and batch jobs on one cluster."""
