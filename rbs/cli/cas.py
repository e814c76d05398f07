"""`rbs cas`: operate a local content-addressed store (put, get, stat, gc, verify)."""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from rbs.units import SpecError, human_duration, human_size, parse_duration, parse_size

if TYPE_CHECKING:
    from rbs.cas.disk import DiskStore
    from rbs.model import Digest, DigestFunction

F = TypeVar("F", bound=Callable[..., Any])


def rbs_home() -> Path:
    """rbs's state folder: $RBS_HOME, else ~/.rbs."""
    return Path(os.environ.get("RBS_HOME") or Path.home() / ".rbs")


def _unit(parse: Callable[..., int], text: str, flag: str, **kw: Any) -> int:
    """`parse(text, flag)` from rbs.units, a bad value reported as click's error for `flag`."""
    try:
        return parse(text, flag, **kw)
    except SpecError as e:
        what = f"{text!r} is" if e.problem.startswith("not ") else f"{text!r}:"
        raise click.BadParameter(
            f"{what} {e.problem}; accepted forms: {e.accepted}", param_hint=flag
        ) from None


@dataclass(frozen=True, slots=True, kw_only=True)
class _Options:
    store_dir: Path
    function_name: str

    def store(self, **kw: Any) -> DiskStore:
        from rbs.cas.disk import DiskStore

        return DiskStore(self.store_dir, **kw)

    @property
    def function(self) -> DigestFunction:
        from rbs.model import DigestFunction

        return DigestFunction.parse(self.function_name)


def _errors(fn: F) -> F:
    """Report store errors as one clear line and exit status 1, not a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from rbs.cas.errors import CasError

        try:
            return fn(*args, **kwargs)
        except CasError as e:
            raise click.ClickException(str(e)) from None
        except (FileExistsError, NotADirectoryError, PermissionError) as e:
            raise click.ClickException(str(e)) from None

    return wrapper  # type: ignore[return-value]


def _parse_digest(text: str, function: DigestFunction) -> Digest:
    from rbs.model import Digest

    try:
        return Digest.parse(text, default=function)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="DIGEST") from None


@click.group()
@click.option(
    "--store",
    "store_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Store folder [default: $RBS_HOME/cas; RBS_HOME defaults to ~/.rbs].",
)
@click.option(
    "--digest-function",
    type=click.Choice(["blake3", "sha256"], case_sensitive=False),
    default="blake3",
    show_default=True,
    help="Hash function for new digests and for digests written without one.",
)
@click.pass_context
def cas(ctx: click.Context, store_dir: Path | None, digest_function: str) -> None:
    """Operate the local content-addressed store."""
    ctx.obj = _Options(
        store_dir=store_dir or rbs_home() / "cas", function_name=digest_function.lower()
    )


@cas.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--bundle",
    is_flag=True,
    help="For a folder, store only what a job bundle holds: in a git work tree the "
    "tracked and unignored files, elsewhere all but .git and .rbs.",
)
@click.pass_obj
@_errors
def put(opts: _Options, paths: tuple[Path, ...], bundle: bool) -> None:
    """Store files or folders and print their digests.

    A file gives the digest of its bytes; a folder gives the digest of its root
    Directory (a Merkle tree), which `rbs cas get` restores whole. With several
    paths each line reads DIGEST<TAB>PATH. A big one shows a progress bar on a terminal.
    """
    from rbs.cas import transfer
    from rbs.cli.progress import transfer_bar

    store = opts.store()
    for path in paths:
        with transfer_bar(f"storing {path.name or path}"):
            if path.is_dir():
                from rbs.cas.inputs import select_inputs
                from rbs.cas.tree import tree_from_path

                select = select_inputs(path) if bundle else None
                digest = tree_from_path(store, path, function=opts.function, select=select)
            else:
                transfer.expect(path.stat().st_size)
                digest = store.put_file(path, function=opts.function)
        click.echo(f"{digest}\t{path}" if len(paths) > 1 else str(digest))


@cas.command()
@click.argument("digest_text", metavar="DIGEST")
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    default=None,
    help="Where to write: a file for a blob, a new or empty folder for a tree "
    "[default for a blob: standard output].",
)
@click.option(
    "--tree/--blob",
    "as_tree",
    default=None,
    help="Read DIGEST as a tree or as a plain blob [default: a tree if the blob is a "
    "well-formed Directory message].",
)
@click.option(
    "--link",
    is_flag=True,
    help="Hardlink files from the store instead of copying them (fast; the files are "
    "read-only and must not be modified).",
)
@click.pass_obj
@_errors
def get(
    opts: _Options, digest_text: str, output: Path | None, as_tree: bool | None, link: bool
) -> None:
    """Write a blob, or restore a whole tree, from the store (a big one shows a
    progress bar on a terminal)."""
    from rbs.cli.progress import transfer_bar

    with transfer_bar("writing" if output is None else f"writing {output.name or output}"):
        _get(opts, digest_text, output, as_tree, link)


def _get(
    opts: _Options, digest_text: str, output: Path | None, as_tree: bool | None, link: bool
) -> None:
    from rbs.cas import transfer
    from rbs.cas.errors import BlobNotFound

    store = opts.store()
    digest = _parse_digest(digest_text, opts.function)
    if not store.contains(digest):
        raise BlobNotFound(digest)
    if as_tree is None:
        as_tree = _looks_like_tree(store, digest)
    if as_tree:
        from rbs.cas.tree import materialize

        if output is None:
            raise click.UsageError(f"{digest} is a tree: give a folder to restore it in with -o")
        materialize(store, digest, output, link=link)
    elif output is None:
        transfer.expect(digest.size)
        with store.open(digest) as f:
            while chunk := f.read(1 << 20):
                sys.stdout.buffer.write(chunk)
                transfer.advance(len(chunk))
        sys.stdout.buffer.flush()
    else:
        if output.is_dir():
            raise click.UsageError(f"{output} is a folder; give the file path to write the blob to")
        transfer.expect(digest.size)
        store.export_file(digest, output, executable=False, link=link)


def _looks_like_tree(store: DiskStore, digest: Digest) -> bool:
    """Whether a blob is a Directory message. Arbitrary bytes almost never pass: the
    message must re-serialize to the same bytes, with valid names and digests."""
    if digest.size == 0 or digest.size > 64 << 20:
        return False
    from rbs.cas.digests import digest_from_pb
    from rbs.cas.errors import CasError, CorruptBlob
    from rbs.cas.tree import check_name, read_directory

    try:
        msg = read_directory(store, digest)
        if msg.SerializeToString(deterministic=True) != store.get(digest):
            return False
        nodes = [*msg.files, *msg.directories]
        for n in (*nodes, *msg.symlinks):
            check_name(n.name)
        for node in nodes:
            digest_from_pb(node.digest, digest.function)
        return bool(nodes or msg.symlinks)
    except CorruptBlob:
        raise  # removed: say so, not "not in the store"
    except (CasError, ValueError):
        return False


@cas.command()
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@click.pass_obj
@_errors
def stat(opts: _Options, as_json: bool) -> None:
    """Show what the store holds: blobs, bytes, leases, temp files."""
    s = opts.store().stat()
    if as_json:
        doc = {
            "root": str(s.root),
            "blobs": s.blobs,
            "bytes": s.total_bytes,
            "by_function": {
                f.function.value: {"blobs": f.blobs, "bytes": f.bytes} for f in s.by_function
            },
            "leased_blobs": s.leased_blobs,
            "leased_bytes": s.leased_bytes,
            "temp_files": s.temp_files,
            "oldest_use": s.oldest_use,
            "newest_use": s.newest_use,
            "lease_seconds": s.lease,
        }
        click.echo(json.dumps(doc, indent=2))
        return
    now = time.time()
    click.echo(f"store       {s.root}")
    click.echo(f"blobs       {s.blobs} ({human_size(s.total_bytes)} on disk)")
    for f in s.by_function:
        click.echo(f"  {f.function.value:<9} {f.blobs} ({human_size(f.bytes)})")
    click.echo(
        f"in lease    {s.leased_blobs} ({human_size(s.leased_bytes)}) used within "
        f"{human_duration(s.lease)}"
    )
    if s.oldest_use is not None and s.newest_use is not None:
        click.echo(
            f"last used   {human_duration(now - s.newest_use)} ago (newest), "
            f"{human_duration(now - s.oldest_use)} ago (oldest)"
        )
    click.echo(f"temp files  {s.temp_files}")


@cas.command()
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
@click.pass_obj
@_errors
def verify(opts: _Options, as_json: bool) -> None:
    """Re-hash every blob and remove the corrupt ones (exit status 1 if any).

    Reads already check a blob before serving it, but trust one this process hashed
    before while its inode, mtime and size are unchanged; this finds what that misses.
    A server's store is <data-dir>/cas (the embedded cluster's: $RBS_HOME/local/server/cas).
    """
    from rbs.cas.scrub import scrub

    r = scrub(opts.store())
    if as_json:
        doc = {
            "checked": r.checked,
            "ok": r.ok,
            "removed": r.removed,
            "corrupt": [str(d) for d in r.corrupt],
        }
        click.echo(json.dumps(doc, indent=2))
    else:
        click.echo(f"checked {r.checked} blobs: {r.ok} ok, {r.removed} removed")
        for d in r.corrupt:
            click.echo(f"removed corrupt {d}", err=True)
    if r.removed:
        sys.exit(1)


@cas.command()
@click.option(
    "--max-size",
    required=True,
    help="Evict least recently used blobs until the store holds at most this much, "
    "e.g. 500Mi or 10Gi (Gi = 2^30 bytes, G = 10^9; README: Sizes and durations).",
)
@click.option(
    "--lease",
    default="3h",
    show_default=True,
    help="Never evict a blob used within this long, e.g. 90m, 3h, 1d or 0 (README: Sizes and "
    "durations).",
)
@click.pass_obj
@_errors
def gc(opts: _Options, max_size: str, lease: str) -> None:
    """Evict blobs to bring the store under a size, keeping blobs in their lease."""
    bound = _unit(parse_size, max_size, "--max-size")
    store = opts.store(lease=_unit(parse_duration, lease, "--lease", minimum=0))
    r = store.gc(bound)
    click.echo(
        f"removed {r.removed_blobs} blobs ({human_size(r.removed_bytes)}); "
        f"{human_size(r.before_bytes)} -> {human_size(r.after_bytes)} "
        f"(bound {human_size(bound)})"
    )
    if r.temp_removed:
        click.echo(f"removed {r.temp_removed} stale temp files")
    if r.over_target:
        click.echo(
            f"warning: {human_size(r.leased_bytes)} is in its lease and cannot be evicted yet; "
            "the store stays over the bound (use a shorter --lease to evict more)",
            err=True,
        )
