"""The REAPI messages a worker reads (Action, Command, Directory) and writes (Tree)."""

from __future__ import annotations

import pytest
from google.protobuf import duration_pb2

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs.model import Digest, DigestFunction
from rbs.wire.actions import (
    ActionInfo,
    CommandInfo,
    MessageDecodeError,
    action_from_blob,
    command_from_blob,
    directory_children,
    tree_blob,
)

SHA = DigestFunction.SHA256
A = Digest(function=SHA, hash="a" * 64, size=1)
B = Digest(function=SHA, hash="b" * 64, size=2)


def _pb(d: Digest) -> re_pb2.Digest:
    return re_pb2.Digest(hash=d.hash, size_bytes=d.size)


def test_an_action_reads_with_its_own_function_and_timeout() -> None:
    blob = re_pb2.Action(
        command_digest=_pb(A),
        input_root_digest=_pb(B),
        timeout=duration_pb2.Duration(seconds=3, nanos=250_000_000),
        do_not_cache=True,
    ).SerializeToString()
    assert action_from_blob(blob, SHA) == ActionInfo(
        command_digest=A, input_root_digest=B, timeout_s=3.25
    )


def test_a_command_reads_every_field_the_worker_uses() -> None:
    blob = re_pb2.Command(
        arguments=["/bin/sh", "-c", "true"],
        environment_variables=[
            re_pb2.Command.EnvironmentVariable(name="A", value="1"),
            re_pb2.Command.EnvironmentVariable(name="B", value="2"),
        ],
        output_paths=["out"],
        output_files=["f"],
        output_directories=["d"],
        working_directory="pkg",
    ).SerializeToString()
    assert command_from_blob(blob) == CommandInfo(
        arguments=("/bin/sh", "-c", "true"),
        environment=(("A", "1"), ("B", "2")),
        working_directory="pkg",
        output_paths=("out",),
        output_files=("f",),
        output_directories=("d",),
    )


def test_a_blob_that_is_not_the_message_is_a_decode_error() -> None:
    with pytest.raises(MessageDecodeError):
        command_from_blob(b"\xff\xff\xff")
    with pytest.raises(ValueError):  # a malformed digest inside: InvalidDigest
        action_from_blob(
            re_pb2.Action(command_digest=re_pb2.Digest(hash="x")).SerializeToString(), SHA
        )


def test_directory_children_and_tree_blob() -> None:
    sub = re_pb2.Directory(files=[re_pb2.FileNode(name="x", digest=_pb(B))])
    root = re_pb2.Directory(
        files=[re_pb2.FileNode(name="f", digest=_pb(A), is_executable=True)],
        directories=[re_pb2.DirectoryNode(name="d", digest=_pb(B))],
    )
    assert directory_children(root.SerializeToString(), SHA) == ([A], [B])
    tree = re_pb2.Tree.FromString(tree_blob([root, sub]))
    assert tree.root == root and list(tree.children) == [sub]
    assert tree_blob([root, sub]) == re_pb2.Tree(root=root, children=[sub]).SerializeToString(
        deterministic=True
    )
