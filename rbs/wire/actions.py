"""The REAPI messages a worker reads and writes to run an action, <-> typed values.

A worker reads an `Action` and its `Command` from the CAS (`action_from_blob`,
`command_from_blob`), walks input trees a level at a time (`directory_children`), and
reports an `ActionResult` (`action_result_to_pb`) whose output directories are stored
as `Tree` messages (`tree_blob`). The values here carry exactly what the worker uses;
the server keeps the messages themselves (it stores and serves them as REAPI says).
A blob that is not the message it should be is a `MessageDecodeError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs.cas.digests import digest_from_pb, digest_to_pb
from rbs.model import Digest, DigestFunction


class MessageDecodeError(ValueError):
    """A blob that does not parse as the REAPI message it is read as."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionInfo:
    """What a worker needs of an Action: its command, its inputs and its own timeout."""

    command_digest: Digest
    input_root_digest: Digest
    timeout_s: float = 0.0  # 0: none given


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandInfo:
    """A Command: what to run, where, with which environment, and what it leaves behind."""

    arguments: tuple[str, ...]
    environment: tuple[tuple[str, str], ...] = ()
    working_directory: str = ""
    output_paths: tuple[str, ...] = ()  # REAPI v2.1+
    output_files: tuple[str, ...] = ()  # v2.0
    output_directories: tuple[str, ...] = ()  # v2.0


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputFileInfo:
    path: str
    digest: Digest
    is_executable: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputSymlinkInfo:
    path: str
    target: str


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputDirectoryInfo:
    """An output directory: its Tree message and the digest of its root Directory."""

    path: str
    tree_digest: Digest
    root_directory_digest: Digest


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionTimes:
    """ExecutedActionMetadata: the worker's name and when each step started and ended (epoch ns)."""

    worker: str
    worker_start_ns: int
    input_fetch_start_ns: int
    input_fetch_completed_ns: int
    execution_start_ns: int
    execution_completed_ns: int
    output_upload_start_ns: int
    output_upload_completed_ns: int
    worker_completed_ns: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionResultInfo:
    """An ActionResult as a worker makes it; every output is already in the CAS."""

    exit_code: int = 0
    stdout_digest: Digest | None = None
    stderr_digest: Digest | None = None
    output_files: tuple[OutputFileInfo, ...] = ()
    output_symlinks: tuple[OutputSymlinkInfo, ...] = ()
    output_directories: tuple[OutputDirectoryInfo, ...] = ()
    execution_metadata: ExecutionTimes | None = None


def _parse(message: Any, blob: bytes) -> Any:
    try:
        message.ParseFromString(blob)
    except DecodeError as e:
        raise MessageDecodeError(str(e)) from None
    return message


def action_from_blob(blob: bytes, function: DigestFunction) -> ActionInfo:
    """The Action stored as `blob`; its digests use the action's own function."""
    pb: re_pb2.Action = _parse(re_pb2.Action(), blob)
    return ActionInfo(
        command_digest=digest_from_pb(pb.command_digest, function),
        input_root_digest=digest_from_pb(pb.input_root_digest, function),
        timeout_s=pb.timeout.seconds + pb.timeout.nanos / 1e9,
    )


def command_from_blob(blob: bytes) -> CommandInfo:
    """The Command stored as `blob`."""
    pb: re_pb2.Command = _parse(re_pb2.Command(), blob)
    return CommandInfo(
        arguments=tuple(pb.arguments),
        environment=tuple((v.name, v.value) for v in pb.environment_variables),
        working_directory=pb.working_directory,
        output_paths=tuple(pb.output_paths),
        output_files=tuple(pb.output_files),
        output_directories=tuple(pb.output_directories),
    )


def directory_children(blob: bytes, function: DigestFunction) -> tuple[list[Digest], list[Digest]]:
    """The digests a Directory blob names: its files', then its subdirectories'."""
    pb: re_pb2.Directory = _parse(re_pb2.Directory(), blob)
    return (
        [digest_from_pb(f.digest, function) for f in pb.files],
        [digest_from_pb(d.digest, function) for d in pb.directories],
    )


def tree_blob(directories: Sequence[re_pb2.Directory]) -> bytes:
    """The Tree message of an output directory, root first, as stored in the CAS."""
    tree = re_pb2.Tree(root=directories[0], children=directories[1:])
    blob: bytes = tree.SerializeToString(deterministic=True)
    return blob


def _metadata_to_pb(m: ExecutionTimes) -> re_pb2.ExecutedActionMetadata:
    pb = re_pb2.ExecutedActionMetadata(worker=m.worker)
    pb.worker_start_timestamp.FromNanoseconds(m.worker_start_ns)
    pb.input_fetch_start_timestamp.FromNanoseconds(m.input_fetch_start_ns)
    pb.input_fetch_completed_timestamp.FromNanoseconds(m.input_fetch_completed_ns)
    pb.execution_start_timestamp.FromNanoseconds(m.execution_start_ns)
    pb.execution_completed_timestamp.FromNanoseconds(m.execution_completed_ns)
    pb.output_upload_start_timestamp.FromNanoseconds(m.output_upload_start_ns)
    pb.output_upload_completed_timestamp.FromNanoseconds(m.output_upload_completed_ns)
    pb.worker_completed_timestamp.FromNanoseconds(m.worker_completed_ns)
    return pb


def action_result_to_pb(r: ActionResultInfo) -> re_pb2.ActionResult:
    """The ActionResult message of a result, as the worker reports it in ActionFinished."""
    pb = re_pb2.ActionResult(exit_code=r.exit_code)
    if r.stdout_digest is not None:
        pb.stdout_digest.CopyFrom(digest_to_pb(r.stdout_digest))
    if r.stderr_digest is not None:
        pb.stderr_digest.CopyFrom(digest_to_pb(r.stderr_digest))
    for s in r.output_symlinks:
        pb.output_symlinks.add(path=s.path, target=s.target)
    for f in r.output_files:
        pb.output_files.add(
            path=f.path, digest=digest_to_pb(f.digest), is_executable=f.is_executable
        )
    for d in r.output_directories:
        pb.output_directories.add(
            path=d.path,
            tree_digest=digest_to_pb(d.tree_digest),
            root_directory_digest=digest_to_pb(d.root_directory_digest),
        )
    if r.execution_metadata is not None:
        pb.execution_metadata.CopyFrom(_metadata_to_pb(r.execution_metadata))
    return pb
