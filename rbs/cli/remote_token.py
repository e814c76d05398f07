"""`rbs remote token add`: a new token for the server's tokens file, printed once."""

from __future__ import annotations

from pathlib import Path

import click


@click.group()
def token() -> None:
    """Manage the tokens file of `rbs remote serve --tokens-file`."""


@token.command()
@click.option("--user", required=True, help="Whose token: recorded on every job it submits.")
@click.option(
    "--role",
    type=click.Choice(["user", "admin", "worker"]),
    default="user",
    show_default=True,
    help="user: own jobs and builds; admin: every job; worker: `rbs remote worker` only.",
)
@click.option(
    "--tokens-file",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The tokens file to add the entry to (made, mode 0600, if absent).",
)
def add(user: str, role: str, tokens_file: Path) -> None:
    """Add a token for USER to the tokens file and print it; only its sha256 is kept.

    The server loads the new entry on SIGHUP (or when it starts)."""
    from rbs.server.tokens import add_token
    from rbs.wire.auth import TokenError

    try:
        new = add_token(tokens_file, user, role)
    except (TokenError, OSError) as e:
        raise click.ClickException(str(e)) from None
    click.echo(new)
    click.echo(
        f"added {'an' if role == 'admin' else 'a'} {role} token for {user} to {tokens_file}; "
        "it is shown only now. "
        "Send the server SIGHUP to load it.",
        err=True,
    )
