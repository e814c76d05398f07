"""Bearer-token auth on every RPC shape (unary, server-streaming, client-streaming)."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import grpc
import pytest
from remote_harness import StartServer

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs._proto.google.bytestream import bytestream_pb2 as bs_pb2
from rbs._proto.google.bytestream import bytestream_pb2_grpc as bs_grpc
from rbs.model import Digest, DigestFunction
from rbs.wire.reapi_client import ActionCacheClient, RemoteError, RemoteStore, connect
from rbs.wire.resource_names import format_read_name, format_write_name

TOKEN = "tok-" + "x" * 40


def _calls(ch: grpc.Channel, md: tuple[tuple[str, str], ...]) -> dict[str, object]:
    d = Digest.of(b"auth", DigestFunction.SHA256)
    pd = re_pb2.Digest(hash=d.hash, size_bytes=d.size)
    cas = re_grpc.ContentAddressableStorageStub(ch)
    bs = bs_grpc.ByteStreamStub(ch)
    return {
        "unary": lambda: re_grpc.CapabilitiesStub(ch).GetCapabilities(
            re_pb2.GetCapabilitiesRequest(), metadata=md
        ),
        "server_stream": lambda: list(
            bs.Read(bs_pb2.ReadRequest(resource_name=format_read_name("", d)), metadata=md)
        ),
        "client_stream": lambda: bs.Write(
            iter(
                [
                    bs_pb2.WriteRequest(
                        resource_name=format_write_name("", str(uuid.uuid4()), d),
                        data=b"auth",
                        finish_write=True,
                    )
                ]
            ),
            metadata=md,
        ),
        "tree_stream": lambda: list(
            cas.GetTree(re_pb2.GetTreeRequest(root_digest=pd), metadata=md)
        ),
    }


@pytest.mark.parametrize(
    "md",
    [
        (),
        (("authorization", "Bearer wrong"),),
        (("authorization", TOKEN),),
        (("authorization", f"Basic {TOKEN}"),),
        (("authorization", f"Bearer {TOKEN}x"),),
    ],
    ids=["missing", "wrong", "no_scheme", "basic", "longer"],
)
def test_rejected_without_the_right_token(
    start: StartServer,
    tmp_path: Path,
    md: tuple[tuple[str, str], ...],
    caplog: pytest.LogCaptureFixture,
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(f"  {TOKEN}\n")
    srv = start(token_file=token_file)
    with caplog.at_level(logging.WARNING, logger="rbs.wire.auth"), connect(srv.target) as ch:
        for kind, call in _calls(ch, md).items():
            with pytest.raises(grpc.RpcError) as err:
                call()  # type: ignore[operator]
            assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED, kind
            assert "Bearer" in err.value.details()
            assert TOKEN not in err.value.details()
    assert "refused" in caplog.text
    assert TOKEN not in caplog.text


def test_accepted_with_the_token(start: StartServer, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    srv = start(token_file=token_file)
    md = (("authorization", f"Bearer {TOKEN}"),)
    with connect(srv.target) as ch:
        calls = _calls(ch, md)
        calls["unary"]()  # type: ignore[operator]
        calls["client_stream"]()  # type: ignore[operator]
        calls["server_stream"]()  # type: ignore[operator]
        # The client library takes the token from RBS_REMOTE_TOKEN or an argument.
        store = RemoteStore(ch, token=TOKEN)
        assert store.get(store.put(b"with token")) == b"with token"
        with pytest.raises(RemoteError, match=r"UNAUTHENTICATED.*RBS_REMOTE_TOKEN"):
            RemoteStore(ch, token="").put(b"no token")
        assert ActionCacheClient(ch, token=TOKEN).capabilities().cache_capabilities


def test_token_from_env(
    start: StartServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    srv = start(token_file=token_file)
    monkeypatch.setenv("RBS_REMOTE_TOKEN", TOKEN)
    with connect(srv.target) as ch:
        assert RemoteStore(ch).put(b"env token").size == 9


@pytest.mark.parametrize(("content", "needle"), [("", "empty"), ("two words", "whitespace")])
def test_bad_token_files_refuse_to_start(
    start: StartServer, tmp_path: Path, content: str, needle: str
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(content)
    with pytest.raises(ValueError, match=needle):
        start(token_file=token_file)
    with pytest.raises(ValueError, match="does not exist"):
        start(token_file=tmp_path / "absent")
