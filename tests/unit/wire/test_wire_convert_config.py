"""Proto conversions, the error table, config loading and token checks (no network)."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs.cas.errors import BlobNotFound, CorruptBlob, DigestMismatch, StoreFull
from rbs.model import Digest, DigestFunction
from rbs.server.ac_store import ActionResultStore
from rbs.server.capabilities import server_capabilities
from rbs.server.config import ConfigError, config_from_dict, load_config, with_overrides
from rbs.server.instances import Instances
from rbs.wire.auth import check_header, read_token_file
from rbs.wire.errors import (
    InvalidRequest,
    MissingBlobs,
    StorageFull,
    UnknownInstance,
    code_of,
    status_of,
)
from rbs.wire.reapi import (
    action_result_digests,
    digest_from_proto,
    function_from_proto,
    request_function,
)

DF = re_pb2.DigestFunction
SHA = DigestFunction.SHA256
B3 = DigestFunction.BLAKE3
H = "ab" * 32


def test_digest_functions() -> None:
    assert function_from_proto(DF.UNKNOWN) is None
    assert function_from_proto(DF.SHA256) is SHA
    assert function_from_proto(DF.BLAKE3) is B3
    with pytest.raises(InvalidRequest, match=r"MD5 is not supported.*SHA256, BLAKE3"):
        function_from_proto(DF.MD5)
    with pytest.raises(InvalidRequest, match="99"):
        function_from_proto(99)
    assert request_function(0, re_pb2.Digest(hash=H)) is SHA
    assert request_function(DF.BLAKE3, re_pb2.Digest(hash=H)) is B3
    assert request_function(0) is SHA


def test_digest_from_proto() -> None:
    assert digest_from_proto(re_pb2.Digest(hash=H, size_bytes=3), None) == Digest(
        function=SHA, hash=H, size=3
    )
    with pytest.raises(InvalidRequest, match="field x: negative"):
        digest_from_proto(re_pb2.Digest(hash=H, size_bytes=-1), SHA, "field x")
    with pytest.raises(InvalidRequest, match="lowercase"):
        digest_from_proto(re_pb2.Digest(hash=H.upper(), size_bytes=1), B3)


def test_action_result_digests() -> None:
    d = re_pb2.Digest(hash=H, size_bytes=1)
    result = re_pb2.ActionResult(
        output_files=[re_pb2.OutputFile(path="f", digest=d)],
        output_directories=[re_pb2.OutputDirectory(path="o", tree_digest=d)],
        stdout_digest=d,
    )
    assert len(list(action_result_digests(result, SHA))) == 3
    result.output_files.add(path="bad", digest=re_pb2.Digest(hash="zz"))
    with pytest.raises(InvalidRequest, match="output file 'bad'"):
        list(action_result_digests(result, SHA))


def test_error_table() -> None:
    d = Digest.of(b"x", SHA)
    cases = {
        InvalidRequest("x"): grpc.StatusCode.INVALID_ARGUMENT,
        UnknownInstance("n", [""]): grpc.StatusCode.INVALID_ARGUMENT,
        MissingBlobs([d]): grpc.StatusCode.FAILED_PRECONDITION,
        BlobNotFound(d): grpc.StatusCode.NOT_FOUND,
        CorruptBlob(d): grpc.StatusCode.NOT_FOUND,
        DigestMismatch(d, Digest.of(b"y", SHA)): grpc.StatusCode.INVALID_ARGUMENT,
        StoreFull(Path("/x")): grpc.StatusCode.RESOURCE_EXHAUSTED,
        StorageFull("free space under /x"): grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
    for exc, code in cases.items():
        assert code_of(exc) is code, exc
    assert code_of(ValueError("not a domain error")) is None
    status = status_of(MissingBlobs([d]))
    assert status.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    pf = error_details_pb2.PreconditionFailure()
    assert status.details[0].Unpack(pf)
    assert pf.violations[0].subject == f"blobs/{d.hash}/{d.size}"
    assert status_of(RuntimeError("boom")).code == grpc.StatusCode.INTERNAL.value[0]


def test_instances() -> None:
    inst = Instances(["", "ci"])
    assert inst.check("ci") == "ci"
    with pytest.raises(UnknownInstance, match=r"'x'.*'', 'ci'"):
        inst.check("x")


def test_capabilities_without_execution() -> None:
    caps = server_capabilities(max_batch_size=1 << 20, exec_enabled=False)
    assert not caps.execution_capabilities.exec_enabled
    assert caps.cache_capabilities.max_batch_total_size_bytes == 1 << 20


def test_config_file(tmp_path: Path) -> None:
    path = tmp_path / "server.toml"
    path.write_text(
        '[server]\nport = 9000\ndata_dir = "/srv/rbs"\ninstance_names = ["", "ci"]\n'
        '[cas]\nmax_size = "2G"\nmax_batch_size = "1Mi"\n'
    )
    config = load_config(path)
    assert config.server.port == 9000
    assert config.server.data_dir == Path("/srv/rbs")
    assert config.server.instance_names == ("", "ci")
    assert config.cas.max_size == 2 * 10**9  # G is 10^9 (rbs.units); Gi is 2^30
    assert config.cas.max_message_size > config.cas.max_batch_size == 1 << 20
    over = with_overrides(config, port=0, max_size=1 << 30, host=None)
    assert (over.server.port, over.cas.max_size, over.server.host) == (0, 1 << 30, "127.0.0.1")


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"srever": {}}, "unknown table"),
        ({"server": {"prot": 1}}, "unknown key 'prot'"),
        ({"server": {"port": "80"}}, "must be an integer"),
        ({"server": {"port": 70000}}, "out of range"),
        ({"server": {"instance_names": ["a/blobs"]}}, "invalid instance name"),
        ({"server": {"instance_names": []}}, "is empty"),
        ({"cas": {"max_size": "lots"}}, "invalid"),
        ({"cas": {"max_size": "2GB"}}, r"\[cas\] max_size '2GB': not a size \(did you mean 2G"),
        ({"cas": {"max_batch_size": 10}}, "out of range"),
        ({"cas": {"lease": -1}}, "lease must be"),
        ({"cas": {"lease": "3h"}}, "must be an integer"),
    ],
)
def test_config_errors(data: dict[str, dict[str, object]], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        config_from_dict(data)


def test_config_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "absent.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[server\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_check_header() -> None:
    assert check_header("Bearer tok", "tok") is None
    assert check_header("bearer tok", "tok") is None
    assert check_header(None, "tok") == "no authorization header"
    assert check_header("Basic tok", "tok") == "authorization header is not a Bearer token"
    assert check_header("Bearer tok2", "tok") == "wrong token"
    assert check_header("Bearer ", "tok") == "wrong token"


def test_read_token_file(tmp_path: Path) -> None:
    p = tmp_path / "t"
    p.write_text("  secret\n")
    assert read_token_file(p) == "secret"
    p.write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        read_token_file(p)


def test_action_result_store(tmp_path: Path) -> None:
    store = ActionResultStore(tmp_path / "ac.db")
    d = Digest.of(b"action", SHA)
    assert store.get("", d) is None
    store.put("", d, b"result")
    store.put("", d, b"result2")
    assert store.get("", d) == b"result2"
    assert store.get("other", d) is None
    assert store.get("", Digest.of(b"action", B3)) is None
    store.close()
    reopened = ActionResultStore(tmp_path / "ac.db")
    assert reopened.get("", d) == b"result2" and reopened.count() == 1
    assert reopened.delete("", d) and not reopened.delete("", d)
    reopened.close()
