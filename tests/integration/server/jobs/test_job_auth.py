"""Users, roles and runs' scoped tokens on a real server: the jobs API and gRPC alike."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from jobs_harness import FAST_JOBS, JobCluster, wait_for

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs._proto.rbs.v1 import workers_pb2 as w_pb2
from rbs._proto.rbs.v1 import workers_pb2_grpc as w_grpc
from rbs.client.errors import JobError
from rbs.client.jobs import JobsClient
from rbs.executor.worker import Worker, WorkerConfig
from rbs.server.cluster import start_cluster
from rbs.server.tokens import add_token

pytestmark = pytest.mark.timeout(120)


class AuthCluster(JobCluster):
    """A JobCluster whose server reads a tokens file and whose workers present a token."""

    def __init__(self, data_dir: Path, tokens: Path, max_child_jobs: int = 100) -> None:
        super().__init__(data_dir, serve=False)
        jobs = dataclasses.replace(FAST_JOBS, max_child_jobs=max_child_jobs)
        server = dataclasses.replace(self.config.server, tokens_file=tokens)
        self.config = dataclasses.replace(self.config, server=server, jobs=jobs)
        self.server = self.call(start_cluster(self.config))
        server = dataclasses.replace(server, port=self.server.port)
        self.config = dataclasses.replace(self.config, server=server)
        self.admin = ""

    def token_worker(self, work_dir: Path, token: str, job_slots: int = 4) -> Worker:
        async def make() -> Worker:
            w = Worker(
                WorkerConfig(
                    server=self.address,
                    work_dir=work_dir,
                    cpus=4,
                    memory_bytes=4 << 30,
                    build_slots=1,
                    job_slots=job_slots,
                    reconnect_timeout_s=60,
                    token=token,
                )
            )
            self.workers.append((w, asyncio.ensure_future(w.run())))
            return w

        worker = self.call(make())
        wait_for(f"worker {worker.worker_id} to register", worker.connected.is_set)
        return worker

    def client(self) -> JobsClient:
        return self.as_(self.admin)  # what the harness's own calls (`wait`) use

    def as_(self, token: str) -> JobsClient:
        c = JobsClient(self.address, token=token)
        self._clients.append(c)
        return c


@pytest.fixture
def tokens(tmp_path: Path) -> dict[str, str]:
    path = tmp_path / "tokens.toml"
    return {
        name: add_token(path, name, role)
        for name, role in (("alice", "user"), ("bob", "user"), ("root", "admin"), ("w1", "worker"))
    }


@pytest.fixture
def cluster(tmp_path: Path, tokens: dict[str, str]) -> Iterator[AuthCluster]:
    c = AuthCluster(tmp_path / "server", tmp_path / "tokens.toml", max_child_jobs=2)
    c.admin = tokens["root"]
    try:
        c.token_worker(tmp_path / "w1", tokens["w1"])
        yield c
    finally:
        c.stop()


def _connect(address: str, token: str) -> grpc.RpcError:
    """Open the Workers stream with `token`; the error it ends with."""
    reg = w_pb2.WorkerMessage(register=w_pb2.Register(worker_id="evil-1", job_slots=64))
    with grpc.insecure_channel(address) as ch:
        stream = w_grpc.WorkersStub(ch).Connect(
            iter([reg]), metadata=(("authorization", f"Bearer {token}"),), timeout=10
        )
        with pytest.raises(grpc.RpcError) as err:
            next(iter(stream))
    return err.value


def _capabilities(address: str, header: str) -> None:
    with grpc.insecure_channel(address) as ch:
        re_grpc.CapabilitiesStub(ch).GetCapabilities(
            re_pb2.GetCapabilitiesRequest(), metadata=(("authorization", header),), timeout=10
        )


def _http(address: str, method: str, path: str, header: str | None, body: object = None) -> int:
    host, port = address.rsplit(":", 1)
    data = None if body is None else json.dumps(body).encode()
    r = urllib.request.Request(f"http://{host}:{int(port) + 1}{path}", data=data, method=method)
    if header is not None:
        r.add_header("Authorization", header)
    try:
        with urllib.request.urlopen(r, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_roles_hold_on_both_surfaces(cluster: AuthCluster, tokens: dict[str, str]) -> None:
    addr = cluster.address
    # Only a worker token registers a worker.
    for name in ("alice", "root"):
        err = _connect(addr, tokens[name])
        assert err.code() is grpc.StatusCode.PERMISSION_DENIED, name
        assert "may not register as a worker" in (err.details() or "")
    assert _connect(addr, "nonsense").code() is grpc.StatusCode.UNAUTHENTICATED
    # A worker token does not submit, list or cancel jobs.
    with pytest.raises(JobError, match="worker token may not use the jobs API"):
        cluster.as_(tokens["w1"]).submit(["true"])
    assert _http(addr, "GET", "/v1/jobs", f"Bearer {tokens['w1']}") == 403
    # No token, a wrong one: 401; the scheme is read in any case on both surfaces.
    assert _http(addr, "GET", "/v1/jobs", None) == 401
    assert _http(addr, "GET", "/v1/jobs", "Bearer wrong") == 401
    assert _http(addr, "GET", "/v1/jobs", f"bEaReR {tokens['alice']}") == 200
    _capabilities(addr, f"BEARER {tokens['alice']}")


def test_a_user_cancels_only_their_own_jobs_an_admin_any(
    cluster: AuthCluster, tokens: dict[str, str]
) -> None:
    alice, bob, root = (cluster.as_(tokens[n]) for n in ("alice", "bob", "root"))
    first = alice.submit(["sleep", "60"])
    second = alice.submit(["sleep", "60"])
    own = bob.submit(["true"])
    assert alice.show(first).raw["user"] == "alice"
    assert cluster.wait(own).raw["user"] == "bob"
    with pytest.raises(JobError, match=f"job {first} belongs to alice"):
        bob.cancel([first])
    assert alice.show(first).state in ("PENDING", "RUNNING")
    alice.cancel([first])
    root.cancel([second])
    for job, by in ((first, "alice"), (second, "root")):
        done = cluster.wait(job)
        assert done.state == "CANCELLED"
        assert [(c["action"], c["by"]) for c in done.raw["changes"]] == [("cancel", by)]


def test_a_runs_scoped_token_builds_and_submits_children_until_the_run_ends(
    cluster: AuthCluster, tokens: dict[str, str], tmp_path: Path
) -> None:
    alice = cluster.as_(tokens["alice"])
    seen = tmp_path / "seen"
    parent = alice.submit(
        [
            "sh",
            "-c",
            f'echo "$RBS_REMOTE $RBS_REMOTE_TOKEN" > {seen}.tmp; mv {seen}.tmp {seen}; sleep 60',
        ]
    )
    remote, token = wait_for(
        "the run to write its env", lambda: seen.exists() and seen.read_text().split()
    )
    assert remote == cluster.address and token.startswith("rbsrun.")
    assert token not in json.dumps(alice.show(parent).raw)
    # Build actions: REAPI answers it; the Workers stream and rbs's status do not.
    _capabilities(remote, f"Bearer {token}")
    assert _connect(remote, token).code() is grpc.StatusCode.PERMISSION_DENIED
    # Child jobs: submitted as alice's, counted against the parent's cap (2 here).
    run = cluster.as_(token)
    child = run.submit(["true"])
    info = cluster.wait(child)
    assert (info.raw["user"], info.raw["parent"]) == ("alice", parent)
    assert run.show(child).state == "COMPLETED"  # a run reads its own children
    run.submit(["true"])
    with pytest.raises(JobError, match="max_child_jobs"):
        run.submit(["true"])
    # Nothing else: not the parent, no listing, no cancel (admin actions), no status.
    h = f"Bearer {token}"
    assert _http(remote, "GET", f"/v1/jobs/{parent}", h) == 403
    assert _http(remote, "GET", "/v1/jobs", h) == 403
    assert _http(remote, "POST", "/v1/jobs/cancel", h, {"ids": [child]}) == 403
    assert _http(remote, "GET", "/v1/status", h) == 403
    # The token ends with its run.
    alice.cancel([parent])
    assert cluster.wait(parent).state == "CANCELLED"
    with pytest.raises(grpc.RpcError) as err:
        _capabilities(remote, h)
    assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED
    assert "expired when the run ended" in (err.value.details() or "")
    assert _http(remote, "POST", "/v1/jobs", h, {"command": ["true"], "flags": {}}) == 401


def test_a_worker_with_a_user_token_is_refused_and_says_why(
    cluster: AuthCluster, tokens: dict[str, str], tmp_path: Path
) -> None:
    async def run() -> BaseException | None:
        w = Worker(
            WorkerConfig(
                server=cluster.address,
                work_dir=tmp_path / "evil",
                cpus=64,
                memory_bytes=1 << 30,
                job_slots=64,
                token=tokens["alice"],
            )
        )
        try:
            await asyncio.wait_for(w.run(), 60)
        except Exception as e:  # the worker gives up on a refused token
            return e
        return None

    before = cluster.live_workers()
    err = cluster.call(run(), timeout=90)
    assert err is not None and "PERMISSION_DENIED" in str(err), err
    assert "may not register as a worker" in str(err)
    assert cluster.live_workers() == before  # the scheduler never heard of it


def test_refusals_do_not_grow_the_log_without_bound(
    cluster: AuthCluster, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="rbs.wire.auth"):
        for i in range(200):
            assert _http(cluster.address, "GET", "/v1/jobs", f"Bearer guess-{i}") == 401
    refused = [r for r in caplog.records if "refused" in r.getMessage()]
    assert 1 <= len(refused) <= 10
    assert not any("guess-" in r.getMessage() for r in caplog.records)


def test_a_restarted_server_keeps_the_tokens_of_runs_that_survived_it(
    cluster: AuthCluster, tokens: dict[str, str], tmp_path: Path
) -> None:
    seen = tmp_path / "seen"
    cmd = f'echo "$RBS_REMOTE_TOKEN" > {seen}.tmp; mv {seen}.tmp {seen}; sleep 60'
    job = cluster.as_(tokens["alice"]).submit(["sh", "-c", cmd])
    token = wait_for("the run's token", lambda: seen.exists() and seen.read_text().strip())
    config = cluster.config
    cluster.stop_server()
    cluster.config = config  # the same tokens file and ports
    cluster.start_server()
    _capabilities(cluster.address, f"Bearer {token}")
    cluster.as_(tokens["alice"]).cancel([job])
    assert cluster.wait(job).state == "CANCELLED"
    with pytest.raises(grpc.RpcError):
        _capabilities(cluster.address, f"Bearer {token}")
