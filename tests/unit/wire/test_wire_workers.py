"""JobManifest <-> rbs.v1.JobManifest (every field, both ways) and the Workers protocol version check."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rbs import __version__
from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.rbs.v1 import jobs_pb2
from rbs._proto.rbs.v1 import workers_pb2 as w_pb2
from rbs.model import (
    ArraySpec,
    Dependency,
    DepKind,
    Digest,
    DigestFunction,
    JobManifest,
    Resources,
)
from rbs.wire.errors import code_of
from rbs.wire.workers import (
    WORKERS_PROTOCOL,
    ManifestDecodeError,
    ProtocolMismatch,
    check_protocol,
    lease_manifest,
    manifest_from_proto,
    manifest_to_proto,
)

_NAME = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1).filter(
    str.strip
)
_ENV_KEY = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True).filter(
    lambda k: (
        not k.startswith("RBS_")
        and k not in {"CUDA_VISIBLE_DEVICES", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
    )
)
_PATH = (
    st.lists(st.from_regex(r"[a-z0-9_][a-z0-9_.-]{0,6}", fullmatch=True), min_size=1)
    .map("/".join)
    .filter(lambda p: ".." not in p.split("/") and p not in (".",))
)


@st.composite
def _arrays(draw: st.DrawFn) -> ArraySpec:
    ranges, start = [], 0
    for _ in range(draw(st.integers(1, 3))):
        first = start + draw(st.integers(0, 5))
        last = first + draw(st.integers(0, 20))
        ranges.append((first, last, draw(st.integers(1, 4))))
        start = last + 1
    return ArraySpec(ranges=tuple(ranges), throttle=draw(st.none() | st.integers(1, 50)))


@st.composite
def manifests(draw: st.DrawFn) -> JobManifest:
    """Any valid manifest: every field drawn, defaults and unset optionals included."""
    kind = draw(st.sampled_from(["single", "array", "gang", "elastic"]))
    nodes, elastic, min_nodes, max_nodes, array = 1, False, None, None, None
    if kind == "array":
        array = draw(_arrays())
    elif kind == "gang":
        nodes = draw(st.integers(1, 64))
    elif kind == "elastic":
        elastic = True
        min_nodes = draw(st.integers(1, 8))
        max_nodes = min_nodes + draw(st.integers(0, 8))
        nodes = min_nodes
    function = draw(st.sampled_from(list(DigestFunction)))
    return JobManifest(
        name=draw(_NAME),
        command=tuple(draw(st.lists(st.text(), min_size=1, max_size=4).filter(lambda c: c[0]))),
        input_root=draw(
            st.none()
            | st.builds(
                Digest,
                function=st.just(function),
                hash=st.from_regex(r"[0-9a-f]{64}", fullmatch=True),
                size=st.integers(0, 2**62),
            )
        ),
        resources=Resources(
            cpu_millis=draw(st.integers(1, 10**6)),
            memory_bytes=draw(st.integers(1, 2**50)),
            gpus=draw(st.integers(0, 16)),
        ),
        queue=draw(_NAME),
        priority=draw(st.integers(-(2**31), 2**31 - 1)),
        time_limit=draw(st.none() | st.integers(1, 10**8)),
        nodes=nodes,
        elastic=elastic,
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        max_retries=draw(st.integers(0, 100)),
        requeue=draw(st.booleans()),
        checkpoint_dir=draw(st.none() | _PATH),
        env=tuple(draw(st.dictionaries(_ENV_KEY, st.text(), max_size=4)).items()),
        outputs=tuple(draw(st.lists(_PATH, max_size=3))),
        array=array,
        dependencies=tuple(
            draw(
                st.lists(
                    st.builds(
                        Dependency,
                        kind=st.sampled_from(list(DepKind)),
                        job_id=st.integers(1, 2**40),
                    ),
                    max_size=4,
                )
            )
        ),
        begin_time=draw(st.none() | st.floats(0, 4e9, allow_nan=False, allow_infinity=False)),
    )


def _full() -> JobManifest:
    """Every field off its default."""
    return JobManifest(
        name="train",
        command=("python", "train.py"),
        input_root=Digest.of(b"tree", DigestFunction.SHA256),
        resources=Resources(cpu_millis=500, memory_bytes=8 << 30, gpus=2),
        queue="gpu",
        priority=-5,
        time_limit=5400,
        nodes=2,
        elastic=True,
        min_nodes=2,
        max_nodes=4,
        max_retries=3,
        requeue=False,
        checkpoint_dir="ckpt",
        env=(("B", "2"), ("A", "1")),
        outputs=("out/model.pt", "logs/"),
        secrets=("WANDB_KEY", "HF_TOKEN"),
        cpu_cores=(6, 0, 1),
        max_iobps=10_000_000,
        dependencies=(
            Dependency(kind=DepKind.AFTEROK, job_id=3),
            Dependency(kind=DepKind.AFTERNOTOK, job_id=1),
        ),
        begin_time=1700000000.25,
        deadline=1700000100.5,
        container="localhost/img@sha256:abababababababababababababababababababababababababababababababab",
        network="none",
        preemptible=True,
        interactive=True,
    )


def _round_trip(m: JobManifest) -> JobManifest:
    wire = manifest_to_proto(m).SerializeToString(deterministic=True)
    return manifest_from_proto(jobs_pb2.JobManifest.FromString(wire))


@given(manifests())
def test_every_manifest_round_trips_through_the_wire(m: JobManifest) -> None:
    assert _round_trip(m) == m


def test_manifests_with_every_field_set_round_trip() -> None:
    gang = _full()
    # An array cannot also be a gang, nor a container job have a pty: the second manifest
    # covers `array` and `pty`.
    array = dataclasses.replace(
        gang,
        elastic=False,
        min_nodes=None,
        max_nodes=None,
        nodes=1,
        array=ArraySpec(ranges=((0, 9, 3), (20, 20, 1)), throttle=2),
        container=None,
        network="host",
        pty=True,
    )
    default = JobManifest(name="x", command=("x",))
    off_default = {
        f.name
        for m in (gang, array)
        for f in dataclasses.fields(JobManifest)
        if getattr(m, f.name) != getattr(default, f.name)
    }
    # api_version has one allowed value; every other field is exercised off its default.
    assert off_default == {f.name for f in dataclasses.fields(JobManifest)} - {"api_version"}
    assert _round_trip(gang) == gang
    assert _round_trip(array) == array


def test_unset_optionals_stay_unset() -> None:
    m = JobManifest(name="j", command=("true",))
    pb = manifest_to_proto(m)
    for field in (
        "input_root",
        "time_limit_seconds",
        "min_nodes",
        "max_nodes",
        "checkpoint_dir",
        "array",
        "begin_time",
    ):
        assert not pb.HasField(field), field
    assert _round_trip(m) == m
    zero_throttle = dataclasses.replace(m, array=ArraySpec(ranges=((0, 3, 1),)))
    assert not manifest_to_proto(zero_throttle).array.HasField("throttle")
    assert _round_trip(zero_throttle) == zero_throttle


def test_the_lease_no_longer_has_manifest_json() -> None:
    fields = w_pb2.JobLease.DESCRIPTOR.fields_by_name
    assert "manifest_json" not in fields
    assert 3 not in {f.number for f in w_pb2.JobLease.DESCRIPTOR.fields}
    assert fields["manifest"].message_type.full_name == "rbs.v1.JobManifest"


def _broken(edit: Callable[[Any], None]) -> Any:
    pb = manifest_to_proto(_full())
    edit(pb)
    return pb


@pytest.mark.parametrize(
    ("edit", "names"),
    [
        (lambda pb: setattr(pb, "api_version", ""), "api_version"),
        (lambda pb: setattr(pb, "api_version", "rbs/v9"), "api_version"),
        (lambda pb: pb.ClearField("command"), "command"),
        (lambda pb: pb.command.__setitem__(0, ""), "command"),
        (lambda pb: pb.ClearField("resources"), "resources"),
        (lambda pb: setattr(pb.resources, "cpu_millis", 0), "resources"),
        (lambda pb: setattr(pb.resources, "memory_bytes", -1), "resources"),
        (lambda pb: setattr(pb.resources, "gpus", -1), "resources"),
        (lambda pb: setattr(pb, "name", " "), "job name"),
        (lambda pb: setattr(pb, "queue", ""), "queue"),
        (lambda pb: setattr(pb, "time_limit_seconds", 0), "time_limit"),
        (lambda pb: setattr(pb, "max_retries", -1), "max_retries"),
        (lambda pb: setattr(pb, "min_nodes", 9), "min_nodes"),
        (lambda pb: setattr(pb, "elastic", False), "elastic"),
        (lambda pb: setattr(pb, "input_root_digest_function", 0), "input_root_digest_function"),
        (lambda pb: setattr(pb, "input_root_digest_function", 2), "input_root_digest_function"),
        (lambda pb: setattr(pb.input_root, "hash", "XYZ"), "input_root"),
        (lambda pb: setattr(pb.input_root, "size_bytes", -1), "input_root"),
        (lambda pb: pb.env.add(name="A", value="again"), "env variable A"),
        (lambda pb: pb.env.add(name="RBS_JOB_ID", value="1"), "RBS_JOB_ID"),
        (lambda pb: pb.env.add(name="1x", value="1"), "env name"),
        (lambda pb: pb.outputs.append("/etc/passwd"), "absolute"),
        (lambda pb: pb.outputs.append("../up"), ".."),
        (lambda pb: setattr(pb, "checkpoint_dir", ""), "checkpoint_dir"),
        (lambda pb: pb.dependencies.add(kind=0, job_id=1), "dependencies[2].kind"),
        (lambda pb: pb.dependencies.add(kind=1, job_id=0), "dependencies[2].job_id"),
        (lambda pb: pb.array.ranges.add(first=5, last=1, step=1), "array"),
        (lambda pb: setattr(pb, "begin_time", math.nan), "begin_time"),
    ],
)
def test_a_malformed_message_is_a_domain_error_naming_the_field(
    edit: Callable[[Any], None], names: str
) -> None:
    with pytest.raises(ManifestDecodeError) as e:
        manifest_from_proto(_broken(edit))
    assert names in str(e.value)


def test_an_array_with_no_ranges_is_refused() -> None:
    pb = manifest_to_proto(JobManifest(name="j", command=("x",)))
    pb.array.SetInParent()
    with pytest.raises(ManifestDecodeError, match="array"):
        manifest_from_proto(pb)


def test_a_lease_without_manifest_is_refused() -> None:
    with pytest.raises(ManifestDecodeError, match="carries no manifest"):
        lease_manifest(w_pb2.JobLease(lease_id="1.1.0", job_id="1"))
    lease = w_pb2.JobLease(lease_id="1.1.0", job_id="1", manifest=manifest_to_proto(_full()))
    assert lease_manifest(lease) == _full()


def test_same_manifest_same_bytes() -> None:
    a = manifest_to_proto(_full()).SerializeToString(deterministic=True)
    b = manifest_to_proto(dataclasses.replace(_full(), env=(("A", "1"), ("B", "2"))))
    assert b.SerializeToString(deterministic=True) == a
    assert manifest_to_proto(_full()).input_root_digest_function == re_pb2.DigestFunction.SHA256


def test_register_of_this_protocol_passes() -> None:
    check_protocol(w_pb2.Register(worker_id="w", protocol_version=WORKERS_PROTOCOL))


@pytest.mark.parametrize("version", [0, 1, WORKERS_PROTOCOL + 1])
def test_register_of_another_protocol_is_refused_saying_what_to_do(version: int) -> None:
    register = w_pb2.Register(
        worker_id="w-1", name="gpu-7", version="0.0.9", protocol_version=version
    )
    with pytest.raises(ProtocolMismatch) as e:
        check_protocol(register)
    text = str(e.value)
    speaks = max(version, 1)
    assert text.startswith(f"worker gpu-7 speaks Workers protocol {speaks}"), text
    assert f"but this server speaks {WORKERS_PROTOCOL}: run the same rbs version" in text
    assert f"(worker rbs 0.0.9, server rbs {__version__})" in text
    if version == 0:
        assert "sends no protocol_version" in text
    assert code_of(e.value) is not None and code_of(e.value).name == "FAILED_PRECONDITION"
