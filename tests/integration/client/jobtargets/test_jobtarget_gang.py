"""Multi-node job targets on two workers: gang env, a real TCP rendezvous, rank 0 ends the job."""

from __future__ import annotations

import json
from pathlib import Path

from jobs_harness import JobCluster, wait_for
from jobtarget_ws import LOAD, write_ws

from rbs.client.jobs import JobsClient
from rbs.client.targets import build_job_target, stage_manifest_inputs

GANG_VARS = (
    "RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "RBS_NODELIST",
    "RBS_NNODES",
    "RBS_NODE_RANK",
    "RBS_MASTER_ADDR",
    "RBS_MASTER_PORT",
)

# Rank 0 listens at MASTER_ADDR:MASTER_PORT; rank 1 connects, they trade a message, and
# rank 1 then blocks: only rbs stopping it (because rank 0 ended) ends it early.
RENDEZVOUS = f"""
import json, os, socket, sys, time

rank = int(os.environ["RANK"])
print("env " + json.dumps({{k: os.environ.get(k) for k in {GANG_VARS!r}}}, sort_keys=True), flush=True)
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
if rank == 0:
    server = socket.create_server(("", port))
    server.settimeout(60)
    conn, _ = server.accept()
    f = conn.makefile("rw")
    print("rank 0 got: " + f.readline().strip(), flush=True)
    f.write("pong from rank 0\\n")
    f.flush()
    print("rank 0 done after: " + f.readline().strip(), flush=True)
    sys.exit(0)
deadline = time.monotonic() + 60
while True:
    try:
        conn = socket.create_connection((addr, port), timeout=5)
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.05)  # rank 0 may not listen yet: retrying is the rendezvous
f = conn.makefile("rw")
f.write("ping from rank %d\\n" % rank)
f.flush()
print("rank 1 got: " + f.readline().strip(), flush=True)
print("rank 1 pid %d blocks" % os.getpid(), flush=True)
f.write("ack\\n")
f.flush()
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (FileNotFoundError, IndexError):
        return False


def _submit(client: JobsClient, root: Path) -> str:
    manifest, prov = build_job_target("//app:job", cwd=root)
    stage_manifest_inputs(client, manifest, cwd=root)
    return client.submit(None, manifest=manifest, provenance=prov)


def test_two_ranks_rendezvous_over_tcp_and_rank_0_ends_the_job(
    cluster: JobCluster, client: JobsClient, tmp_path: Path
) -> None:
    cluster.add_worker(tmp_path / "w2")
    root = write_ws(
        tmp_path / "ws",
        {
            "app/BUILD": LOAD
            + 'py_binary(name = "meet", srcs = ["meet.py"])\n'
            + 'ml_training_job(name = "job", binary = ":meet", nodes = 2, cpu = "500m",\n'
            + '                memory = "256Mi", time_limit = "5m", max_retries = 0)\n',
            "app/meet.py": RENDEZVOUS,
        },
    )
    job = _submit(client, root)
    info = cluster.wait(job, timeout=90)
    assert info.state == "COMPLETED", info.raw

    def all_lines() -> list[str] | None:
        # Rank 1's lines come with its worker's report, which may follow rank 0's end.
        got = [x.text for x in client.logs(job) if x.stream == "out"]
        return got if any(x.startswith("rank 1 pid ") for x in got) else None

    lines = wait_for("rank 1's log lines", all_lines)
    assert "rank 0 got: ping from rank 1" in lines
    assert "rank 1 got: pong from rank 0" in lines
    assert "rank 0 done after: ack" in lines
    envs = sorted(
        (json.loads(x.removeprefix("env ")) for x in lines if x.startswith("env ")),
        key=lambda e: e["RANK"],
    )
    assert [e["RANK"] for e in envs] == ["0", "1"]
    assert [e["RBS_NODE_RANK"] for e in envs] == ["0", "1"]
    for key in ("WORLD_SIZE", "RBS_NNODES"):
        assert {e[key] for e in envs} == {"2"}
    for key in ("RBS_NODELIST", "MASTER_ADDR", "MASTER_PORT", "RBS_MASTER_ADDR"):
        assert len({e[key] for e in envs}) == 1, key
    nodelist = envs[0]["RBS_NODELIST"].split(",")
    assert len(nodelist) == 2 and envs[0]["MASTER_ADDR"] == nodelist[0]
    assert envs[0]["MASTER_PORT"] == envs[0]["RBS_MASTER_PORT"]
    # Rank 1 would block for ten minutes: the job ended because rbs stopped it.
    (pid_line,) = [x for x in lines if x.startswith("rank 1 pid ")]
    pid = int(pid_line.split()[3])
    wait_for(f"rank 1 (pid {pid}) to be stopped", lambda: not _alive(pid))
    assert {w.worker_id for w, _ in cluster.workers} == set(info.raw["workers"])


def test_elastic_job_takes_the_nodes_it_can_get(
    cluster: JobCluster, client: JobsClient, tmp_path: Path
) -> None:
    cluster.add_worker(tmp_path / "w2")
    root = write_ws(
        tmp_path / "ws",
        {
            "app/BUILD": LOAD
            + 'sh_binary(name = "size", srcs = ["size.sh"])\n'
            + 'ml_training_job(name = "job", binary = ":size", elastic = True, min_nodes = 1,\n'
            + '                max_nodes = 4, cpu = "250m", memory = "64Mi")\n',
            "app/size.sh": '#!/bin/sh\necho "rank $RANK of $WORLD_SIZE"\n',
        },
    )
    job = _submit(client, root)
    info = cluster.wait(job, timeout=60)
    assert info.state == "COMPLETED"
    # Rank 0 ends the job, so rank 1 may be stopped before it prints: rank 0 tells the size.
    assert "rank 0 of 2" in [x.text for x in client.logs(job) if x.stream == "out"]
    assert len(info.raw["workers"]) == 2
