"""The action runner: sandboxes, environment, outputs, timeouts, bad commands."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from pathlib import Path

from google.rpc import code_pb2
from reapi_actions import make_action

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs.cas.memory import MemoryStore
from rbs.cas.tree import walk_tree
from rbs.executor.action_runner import ActionExecutor, ActionOutcome
from rbs.model import Digest, DigestFunction
from rbs.wire.workers_actions import ActionFinishedReport, action_finished_to_pb


@dataclass(frozen=True)
class _Sent:
    """An outcome as the worker's ActionFinished carries it to the server."""

    code: int
    message: str
    result: re_pb2.ActionResult


def _sent(outcome: ActionOutcome) -> _Sent:
    pb = action_finished_to_pb(
        ActionFinishedReport(
            lease_id="a1", code=outcome.code, message=outcome.message, result=outcome.result
        )
    )
    return _Sent(code=pb.status.code, message=pb.status.message, result=pb.result)


def _run(store: MemoryStore, tmp_path: Path, digest: Digest, **kw: float) -> _Sent:
    runner = ActionExecutor(store, tmp_path / "work", worker_name="w1")
    return _sent(asyncio.run(runner.run(digest, name="a1", **kw)))


def _blob(
    store: MemoryStore, d: re_pb2.Digest, fn: DigestFunction = DigestFunction.BLAKE3
) -> bytes:
    return store.get(Digest(function=fn, hash=d.hash, size=d.size_bytes))


def test_runs_in_sandbox_with_exact_env_and_collects_outputs(
    store: MemoryStore, tmp_path: Path
) -> None:
    script = (
        "mkdir -p out/d && cat in.txt > out/a.txt && echo deep > out/d/x && "
        "env | sort > out/env.txt && pwd > out/pwd.txt && echo to-stdout && echo to-stderr >&2"
    )
    digest = make_action(
        store,
        ["/bin/sh", "-c", script],
        inputs={"pkg/in.txt": b"hello\n"},
        outputs=["out/a.txt", "out/d", "out/env.txt", "out/pwd.txt", "out/never"],
        env={"FOO": "bar"},
        working_directory="pkg",
    )
    outcome = _run(store, tmp_path, digest)
    assert outcome.code == code_pb2.OK, outcome.message
    result: re_pb2.ActionResult = outcome.result
    assert result.exit_code == 0
    files = {f.path: f for f in result.output_files}
    assert set(files) == {"out/a.txt", "out/env.txt", "out/pwd.txt"}
    assert _blob(store, files["out/a.txt"].digest) == b"hello\n"
    env = _blob(store, files["out/env.txt"].digest).decode().split("\n")
    # Exactly the Command's environment (sh adds PWD/SHLVL/_ of its own).
    assert "FOO=bar" in env and "PATH=/usr/bin:/bin" in env
    assert not any(line.startswith("HOME=") for line in env)
    assert _blob(store, files["out/pwd.txt"].digest).decode().strip().endswith("/root/pkg")
    assert _blob(store, result.stdout_digest) == b"to-stdout\n"
    assert _blob(store, result.stderr_digest) == b"to-stderr\n"
    (d,) = result.output_directories
    assert d.path == "out/d"
    tree = re_pb2.Tree.FromString(_blob(store, d.tree_digest))
    assert [f.name for f in tree.root.files] == ["x"]
    root = Digest(
        function=DigestFunction.BLAKE3,
        hash=d.root_directory_digest.hash,
        size=d.root_directory_digest.size_bytes,
    )
    assert [p for p, _ in walk_tree(store, root)] == ["x"]
    assert result.execution_metadata.worker == "w1"
    # The sandbox is gone afterwards.
    assert list((tmp_path / "work" / "sandboxes").iterdir()) == []


def test_v20_output_files_and_directories(store: MemoryStore, tmp_path: Path) -> None:
    digest = make_action(
        store,
        ["/bin/sh", "-c", "echo f > gen/f.txt && mkdir -p gen/tree && echo t > gen/tree/t"],
        output_files=["gen/f.txt"],
        output_directories=["gen/tree"],
        function=DigestFunction.SHA256,
    )
    outcome = _run(store, tmp_path, digest)
    result = outcome.result
    assert [f.path for f in result.output_files] == ["gen/f.txt"]
    assert [d.path for d in result.output_directories] == ["gen/tree"]
    assert _blob(store, result.output_files[0].digest, DigestFunction.SHA256) == b"f\n"


def test_nonzero_exit_is_a_result_not_an_error(store: MemoryStore, tmp_path: Path) -> None:
    digest = make_action(store, ["/bin/sh", "-c", "echo oops >&2; exit 3"])
    outcome = _run(store, tmp_path, digest)
    assert outcome.code == code_pb2.OK
    assert outcome.result.exit_code == 3


def test_missing_program_exits_127_with_reason(store: MemoryStore, tmp_path: Path) -> None:
    digest = make_action(store, ["no-such-program-xyz"])
    outcome = _run(store, tmp_path, digest)
    result = outcome.result
    assert result.exit_code == 127
    assert b"no-such-program-xyz" in _blob(store, result.stderr_digest)


def test_timeout_kills_the_process_group(store: MemoryStore, tmp_path: Path) -> None:
    marker = tmp_path / "child-survived"
    # A background grandchild would write the marker if the group were not killed.
    script = f"(sleep 2; touch {marker}) & echo started; sleep 30"
    digest = make_action(store, ["/bin/sh", "-c", script], timeout_s=1)
    outcome = _run(store, tmp_path, digest)
    assert outcome.code == code_pb2.DEADLINE_EXCEEDED
    assert "timeout" in outcome.message
    assert _blob(store, outcome.result.stdout_digest) == b"started\n"
    import time

    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:  # bounded check that nothing writes the marker
        assert not marker.exists()
        time.sleep(0.2)


def test_paths_escaping_the_sandbox_are_refused(store: MemoryStore, tmp_path: Path) -> None:
    digest = make_action(store, ["/bin/true"], outputs=["../../etc/x"])
    outcome = _run(store, tmp_path, digest)
    assert outcome.code == code_pb2.INVALID_ARGUMENT
    assert ".." in outcome.message


def test_missing_input_blob_is_failed_precondition(store: MemoryStore, tmp_path: Path) -> None:
    digest = make_action(store, ["/bin/true"], inputs={"x": b"data"})
    store.delete(Digest.of(b"data"))
    outcome = _run(store, tmp_path, digest)
    assert outcome.code == code_pb2.FAILED_PRECONDITION


def test_cancel_kills_the_command(store: MemoryStore, tmp_path: Path) -> None:
    digest = make_action(store, ["/bin/sh", "-c", "echo $$ > pid; sleep 30"])
    runner = ActionExecutor(store, tmp_path / "work", keep_sandboxes=True)

    async def go() -> None:
        task = asyncio.create_task(runner.run(digest, name="c1"))
        pid_file = tmp_path / "work" / "sandboxes" / "c1" / "root" / "pid"
        for _ in range(200):
            if pid_file.exists() and pid_file.read_text().strip():
                break
            await asyncio.sleep(0.05)
        pid = int(pid_file.read_text())
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        import os

        try:
            os.kill(pid, 0)
            state = Path(f"/proc/{pid}/stat").read_text().split()[2]
            assert state == "Z", "the command survived cancellation"
        except ProcessLookupError:
            pass

    asyncio.run(asyncio.wait_for(go(), 20))


def test_an_action_writing_to_its_inputs_does_not_poison_the_next(tmp_path: Path) -> None:
    """Inputs are hardlinks into the cache; as root an action can write through one."""
    from rbs.cas.disk import DiskStore

    disk = DiskStore(tmp_path / "cas", durable=False)
    evil = make_action(disk, ["/bin/sh", "-c", "echo EVIL >> in.txt"], inputs={"in.txt": b"ok\n"})
    reader = make_action(disk, ["/bin/cat", "in.txt"], inputs={"in.txt": b"ok\n"})
    runner = ActionExecutor(disk, tmp_path / "work")
    assert _sent(asyncio.run(runner.run(evil, name="evil"))).code == code_pb2.OK
    outcome = _sent(asyncio.run(runner.run(reader, name="reader")))
    assert outcome.code == code_pb2.OK, outcome.message
    out = outcome.result.stdout_digest
    assert (
        disk.get(Digest(function=DigestFunction.BLAKE3, hash=out.hash, size=out.size_bytes))
        == b"ok\n"
    )
