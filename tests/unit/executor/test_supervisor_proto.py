"""The run supervisor's frames: every message survives the trip, bad frames are refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rbs.executor.supervisor_proto import (
    HEADER,
    MAX_FRAME,
    Exited,
    Forget,
    FrameReader,
    Input,
    KillRun,
    Lines,
    ListRuns,
    Output,
    ProtocolError,
    Renew,
    RunInfo,
    Runs,
    RunSpec,
    Shutdown,
    SignalRun,
    Started,
    StartRun,
    decode,
    encode,
)

SPEC = RunSpec(
    lease_id="12_3.1.0",
    argv=("sh", "-c", "echo hi"),
    env={"PATH": "/bin", "RBS_JOB_ID": "12"},
    cwd="/w/jobs/12_3.1.0/work",
    spool="/w/jobs/12_3.1.0/log.jsonl",
    key="12.3.a1",
    title="job 12 task 3 attempt 1",
    cpus=0.5,
    memory_bytes=64 << 20,
    gpus=("0",),
    owner={"job_id": "12", "outputs": ["out.txt"], "checkpoint_dir": None},
)

MESSAGES = [
    StartRun(spec=SPEC),
    KillRun(lease_id="12_3.1.0", reason="timeout", message="time limit reached (scheduler)"),
    Renew(until=12345.5, grace_s=10.0, acked={"12_3.1.0": 7}),
    ListRuns(),
    Forget(lease_id="12_3.1.0"),
    Shutdown(),
    Input(lease_id="12_3.1.0", data="aGkK", eof=True),
    Input(lease_id="12_3.1.0", winsize=(50, 132)),
    Output(lease_id="12_3.1.0", data="JCAbWzBt"),
    SignalRun(lease_id="12_3.1.0", signal=2),
    Started(lease_id="12_3.1.0", pid=4242, started_at=1.5e9),
    Started(
        lease_id="12_3.1.0",
        pid=4242,
        started_at=1.5e9,
        records=({"seq": 1, "t": 1.0, "s": "sys", "text": "job 12 task 3 attempt 1"},),
    ),
    Lines(lease_id="12_3.1.0", records=({"seq": 1, "t": 1.0, "s": "out", "text": "héllo"},)),
    Exited(lease_id="12_3.1.0", state="OUT_OF_MEMORY", exit_code=None, signal=9, oom_kills=1),
    Exited(
        lease_id="12_3.1.0",
        state="COMPLETED",
        exit_code=0,
        records=({"seq": 5, "t": 2.0, "s": "sys", "text": "ended COMPLETED"},),
    ),
    Runs(
        runs=(
            RunInfo(spec=SPEC, pid=4242, started_at=1.0, acked=3),
            RunInfo(spec=SPEC, exited=Exited(lease_id="12_3.1.0", state="COMPLETED", exit_code=0)),
        )
    ),
]


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: m.kind)
def test_every_message_survives_a_frame(msg: object) -> None:
    frame = encode(msg)  # type: ignore[arg-type]
    # Split anywhere: the reader waits for the whole frame.
    reader = FrameReader()
    bodies = reader.feed(frame[:3]) + reader.feed(frame[3:])
    assert [decode(b) for b in bodies] == [msg]


def test_frames_in_one_read_come_out_in_order() -> None:
    data = b"".join(encode(m) for m in MESSAGES)  # type: ignore[arg-type]
    assert [decode(b) for b in FrameReader().feed(data)] == MESSAGES


def test_events_of_a_supervisor_before_lines_rode_in_them_are_read() -> None:
    # A daemon re-attaches to the supervisor it finds, of the version before too: its
    # Started and Exited carry no `records` (its lines came in Lines frames).
    old = [
        b'{"kind":"started","lease_id":"7.0.1","pid":9,"started_at":1.0}',
        b'{"kind":"exited","lease_id":"7.0.1","state":"COMPLETED","exit_code":0,'
        b'"signal":null,"kill_reason":null,"peak_memory_bytes":null,"oom_kills":0,'
        b'"cpu_time_s":null,"started_at":1.0,"ended_at":2.0,"cgroup":"","error":null,'
        b'"lapsed":false}',
    ]
    started, exited = (decode(b) for b in old)
    assert started == Started(lease_id="7.0.1", pid=9, started_at=1.0)
    assert isinstance(exited, Exited) and exited.records == () and exited.exit_code == 0


def test_fields_at_their_defaults_are_left_out_and_filled_back_in() -> None:
    body = json.loads(encode(StartRun(spec=SPEC))[HEADER.size :])
    assert set(body["spec"]) == {
        "lease_id", "argv", "env", "cwd", "spool", "key", "title", "cpus", "memory_bytes",
        "gpus", "owner",
    }  # fmt: skip
    # A frame with every field (as an earlier version wrote it) reads the same.
    full = dict(_fields(SPEC), argv=list(SPEC.argv), gpus=list(SPEC.gpus or ()))
    old = json.dumps({"kind": "start", "spec": full}).encode()
    assert decode(old) == StartRun(spec=SPEC)


def test_bad_frames_are_refused_with_a_reason() -> None:
    with pytest.raises(ProtocolError, match="over"):
        FrameReader().feed(HEADER.pack(MAX_FRAME + 1))
    with pytest.raises(ProtocolError, match="KeyError"):
        decode(b'{"kind": "reboot"}')
    with pytest.raises(ProtocolError, match="bad supervisor frame"):
        decode(b"not json")


def test_reserved_plug_in_fields_are_named_when_set() -> None:
    assert SPEC.unsupported() == []
    spec = RunSpec(**{**_fields(SPEC), "pty": True, "cpu_set": (0, 1), "io_bps": 4096})
    assert spec.unsupported() == []  # pty, cpu_set and io_bps are carried out
    assert RunSpec(**{**_fields(SPEC), "uid": 1000}).unsupported() == ["uid"]


def _fields(spec: RunSpec) -> dict[str, Any]:
    return {name: getattr(spec, name) for name in RunSpec.__dataclass_fields__}
