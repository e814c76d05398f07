"""A supervised run with real processes, on every cgroup backend this host offers.

Driven without the supervisor process (`SupervisedRun` on `SoloRun`'s loop), behind the
cgroup pool the supervisor uses, so kept groups are exercised as well as fresh ones.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from rbs.executor import procs, supervisor_spawn
from rbs.executor.cgroup_base import CgroupBackend, Limits, NullBackend
from rbs.executor.cgroup_pool import CgroupPool
from rbs.executor.cgroup_v2 import V2Backend
from rbs.executor.cgroups import HybridBackend, detect
from rbs.executor.joblog import LogSpool
from rbs.executor.supervisor_proto import Exited, RunSpec
from rbs.executor.supervisor_solo import SoloRun
from rbs.model import LogStream

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C"}


@pytest.fixture(params=["none", "v1", "hybrid", "v2"])
def backend(request: pytest.FixtureRequest) -> Any:
    kind = request.param
    scope = f"test-run-{uuid.uuid4().hex[:8]}"
    b = detect(kind, scope=scope)
    if kind != "none" and isinstance(b, NullBackend):
        pytest.skip(f"cgroup backend {kind} not usable on this host: {b.reason}")
    pool = CgroupPool(b)
    yield pool
    pool.drain()
    b.sweep()
    for base in _bases(b):
        base.rmdir()


def _bases(backend: CgroupBackend) -> set[Path]:
    if isinstance(backend, HybridBackend):
        return _bases(backend.v1) | _bases(backend.v2)
    if isinstance(backend, V2Backend):
        return {backend.base}
    return set(getattr(backend, "bases", {}).values())


def has_memory(pool: CgroupPool) -> bool:
    b = pool.inner
    if isinstance(b, V2Backend):
        return "memory" in b.controllers
    if isinstance(b, HybridBackend):
        return "memory" in b.v1.bases
    return "memory" in getattr(b, "bases", {})


class Job:
    """One run, and what its log says."""

    def __init__(self, tmp: Path, backend: CgroupBackend, script: str, **kw: Any) -> None:
        n = len(list(tmp.glob("run-*")))
        folder = tmp / f"run-{n}"
        (folder / "work").mkdir(parents=True)
        fields: dict[str, Any] = {
            "lease_id": f"j{n}.1",
            "argv": ("/bin/sh", "-c", script),
            "env": ENV,
            "cwd": str(folder / "work"),
            "spool": str(folder / "log.jsonl"),
            "key": f"job-{n}",
            "grace_s": 5.0,
        }
        fields.update(kw)
        self.spool = Path(fields["spool"])
        self.solo = SoloRun(RunSpec(**fields), backend)

    def run(self, timeout: float = 60.0) -> Exited:
        return self.solo.start().wait(timeout)

    def texts(self, stream: LogStream) -> list[str]:
        return [x.text for x in self.solo.lines if x.stream is stream]

    def started(self) -> bool:
        return "ready" in self.texts(LogStream.OUT)


def test_lines_are_numbered_spooled_and_the_partial_line_kept(
    tmp_path: Path, backend: CgroupBackend
) -> None:
    script = "i=0; while [ $i -lt 300 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done; "
    job = Job(tmp_path, backend, script + "printf 'no newline'")
    exited = job.run()
    assert (exited.state, exited.exit_code) == ("COMPLETED", 0)
    seen = job.solo.lines
    assert [x.seq for x in seen] == list(range(1, len(seen) + 1))
    assert job.texts(LogStream.OUT) == [f"out{i}" for i in range(300)] + ["no newline"]
    assert job.texts(LogStream.ERR) == [f"err{i}" for i in range(300)]
    with LogSpool(job.spool) as spool:
        assert spool.read_from(1) == seen
    assert exited.cpu_time_s is not None and exited.peak_memory_bytes


def test_a_kept_group_serves_the_next_run_with_its_limits_and_fresh_counters(
    tmp_path: Path, backend: CgroupBackend
) -> None:
    assert isinstance(backend, CgroupPool)
    if isinstance(backend.inner, NullBackend) or not has_memory(backend):
        pytest.skip("no cgroup with memory accounting to keep")
    burn = f"{sys.executable} -c 'x = b\"a\" * (40 << 20); sum(range(3_000_000))'"
    first = Job(tmp_path, backend, burn, memory_bytes=256 << 20, cpus=1.0).run()
    if isinstance(backend.inner, V2Backend):  # memory.peak has no reset: never kept
        assert backend.idle() == 0
        return
    assert backend.idle() == 1
    second = Job(tmp_path, backend, "echo small", memory_bytes=256 << 20, cpus=1.0).run()
    assert backend.reused == 1 and second.cgroup == first.cgroup
    assert first.peak_memory_bytes and second.peak_memory_bytes
    assert first.peak_memory_bytes > 40 << 20 > second.peak_memory_bytes
    assert first.cpu_time_s and second.cpu_time_s is not None
    assert second.cpu_time_s < first.cpu_time_s


def test_kill_then_sigkill_after_the_grace(tmp_path: Path, backend: CgroupBackend) -> None:
    job = Job(tmp_path, backend, "trap '' TERM; echo ready; sleep 30", grace_s=0.3)
    job.solo.start().until(job.started, 30)
    job.solo.kill("timeout", "time limit of 1s reached")
    exited = job.solo.wait()
    assert (exited.state, exited.signal, exited.kill_reason) == ("TIMEOUT", 9, "timeout")
    sys_lines = job.texts(LogStream.SYS)
    assert any("time limit of 1s reached: sending SIGTERM" in t for t in sys_lines)
    assert any("grace period of 0.3s over: sending SIGKILL" in t for t in sys_lines)


@pytest.mark.parametrize(
    ("reason", "state"),
    [("preempt", "PREEMPTED"), ("requeue", "PREEMPTED"), ("cancel", "CANCELLED")],
)
def test_the_log_says_a_preempted_run_ended_preempted(
    tmp_path: Path, backend: CgroupBackend, reason: str, state: str
) -> None:
    job = Job(tmp_path, backend, "echo ready; sleep 30")
    job.solo.start().until(job.started, 30)
    job.solo.kill(reason, reason)
    assert job.solo.wait().state == state
    assert any(t.startswith(f"ended {state}: ") for t in job.texts(LogStream.SYS))


def test_background_processes_die_and_their_group_is_not_kept(
    tmp_path: Path, backend: CgroupBackend
) -> None:
    assert isinstance(backend, CgroupPool)
    job = Job(tmp_path, backend, "sleep 1000 & echo $!; sleep 1000 >/dev/null 2>&1 & echo $!")
    assert job.run().state == "COMPLETED"
    pids = [int(p) for p in job.texts(LogStream.OUT)]
    assert len(pids) == 2
    # SIGKILLed at the end; a loaded host may take a moment to let them die.
    deadline = time.monotonic() + 30
    while any(procs.alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(procs.alive(p) for p in pids)
    assert any("killed 2 process(es) left running" in t for t in job.texts(LogStream.SYS))
    assert backend.idle() == 0  # removed, never handed to another job


def test_the_cgroup_catches_processes_that_leave_the_process_group(
    tmp_path: Path, backend: CgroupBackend
) -> None:
    assert isinstance(backend, CgroupPool)
    if isinstance(backend.inner, NullBackend):
        pytest.skip("without a cgroup a setsid'd process escapes by design")
    job = Job(tmp_path, backend, "setsid sleep 1000 >/dev/null 2>&1 & echo $!; echo done")
    job.run()
    assert not procs.alive(int(job.texts(LogStream.OUT)[0]))


def test_out_of_memory_in_a_kept_group_too(tmp_path: Path, backend: CgroupBackend) -> None:
    assert isinstance(backend, CgroupPool)
    if not has_memory(backend):
        pytest.skip("no memory controller")
    Job(tmp_path, backend, "true", memory_bytes=64 << 20).run()  # leaves a group to keep
    script = f"{sys.executable} -c 'x = b\"a\" * (200 << 20)'; echo carried on; exit 0"
    job = Job(tmp_path, backend, script, memory_bytes=64 << 20)
    exited = job.run()
    assert (exited.state, exited.exit_code) == ("OUT_OF_MEMORY", 0)
    assert exited.oom_kills >= 1 and "carried on" in job.texts(LogStream.OUT)
    assert exited.peak_memory_bytes is not None
    assert 48 << 20 <= exited.peak_memory_bytes <= 64 << 20
    after = Job(tmp_path, backend, "true", memory_bytes=64 << 20).run()
    assert (after.state, after.oom_kills) == ("COMPLETED", 0)  # counted once, for its job


def test_pids_limit_stops_forks(tmp_path: Path, backend: CgroupBackend) -> None:
    assert isinstance(backend, CgroupPool)
    b = backend.inner
    if "pids" not in getattr(b.v1 if isinstance(b, HybridBackend) else b, "bases", {}):
        pytest.skip("no pids controller")
    script = "for i in 1 2 3 4 5 6 7 8; do sleep 30 & done; echo done"
    job = Job(tmp_path, backend, script, pids_max=4)
    exited = job.run()
    assert (exited.state, exited.exit_code) == ("FAILED", 2)  # dash gives up on a failed fork
    assert any("fork" in t.lower() for t in job.texts(LogStream.ERR))


def test_limits_are_visible_inside_the_job(tmp_path: Path, backend: CgroupBackend) -> None:
    assert isinstance(backend, CgroupPool)
    if not isinstance(backend.inner, HybridBackend) and backend.name != "v1":
        pytest.skip("reads v1 control files from inside the job")
    script = (
        "cg() { awk -F: -v c=$1 '$2==c {print $3}' /proc/self/cgroup; }; "
        'cat "/sys/fs/cgroup/cpu$(cg cpu)/cpu.cfs_quota_us" '
        '"/sys/fs/cgroup/memory$(cg memory)/memory.limit_in_bytes"'
    )
    for _ in range(2):  # a fresh group, then the kept one
        job = Job(tmp_path, backend, script, cpus=0.25, memory_bytes=96 << 20)
        assert job.run().state == "COMPLETED", job.texts(LogStream.ERR)
        assert job.texts(LogStream.OUT) == ["25000", str(96 << 20)]


def test_a_plain_job_needs_no_shim_and_one_that_asks_for_it_gets_it(
    tmp_path: Path, backend: CgroupBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert isinstance(backend, CgroupPool)
    b = backend.inner
    if isinstance(b, V2Backend) and b.controllers:
        pytest.skip("a v2 group with controllers: jobs join it through the shim")
    shims: list[str] = []
    through_shim = supervisor_spawn._through_shim

    def counted(spec: RunSpec, *args: Any) -> supervisor_spawn.Spawned:
        shims.append(spec.lease_id)
        return through_shim(spec, *args)

    monkeypatch.setattr(supervisor_spawn, "_through_shim", counted)
    for _ in range(2):  # a fresh group, then the kept one
        job = Job(tmp_path, backend, "pwd; echo $0", memory_bytes=64 << 20, cpus=1.0)
        assert job.run().state == "COMPLETED", job.texts(LogStream.ERR)
        assert job.texts(LogStream.OUT) == [job.solo.run.spec.cwd, "/bin/sh"]
    assert shims == []
    # A script with no #! line is not a format the kernel runs: the shim's sh runs it.
    folder = tmp_path / "plain-script"
    folder.mkdir()
    (folder / "hello").write_text("echo hello from $0\n")
    (folder / "hello").chmod(0o755)
    job = Job(tmp_path, backend, "", argv=("./hello",), cwd=str(folder))
    assert job.run().state == "COMPLETED", job.texts(LogStream.SYS)
    assert job.texts(LogStream.OUT) == ["hello from ./hello"]
    assert shims == [job.solo.run.spec.lease_id]


def test_the_environment_is_exactly_the_specs(tmp_path: Path) -> None:
    os.environ["RBS_TEST_LEAK"] = "1"
    try:
        job = Job(tmp_path, NullBackend("test"), "env | sort", env={**ENV, "A": "b"})
        job.run()
    finally:
        del os.environ["RBS_TEST_LEAK"]
    env = dict(line.split("=", 1) for line in job.texts(LogStream.OUT))
    assert env["A"] == "b" and "RBS_TEST_LEAK" not in env


def test_binary_garbage_and_long_lines(tmp_path: Path) -> None:
    script = "printf '\\377\\376bin\\n'; head -c 50000 /dev/zero | tr '\\0' x; echo"
    job = Job(tmp_path, NullBackend("test"), script, max_line_chars=16384)
    job.run()
    out = [x for x in job.solo.lines if x.stream is LogStream.OUT]
    assert out[0].text == "\ufffd\ufffdbin"
    assert [len(x.text) for x in out[1:]] == [16384, 16384, 16384, 848]
    assert [x.eol for x in out[1:]] == [False, False, False, True]


def test_unstartable_runs_fail_with_a_reason(tmp_path: Path) -> None:
    job = Job(tmp_path, NullBackend("test"), "", argv=("no-such-program-x",))
    exited = job.run()
    assert exited.state == "FAILED"
    assert (
        exited.error == f"program 'no-such-program-x' not found on the job's PATH ({ENV['PATH']})"
    )
    gone = Job(tmp_path, NullBackend("t"), "true", cwd=str(tmp_path / "nope")).run()
    assert gone.error is not None and "does not exist" in gone.error


def test_a_relative_program_missing_from_the_job_folder_says_what_to_stage(tmp_path: Path) -> None:
    job = Job(tmp_path, NullBackend("test"), "", argv=("./prepare.sh",))
    error = job.run().error
    assert error is not None and error.startswith("program './prepare.sh' not found (looked")
    assert error.endswith(
        "only what --inputs stages is shared: try --inputs ./prepare.sh (or .) "
        "or --script ./prepare.sh"
    )


@pytest.mark.parametrize("kind", ["v1", "hybrid", "v2"])
def test_sweep_kills_what_a_previous_supervisor_left(kind: str) -> None:
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
