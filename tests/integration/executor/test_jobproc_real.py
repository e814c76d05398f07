"""The job runner with real processes, on every cgroup backend this host offers."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest

from rbs.executor import procs
from rbs.executor.cgroup_base import CgroupBackend, Limits, NullBackend
from rbs.executor.cgroup_v2 import V2Backend
from rbs.executor.cgroups import HybridBackend, detect
from rbs.executor.joblog import LogSpool
from rbs.executor.jobproc import JobRunner
from rbs.executor.jobspec import JobOutcome, JobSpec
from rbs.model import JobState, KillReason, LogLine, LogStream

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C"}


@pytest.fixture(params=["none", "v1", "hybrid", "v2"])
def backend(request: pytest.FixtureRequest) -> CgroupBackend:
    kind = request.param
    b = detect(kind)
    if kind != "none" and isinstance(b, NullBackend):
        pytest.skip(f"cgroup backend {kind} not usable on this host: {b.reason}")
    return b


def has_memory(backend: CgroupBackend) -> bool:
    if isinstance(backend, V2Backend):
        return "memory" in backend.controllers
    if isinstance(backend, HybridBackend):
        return "memory" in backend.v1.bases
    return "memory" in getattr(backend, "bases", {})


class Job:
    """A runner plus everything its sink saw, for assertions."""

    def __init__(self, tmp: Path, backend: CgroupBackend, script: str, **kw: object) -> None:
        self.workdir = tmp / "wd"
        self.workdir.mkdir(exist_ok=True)
        self.spool = LogSpool(tmp / "log.jsonl")
        self.seen: list[LogLine] = []
        self.started = threading.Event()
        fields: dict[str, object] = {
            "job_id": "j1",
            "argv": ("/bin/sh", "-c", script),
            "workdir": self.workdir,
            "env": ENV,
            "grace_s": 5.0,
        }
        fields.update(kw)
        self.runner = JobRunner(
            JobSpec(**fields),  # type: ignore[arg-type]
            spool=self.spool,
            backend=backend,
            sink=self.sink,
        )

    def sink(self, lines: Sequence[LogLine]) -> None:
        self.seen.extend(lines)
        if any(x.stream is LogStream.OUT and x.text == "ready" for x in lines):
            self.started.set()

    def run(self) -> JobOutcome:
        try:
            return self.runner.run()
        finally:
            self.spool.close()

    def texts(self, stream: LogStream) -> list[str]:
        return [x.text for x in self.seen if x.stream is stream]


def test_lines_are_numbered_without_gaps_and_partial_line_kept(
    tmp_path: Path, backend: CgroupBackend
) -> None:
    script = (
        "i=0; while [ $i -lt 300 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done; "
        "printf 'no newline'"
    )
    job = Job(tmp_path, backend, script)
    outcome = job.run()
    assert outcome.state is JobState.COMPLETED and outcome.exit_code == 0
    assert [x.seq for x in job.seen] == list(range(1, len(job.seen) + 1))
    out = job.texts(LogStream.OUT)
    assert out == [f"out{i}" for i in range(300)] + ["no newline"]
    assert job.texts(LogStream.ERR) == [f"err{i}" for i in range(300)]
    last_out = [x for x in job.seen if x.stream is LogStream.OUT][-1]
    assert not last_out.eol
    with LogSpool(tmp_path / "log.jsonl") as spool:
        assert spool.read_from(1) == job.seen  # spooled before it reached the sink
    assert any("exited with code 0" in t for t in job.texts(LogStream.SYS))
    assert outcome.cpu_time_s is not None and outcome.peak_memory_bytes
    assert outcome.started_at is not None and outcome.started_at <= outcome.ended_at


def test_spool_reopened_continues_numbering(tmp_path: Path, backend: CgroupBackend) -> None:
    first = Job(tmp_path, backend, "echo one")
    first.run()
    n = len(first.seen)
    second = Job(tmp_path, backend, "echo two", attempt=2)
    second.run()
    assert second.seen[0].seq == n + 1
    with LogSpool(tmp_path / "log.jsonl") as spool:
        assert spool.read_from(n + 1) == second.seen
        assert spool.read_from(1) == first.seen + second.seen


def test_time_limit_sigterm_trap_runs(tmp_path: Path, backend: CgroupBackend) -> None:
    script = "trap 'echo got TERM; exit 3' TERM; echo ready; sleep 30 & wait $!"
    outcome = Job(tmp_path, backend, script, time_limit_s=0.3).run()
    assert outcome.state is JobState.TIMEOUT
    assert outcome.kill_reason is KillReason.TIMEOUT
    assert outcome.exit_code == 3  # the trap's exit, not SIGKILL


def test_time_limit_ignoring_sigterm_gets_sigkill(tmp_path: Path, backend: CgroupBackend) -> None:
    job = Job(tmp_path, backend, "trap '' TERM; sleep 30", time_limit_s=0.2, grace_s=0.3)
    outcome = job.run()
    assert (outcome.state, outcome.signal) == (JobState.TIMEOUT, signal.SIGKILL)
    sys_lines = job.texts(LogStream.SYS)
    assert any("time limit of 0.2s reached: sending SIGTERM" in t for t in sys_lines)
    assert any("grace period of 0.3s over: sending SIGKILL" in t for t in sys_lines)
    assert "ended TIMEOUT" in sys_lines[-1]


@pytest.mark.parametrize(
    ("reason", "state"),
    [(KillReason.CANCEL, JobState.CANCELLED), (KillReason.GANG_PEER_ENDED, JobState.CANCELLED)],
)
def test_kill_from_another_thread(
    tmp_path: Path, backend: CgroupBackend, reason: KillReason, state: JobState
) -> None:
    job = Job(tmp_path, backend, "echo ready; sleep 30")
    result: list[JobOutcome] = []
    t = threading.Thread(target=lambda: result.append(job.run()))
    t.start()
    assert job.started.wait(10)
    job.runner.kill(reason, "rank 2 ended" if reason is KillReason.GANG_PEER_ENDED else "")
    t.join(10)
    assert result[0].state is state and result[0].kill_reason is reason
    assert result[0].signal == signal.SIGTERM
    if reason is KillReason.GANG_PEER_ENDED:
        assert any(t.startswith("rank 2 ended: sending SIGTERM") for t in job.texts(LogStream.SYS))


def test_background_processes_die_with_the_job(tmp_path: Path, backend: CgroupBackend) -> None:
    job = Job(tmp_path, backend, "sleep 1000 & echo $!; sleep 1000 >/dev/null 2>&1 & echo $!")
    outcome = job.run()
    assert outcome.state is JobState.COMPLETED
    pids = [int(p) for p in job.texts(LogStream.OUT)]
    assert len(pids) == 2 and not any(procs.alive(p) for p in pids)
    assert any("killed 2 process(es) left running" in t for t in job.texts(LogStream.SYS))


def test_cgroup_catches_processes_that_leave_the_process_group(
    tmp_path: Path, backend: CgroupBackend
) -> None:
    if isinstance(backend, NullBackend):
        pytest.skip("without a cgroup a setsid'd process escapes by design")
    job = Job(tmp_path, backend, "setsid sleep 1000 >/dev/null 2>&1 & echo $!; echo done")
    job.run()
    pid = int(job.texts(LogStream.OUT)[0])
    assert not procs.alive(pid)


def test_out_of_memory(tmp_path: Path, backend: CgroupBackend) -> None:
    if not has_memory(backend):
        pytest.skip(f"{backend.describe()} has no memory controller")
    script = f"{sys.executable} -c 'x = b\"a\" * (200 << 20)'"
    job = Job(tmp_path, backend, script, memory_bytes=64 << 20)
    outcome = job.run()
    assert outcome.state is JobState.OUT_OF_MEMORY
    assert outcome.oom_kills >= 1
    assert outcome.peak_memory_bytes is not None
    assert 48 << 20 <= outcome.peak_memory_bytes <= 64 << 20
    assert any("out of memory: the kernel killed" in t for t in job.texts(LogStream.SYS))


def test_oom_of_a_child_counts_even_if_the_script_exits_0(
    tmp_path: Path, backend: CgroupBackend
) -> None:
    if not has_memory(backend):
        pytest.skip(f"{backend.describe()} has no memory controller")
    script = f"{sys.executable} -c 'x = b\"a\" * (200 << 20)'; echo carried on; exit 0"
    job = Job(tmp_path, backend, script, memory_bytes=64 << 20)
    outcome = job.run()
    assert (outcome.state, outcome.exit_code) == (JobState.OUT_OF_MEMORY, 0)
    assert "carried on" in job.texts(LogStream.OUT)


def test_pids_limit_stops_forks(tmp_path: Path, backend: CgroupBackend) -> None:
    bases = getattr(backend.v1 if isinstance(backend, HybridBackend) else backend, "bases", {})
    if "pids" not in bases:
        pytest.skip(f"{backend.describe()} has no pids controller")
    script = "for i in 1 2 3 4 5 6 7 8; do sleep 30 & done; echo done"
    job = Job(tmp_path, backend, script, pids_max=4)
    outcome = job.run()
    # dash gives up on the script when a fork fails.
    assert (outcome.state, outcome.exit_code) == (JobState.FAILED, 2)
    assert job.texts(LogStream.OUT) == []
    assert any("fork" in t.lower() for t in job.texts(LogStream.ERR)), job.texts(LogStream.ERR)


def test_limits_are_visible_inside_the_job(tmp_path: Path, backend: CgroupBackend) -> None:
    if not isinstance(backend, HybridBackend) and backend.name != "v1":
        pytest.skip("reads v1 control files from inside the job")
    script = (
        "cg() { awk -F: -v c=$1 '$2==c {print $3}' /proc/self/cgroup; }; "
        'cat "/sys/fs/cgroup/cpu$(cg cpu)/cpu.cfs_quota_us" '
        '"/sys/fs/cgroup/memory$(cg memory)/memory.limit_in_bytes"'
    )
    job = Job(tmp_path, backend, script, cpus=0.25, memory_bytes=96 << 20)
    assert job.run().state is JobState.COMPLETED, job.texts(LogStream.ERR)
    assert job.texts(LogStream.OUT) == ["25000", str(96 << 20)]


def test_env_is_exact_with_ids_and_gpus(tmp_path: Path, backend: CgroupBackend) -> None:
    os.environ["RBS_TEST_LEAK"] = "1"
    try:
        job = Job(tmp_path, backend, "env | sort", task_id="4", attempt=3, gpu_ids=("1",))
        job.run()
    finally:
        del os.environ["RBS_TEST_LEAK"]
    env = dict(line.split("=", 1) for line in job.texts(LogStream.OUT))
    assert env["RBS_JOB_ID"] == "j1" and env["RBS_TASK_ID"] == "4" and env["RBS_ATTEMPT"] == "3"
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and env["NVIDIA_VISIBLE_DEVICES"] == "1"
    assert "RBS_TEST_LEAK" not in env


@pytest.mark.parametrize("kind", ["v1", "hybrid", "v2"])
def test_sweep_kills_what_a_previous_worker_left(kind: str) -> None:
    scope = f"test-sweep-{uuid.uuid4().hex[:8]}"
    backend = detect(kind, scope=scope)
    if isinstance(backend, NullBackend):
        pytest.skip(f"cgroup backend {kind} not usable on this host: {backend.reason}")
    group = backend.create("orphan", Limits())
    proc = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    try:
        group.join(proc.pid)
        swept = backend.sweep()
        assert proc.wait(timeout=10) == -signal.SIGKILL
        assert swept and not any(p.exists() for p in swept)
    finally:
        proc.kill()
        proc.wait()
        for base in _bases(backend):
            base.rmdir()


def _bases(backend: CgroupBackend) -> set[Path]:
    if isinstance(backend, HybridBackend):
        return _bases(backend.v1) | _bases(backend.v2)
    if isinstance(backend, V2Backend):
        return {backend.base}
    return set(getattr(backend, "bases", {}).values())


def test_binary_garbage_and_long_lines(tmp_path: Path) -> None:
    script = "printf '\\377\\376bin\\n'; head -c 50000 /dev/zero | tr '\\0' x; echo"
    job = Job(tmp_path, NullBackend("test"), script, max_line_chars=16384)
    job.run()
    out = [x for x in job.seen if x.stream is LogStream.OUT]
    assert out[0].text == "\ufffd\ufffdbin"
    assert [len(x.text) for x in out[1:]] == [16384, 16384, 16384, 848]
    assert [x.eol for x in out[1:]] == [False, False, False, True]


def test_outputs_collected_and_escapes_refused(tmp_path: Path) -> None:
    script = "mkdir d; echo x > d/f; echo y > f; ln -s /etc/passwd leak; exit 2"
    job = Job(tmp_path, NullBackend("test"), script, outputs=("d", "f", "leak", "gone"))
    outcome = job.run()
    assert outcome.state is JobState.FAILED and outcome.exit_code == 2
    assert outcome.outputs is not None
    assert [f.declared for f in outcome.outputs.found] == ["d", "f"]
    assert outcome.outputs.missing == ("gone",)
    assert [r.declared for r in outcome.outputs.rejected] == ["leak"]
    sys_lines = job.texts(LogStream.SYS)
    assert any("output refused: output 'leak' resolves to /etc/passwd" in t for t in sys_lines)
    assert "declared output 'gone' was not created" in sys_lines


def test_unstartable_jobs_fail_with_a_reason(tmp_path: Path) -> None:
    job = Job(tmp_path, NullBackend("test"), "", argv=("no-such-program-x",))
    outcome = job.run()
    assert outcome.state is JobState.FAILED
    assert outcome.error == "program 'no-such-program-x' not found on the job's PATH " + (
        f"({ENV['PATH']})"
    )
    missing = Job(tmp_path, NullBackend("t"), "true", workdir=tmp_path / "nope").run()
    assert missing.error is not None and "does not exist" in missing.error


def test_cancel_before_start_runs_nothing(tmp_path: Path) -> None:
    job = Job(tmp_path, NullBackend("test"), "touch ran")
    job.runner.cancel()
    outcome = job.run()
    assert outcome.state is JobState.CANCELLED and outcome.started_at is None
    assert not (job.workdir / "ran").exists()


def test_run_async_cancelled_task_cancels_the_job(tmp_path: Path, backend: CgroupBackend) -> None:
    job = Job(tmp_path, backend, "echo ready; sleep 30")

    async def main() -> JobOutcome:
        task = asyncio.ensure_future(job.runner.run_async())
        assert await asyncio.to_thread(job.started.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await asyncio.to_thread(job.runner.finished.wait, 10)
        assert job.runner.outcome is not None
        return job.runner.outcome

    assert asyncio.run(main()).state is JobState.CANCELLED
    job.spool.close()


def test_run_async_returns_the_outcome(tmp_path: Path) -> None:
    job = Job(tmp_path, NullBackend("test"), "exit 7")
    outcome = asyncio.run(job.runner.run_async())
    assert (outcome.state, outcome.exit_code) == (JobState.FAILED, 7)
