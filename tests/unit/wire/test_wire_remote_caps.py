"""ServerCapabilities -> ServerOffer, and the digest function a client picks from it."""

from __future__ import annotations

import pytest

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs.model import DigestFunction
from rbs.server.capabilities import server_capabilities
from rbs.wire.remote_caps import UnsupportedServer, choose_function, offer_from_pb

B3 = DigestFunction.BLAKE3
SHA = DigestFunction.SHA256
_DF = re_pb2.DigestFunction


def _buildgrid_044() -> re_pb2.ServerCapabilities:
    """What BuildGrid 0.4.4's CAS+AC server answers (no execution, SHA256 only)."""
    return re_pb2.ServerCapabilities(
        cache_capabilities=re_pb2.CacheCapabilities(
            digest_functions=[_DF.SHA256],
            action_cache_update_capabilities=re_pb2.ActionCacheUpdateCapabilities(
                update_enabled=True
            ),
            max_batch_total_size_bytes=4193280,
        ),
        execution_capabilities=re_pb2.ExecutionCapabilities(
            digest_function=_DF.SHA256, digest_functions=[_DF.SHA256]
        ),
    )


def test_blake3_when_offered() -> None:
    offer = offer_from_pb(server_capabilities(max_batch_size=1 << 20, exec_enabled=True))
    assert offer.zstd and offer.exec_enabled and offer.max_batch_size == 1 << 20
    assert choose_function(offer, execution=True) is B3
    assert choose_function(offer, forced=SHA, execution=True) is SHA


def test_sha256_from_a_sha256_only_server() -> None:
    offer = offer_from_pb(_buildgrid_044())
    assert offer.cache_functions == (SHA,)
    assert not offer.zstd
    assert offer.max_batch_size == 4193280
    assert choose_function(offer, execution=False) is SHA
    with pytest.raises(UnsupportedServer, match=r"--digest-function blake3: .* offers sha256"):
        choose_function(offer, forced=B3, execution=False)
    with pytest.raises(UnsupportedServer, match="does not offer remote execution"):
        choose_function(offer, execution=True)


def test_rbs_server_offering_sha256_only() -> None:
    caps = server_capabilities(max_batch_size=1 << 20, exec_enabled=True, functions=(SHA,))
    assert list(caps.cache_capabilities.digest_functions) == [_DF.SHA256]
    assert caps.execution_capabilities.digest_function == _DF.SHA256
    assert choose_function(offer_from_pb(caps), execution=True) is SHA


def test_execution_functions_narrow_the_choice() -> None:
    caps = _buildgrid_044()
    caps.cache_capabilities.digest_functions.append(_DF.BLAKE3)
    caps.execution_capabilities.exec_enabled = True
    offer = offer_from_pb(caps)
    assert choose_function(offer, execution=False) is B3
    assert choose_function(offer, execution=True) is SHA


def test_no_usable_function_names_the_offered_ones() -> None:
    caps = re_pb2.ServerCapabilities(
        cache_capabilities=re_pb2.CacheCapabilities(digest_functions=[_DF.SHA384])
    )
    offer = offer_from_pb(caps)
    with pytest.raises(UnsupportedServer, match="it offers sha384"):
        choose_function(offer, execution=False)


def test_server_policy_keeps_the_default_instance_and_refuses_other_functions() -> None:
    from rbs.server.instances import Instances
    from rbs.wire.errors import InvalidRequest, UnknownInstance

    policy = Instances(["foo"], [SHA])
    assert policy.names == ("", "foo")
    assert policy.check("") == "" and policy.check("foo") == "foo"
    with pytest.raises(UnknownInstance, match="accepts '', 'foo'"):
        policy.check("bar")
    assert policy.check_function(None) is SHA  # unset: a 64-hex hash reads as SHA256
    with pytest.raises(InvalidRequest, match=r"blake3 is not offered .*\(it offers sha256"):
        policy.check_function(B3)


def test_digest_functions_config() -> None:
    from rbs.server.config import ConfigError, config_from_dict

    cfg = config_from_dict({"server": {"digest_functions": ["sha256"]}})
    assert cfg.server.digest_functions == (SHA,)
    for bad in (["md5"], "sha256", []):
        with pytest.raises(ConfigError, match="digest_functions"):
            config_from_dict({"server": {"digest_functions": bad}})
