"""Build REAPI actions (Command, input tree, Action) into any blob store for tests."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs.cas.store import BlobStore
from rbs.cas.tree import TreeEntry, build_tree
from rbs.model import Digest, DigestFunction

MakeAction = Callable[..., Digest]


def make_action(
    store: BlobStore,
    argv: list[str],
    *,
    inputs: Mapping[str, bytes] | None = None,
    outputs: list[str] | None = None,
    output_files: list[str] | None = None,
    output_directories: list[str] | None = None,
    env: Mapping[str, str] | None = None,
    working_directory: str = "",
    timeout_s: int = 0,
    do_not_cache: bool = False,
    function: DigestFunction = DigestFunction.BLAKE3,
) -> Digest:
    """Store an Action (with its Command and input tree) and return its digest."""
    entries: dict[str, TreeEntry | None] = {}
    for path, data in (inputs or {}).items():
        entries[path] = TreeEntry(digest=store.put(data, function=function), executable=True)
    root = build_tree(store, entries, function=function)
    command = re_pb2.Command(
        arguments=argv,
        environment_variables=[
            re_pb2.Command.EnvironmentVariable(name=k, value=v)
            for k, v in sorted({"PATH": "/usr/bin:/bin", **(env or {})}.items())
        ],
        output_paths=outputs or [],
        output_files=output_files or [],
        output_directories=output_directories or [],
        working_directory=working_directory,
    )
    cd = store.put_message(command, function)
    action = re_pb2.Action(
        command_digest=re_pb2.Digest(hash=cd.hash, size_bytes=cd.size),
        input_root_digest=re_pb2.Digest(hash=root.hash, size_bytes=root.size),
        do_not_cache=do_not_cache,
    )
    if timeout_s:
        action.timeout.seconds = timeout_s
    return store.put_message(action, function)
