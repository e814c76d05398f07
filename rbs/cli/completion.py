"""`rbs completion bash|zsh|fish`: print the shell completion script (click's own)."""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

SHELLS = ("bash", "zsh", "fish")


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> None:
    """Print the completion script for SHELL; see the README to install it.

    \b
    bash:  eval "$(rbs completion bash)"       (in ~/.bashrc)
    zsh:   eval "$(rbs completion zsh)"        (in ~/.zshrc, after compinit)
    fish:  rbs completion fish > ~/.config/fish/completions/rbs.fish
    """
    root = ctx.find_root()
    prog = root.info_name or "rbs"
    # click's documented default for the program's name (rbs.cli.main names it `rbs`),
    # which is the variable the root command reads: `_RBS_COMPLETE`.
    complete_var = f"_{prog}_COMPLETE".replace("-", "_").replace(".", "_").upper()
    comp_cls = get_completion_class(shell)
    assert comp_cls is not None  # every name in SHELLS is one of click's shells
    script = comp_cls(root.command, {}, prog, complete_var).source()
    click.echo(script, nl=False)
