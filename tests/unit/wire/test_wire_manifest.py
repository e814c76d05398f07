"""JobManifest: deterministic JSON, strict parsing, and flags layered over a target with provenance."""

from __future__ import annotations

import json

import pytest

from rbs.model import Digest, JobManifest, Resources
from rbs.wire.manifest import (
    apply_flags,
    manifest_from_dict,
    manifest_from_json,
    manifest_to_json,
    provenance_for,
)
from rbs.wire.specs import SpecError, parse_array, parse_dependencies


def _full() -> JobManifest:
    return JobManifest(
        name="train",
        command=("python", "train.py", "--lr", "0.1"),
        input_root=Digest.of(b"tree"),
        resources=Resources(cpu_millis=500, memory_bytes=8 << 30, gpus=2),
        queue="gpu",
        priority=5,
        time_limit=5400,
        nodes=1,
        elastic=True,
        min_nodes=2,
        max_nodes=4,
        max_retries=3,
        requeue=False,
        checkpoint_dir="ckpt",
        env=(("B", "2"), ("A", "1")),
        outputs=("out/model.pt",),
        dependencies=parse_dependencies("afterok:3,afterany:1"),
        begin_time=1700000000.5,
    )


def test_json_round_trip_is_exact_and_byte_identical() -> None:
    m = _full()
    text = manifest_to_json(m)
    assert manifest_from_json(text) == m
    assert manifest_to_json(manifest_from_json(text)) == text
    # Same input, same bytes: env order and dependency order do not leak into the JSON.
    again = JobManifest(**{**_kwargs(m), "env": (("A", "1"), ("B", "2"))})
    assert manifest_to_json(again) == text
    data = json.loads(text)
    assert list(data) == sorted(data)
    assert data["apiVersion"] == "rbs/v1"
    assert data["resources"] == {"cpu": "500m", "memory": "8Gi", "gpus": 2}
    assert data["time_limit"] == 5400
    assert data["dependencies"] == ["afterany:1", "afterok:3"]


def _kwargs(m: JobManifest) -> dict[str, object]:
    return {f: getattr(m, f) for f in m.__dataclass_fields__}


def test_array_round_trips() -> None:
    m = JobManifest(name="a", command=("x",), array=parse_array("0-99:3,200%7"))
    assert manifest_from_json(manifest_to_json(m)) == m


def test_hand_written_manifest_uses_text_forms() -> None:
    m = manifest_from_dict(
        {
            "command": ["./run.sh"],
            "resources": {"cpu": "2", "memory": "512Mi"},
            "time_limit": "90m",
            "array": "0-9%2",
            "dependencies": "afterok:4",
            "env": ["X=1"],
        }
    )
    assert m.name == "run.sh"
    assert m.resources == Resources(cpu_millis=2000, memory_bytes=512 << 20, gpus=0)
    assert m.time_limit == 5400
    assert m.array is not None and m.array.throttle == 2
    assert [str(d) for d in m.dependencies] == ["afterok:4"]
    assert m.env == (("X", "1"),)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"command": ["x"], "colour": "red"}, "'colour': unknown field"),
        ({"command": ["x"], "apiVersion": "rbs/v9"}, "unsupported version"),
        ({"command": ["x"], "time_limit": "soon"}, "manifest time_limit 'soon'"),
        ({"command": ["x"], "resources": {"cpu": "lots"}}, "manifest resources.cpu"),
        ({"command": ["x"], "resources": {"disk": "1Gi"}}, "'disk': unknown field"),
        ({"command": "x"}, "not a list of strings"),
        ({"command": ["x"], "priority": "high"}, "has type str"),
        ({"command": ["x"], "env": {"RBS_JOB_ID": "7"}}, "set by the scheduler"),
        ({"command": []}, "command is empty"),
        ({"command": ["x"], "nodes": 2, "array": "0-3"}, "cannot also be a multi-node gang"),
        ([1, 2], "not an object"),
    ],
)
def test_bad_manifests_say_what_is_wrong(data: object, problem: str) -> None:
    with pytest.raises(SpecError, match=problem):
        manifest_from_dict(data)


def test_bad_json() -> None:
    with pytest.raises(SpecError, match="not valid JSON"):
        manifest_from_json("{")


def test_flags_alone_make_a_manifest_with_provenance() -> None:
    m, prov = apply_flags(
        None,
        None,
        {
            "--time": "1h30m",
            "--cpus": "500m",
            "--memory-gb": "2",
            "--gpus": "1",
            "--array": "0-9%2",
            "--env": ["A=1"],
            "--no-requeue": True,
            "--priority": "7",
            "--queue": None,
        },
        command=["/usr/bin/python3", "x.py"],
    )
    assert m.name == "python3"
    assert m.time_limit == 5400
    assert m.resources == Resources(cpu_millis=500, memory_bytes=2 << 30, gpus=1)
    assert m.requeue is False and m.priority == 7 and m.queue == "batch"
    assert prov["time_limit"] == "flag --time"
    assert prov["resources.cpu"] == "flag --cpus"
    assert prov["queue"] == "default"
    assert prov["command"] == "flag --"


def test_flags_override_a_target_and_say_so() -> None:
    target = JobManifest(
        name="train", command=("train",), time_limit=60, env=(("A", "1"), ("B", "1"))
    )
    prov = provenance_for(target, "target //ml:train")
    assert prov["time_limit"] == "target //ml:train"
    assert prov["queue"] == "default"
    m, prov2 = apply_flags(target, prov, {"--time": "2h", "--env": ["B=2", "C=3"]})
    assert m.time_limit == 7200
    assert m.name == "train" and m.command == ("train",)
    assert m.env == (("A", "1"), ("B", "2"), ("C", "3"))
    assert prov2["time_limit"] == "flag --time"
    assert prov2["name"] == "target //ml:train"
    assert prov2["env"] == "flag --env"


def test_elastic_flags() -> None:
    m, _ = apply_flags(None, None, {"--min-nodes": "2", "--max-nodes": "4"}, command=["t"])
    assert m.elastic and m.node_range == (2, 4)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"--time": "soon"}, "--time 'soon'"),
        ({"--array": "9-1"}, "--array '9-1'"),
        ({"--deps": "afterok"}, "--deps 'afterok'"),
        ({"--cpus": "0"}, "--cpus '0'"),
        ({"--env": ["RBS_ATTEMPT=3"]}, "set by the scheduler"),
        ({"--colour": "red"}, "--colour 'red': unknown job flag"),
        ({"--name": " "}, "--name ' ': is empty"),
        ({"--network": "none"}, "^--network 'none': network 'none' needs a container image"),
    ],
)
def test_bad_flags_name_the_flag(flags: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        apply_flags(None, None, flags, command=["t"])


def test_no_command_is_an_error() -> None:
    with pytest.raises(SpecError, match="no command given"):
        apply_flags(None, None, {})
