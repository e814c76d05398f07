"""`rbs job submit --container IMAGE` on the embedded cluster, with real podman.

The image is built here: `podman import` of a root filesystem holding Debian's
busybox-static and a marker file. Skipped, saying so, where podman, runc or
busybox-static are not installed (`make system-deps` installs them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from embedded import EmbeddedCluster

# The local worker never pulls, wherever this runs.
CLUSTER = EmbeddedCluster(env={"RBS_CONTAINER_PULL": "no"}, timeout=300)
rbs = CLUSTER.rbs


BUSYBOX = Path("/bin/busybox")
CONF = '[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]\n'
CONF += 'netns = "host"\n[engine]\nruntime = "runc"\n'

pytestmark = pytest.mark.skipif(
    not (shutil.which("podman") and shutil.which("runc") and BUSYBOX.is_file()),
    reason="podman, runc and busybox-static are not installed (make system-deps installs them)",
)


def _podman(conf: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    return subprocess.run(
        ["podman", *args], env=env, capture_output=True, text=True, timeout=180, check=check
    )


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    """(reference, marker text, containers.conf) of a fresh busybox image."""
    root = tmp_path_factory.mktemp("rootfs")
    conf = root.parent / f"{root.name}.containers.conf"
    conf.write_text(CONF)
    for d in ("bin", "proc", "sys", "dev", "tmp", "etc"):
        (root / d).mkdir()
    shutil.copy(BUSYBOX, root / "bin" / "busybox")
    for tool in ("sh", "ls", "cat", "echo", "id", "ip", "sleep", "env", "pwd", "grep", "wc"):
        (root / "bin" / tool).symlink_to("busybox")
    marker = uuid.uuid4().hex
    (root / "etc" / "rbs-marker").write_text(marker + "\n")
    tar = root.parent / f"{root.name}.tar"
    subprocess.run(["tar", "-C", str(root), "-cf", str(tar), "."], check=True, timeout=60)
    ref = f"localhost/rbs-test-busybox:{marker[:12]}"
    _podman(conf, "import", str(tar), ref)
    try:
        yield ref, marker, conf
    finally:
        _podman(conf, "rmi", "-f", ref, check=False)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with CLUSTER.running(tmp_path_factory) as home:
        yield home
    pid_file = home / "local" / "worker" / "containers" / "service.pid"
    # The worker's stop ends the podman service it started.
    assert not pid_file.exists() or not _alive(int(pid_file.read_text()))


def _submit(home: Path, *args: str) -> tuple[str, list[str], str]:
    """Submit with --wait; (job id, its log lines, the submit's stderr)."""
    r = rbs(home, "job", "submit", "--wait", *args)
    job = r.stdout.splitlines()[0] if r.stdout else ""
    logs = rbs(home, "job", "logs", job).stdout.splitlines() if job else []
    return job, logs, r.stderr + f"\nexit {r.returncode}"


def test_a_container_job_runs_in_the_image_with_its_folder_env_user_and_limits(
    home: Path, image: tuple[str, str, Path]
) -> None:
    ref, marker, conf = image
    script = (
        "cat /etc/rbs-marker; echo cwd=$(pwd); echo foo=$FOO; id -u; "
        "cat /sys/fs/cgroup/memory/memory.limit_in_bytes; echo made > out.txt; exit 3"
    )
    job, logs, err = _submit(
        home,
        "--container",
        ref,
        "--env",
        "FOO=bar",
        "--memory-gb",
        "0.25",
        "--outputs",
        "out.txt",
        "--",
        "sh",
        "-c",
        script,
    )
    assert f"job {job}: FAILED:exit 3" in err, (err, logs)
    assert marker in logs  # the payload read the image's own file
    workdir = next(m.group(1) for ln in logs if (m := re.search(r" in (/\S+/work)$", ln)))
    assert f"cwd={workdir}" in logs  # the job's folder, mounted at the same path
    assert "foo=bar" in logs
    assert str(os.getuid()) in logs  # the job's user: the worker's, as outside containers
    assert str(256 << 20) in logs  # --memory-gb 0.25 holds inside
    image_id = _podman(conf, "image", "inspect", "--format", "{{.Id}}", ref).stdout.strip()
    shown = next(ln for ln in logs if ln.startswith("[rbs] container: image"))
    assert f"image {ref} (sha256:{image_id.removeprefix('sha256:')}" in shown
    out = home / "got"
    got = rbs(home, "job", "outputs", job, "--dest", str(out))
    assert got.returncode == 0, got.stderr
    assert (out / "out.txt").read_text() == "made\n"  # written in the container, collected
    left = _podman(conf, "ps", "-a", "--format", "{{.Names}}").stdout.split()
    wid = (home / "local" / "worker" / "worker-id").read_text().strip()
    assert not [n for n in left if n.startswith(f"rbs-{wid}-{job}.")]  # the container is gone


def test_host_network_by_default_and_network_none_leaves_only_loopback(
    home: Path, image: tuple[str, str, Path]
) -> None:
    ref = image[0]
    host = sorted(
        ln.split(":")[0].strip() for ln in Path("/proc/net/dev").read_text().splitlines()[2:]
    )
    cmd = "grep : /proc/net/dev | while read -r name rest; do echo if=${name%:}; done"
    _, logs, err = _submit(home, "--container", ref, "--", "sh", "-c", cmd)
    assert "COMPLETED" in err, (err, logs)
    assert sorted(ln[3:] for ln in logs if ln.startswith("if=")) == host
    _, logs, err = _submit(home, "--container", ref, "--network", "none", "--", "sh", "-c", cmd)
    assert "COMPLETED" in err, (err, logs)
    assert [ln for ln in logs if ln.startswith("if=")] == ["if=lo"]


def test_the_engine_socket_is_out_of_the_jobs_reach(
    home: Path, image: tuple[str, str, Path]
) -> None:
    sock = home / "local" / "worker" / "containers" / "podman.sock"
    cmd = f"ls {sock} && echo REACHABLE; env | grep -c -e podman.sock -e DOCKER_HOST -e CONTAINER_HOST"
    _, logs, err = _submit(home, "--container", image[0], "--", "sh", "-c", cmd)
    assert sock.is_socket()  # it is there, on the worker
    assert "REACHABLE" not in logs, logs
    assert "0" in logs  # nothing in the job's environment names it
    assert "FAILED:exit 1" in err  # grep -c: no line matched


def _reports(home: Path, ref: str) -> bool:
    """Whether `rbs remote status` lists `ref` among the worker's images."""
    r = rbs(home, "remote", "status", "--json")
    if r.returncode != 0:
        return False
    workers = json.loads(r.stdout)["workers"]
    return any(ref in i["names"] for w in workers for i in w.get("images", []))


def test_an_image_no_worker_has_is_refused_at_submit(
    home: Path, image: tuple[str, str, Path]
) -> None:
    ref = image[0]
    assert rbs(home, "job", "submit", "--wait", "--", "true").returncode == 0  # cluster up
    deadline = time.monotonic() + 180
    while not _reports(home, ref):  # the worker reports its images once it is registered
        assert time.monotonic() < deadline, "the worker never reported its images"
        time.sleep(0.5)
    table = rbs(home, "remote", "status")
    assert "container images" in table.stdout and ref in table.stdout, table.stdout
    missing = f"localhost/rbs-no-such-image:{uuid.uuid4().hex[:8]}"
    r = rbs(home, "job", "submit", "--container", missing, "--", "true")
    assert r.returncode != 0 and r.stdout == ""
    assert f"--container {missing}: unknown image" in r.stderr
    assert ref in r.stderr and "Traceback" not in r.stderr


def test_a_cancelled_container_job_gets_sigterm_and_its_container_goes(
    home: Path, image: tuple[str, str, Path]
) -> None:
    ref, _, conf = image
    script = "trap 'echo got-term; exit 0' TERM; echo ready; while true; do sleep 1; done"
    r = rbs(home, "job", "submit", "--container", ref, "--", "sh", "-c", script)
    assert r.returncode == 0, r.stderr
    job = r.stdout.split()[0]
    for _ in range(120):  # bounded: each look is a whole `rbs job logs`
        if "ready" in rbs(home, "job", "logs", job).stdout.splitlines():
            break
    else:
        pytest.fail("the container job never printed 'ready'")
    wid = (home / "local" / "worker" / "worker-id").read_text().strip()
    running = _podman(conf, "ps", "--format", "{{.Names}}").stdout.split()
    assert [n for n in running if n.startswith(f"rbs-{wid}-{job}.")], running
    assert rbs(home, "job", "cancel", job).returncode == 0
    waited = rbs(home, "job", "wait", job)
    assert waited.stdout.split() == [job, "CANCELLED"], waited
    assert "got-term" in rbs(home, "job", "logs", job).stdout.splitlines()
    left = _podman(conf, "ps", "-a", "--format", "{{.Names}}").stdout.split()
    assert not [n for n in left if n.startswith(f"rbs-{wid}-{job}.")]
