"""The process a container run starts: `python -m rbs.executor.container_exec CONFIG_FILE -- ARGV`.

The run supervisor spawns it as it spawns any job, in the job's cgroup and process
group. It creates the container (the image by id, ARGV, its own environment, which is
the job's, the working directory mounted at the same path, the job's user and limits,
pinned GPUs, host network or none) with `cgroup_parent` set to its own cgroup, so the
container sits inside the job's; it streams the container's stdout and stderr to its
own (with -i it joins the container's stdin, and with --pty its terminal, to its own
instead: rbs.executor.container_tty), turns SIGTERM into a stop of the container (SIGTERM,
SIGKILL once the grace is nearly over), removes the container, and exits as the payload did (a payload killed by
a signal ends this process with the same signal). The engine's socket is named only in
CONFIG_FILE, in the run's folder, which the payload (its own pid and mount namespaces,
only the working directory mounted) cannot reach.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from typing import Any

from rbs.executor import container_tty

CONFIG_ERROR = 125  # as `docker run`: the container could not be run at all


def own_cgroup() -> str | None:
    """This process's cgroup path, for `cgroup_parent`: the memory controller's on v1
    (where the job's limits are), else the unified one."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = [ln.strip().split(":", 2) for ln in f if ln.strip()]
    except OSError:
        return None
    by = {ctrl: path for _, ctrls, path in lines for ctrl in ctrls.split(",")}
    path = by.get("memory") or by.get("")
    return path if path and path != "/" else None


def _cgroup_mounts() -> list[str]:
    """Where each cgroup hierarchy is mounted (whole hierarchies only: root "/")."""
    out = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields = left.split()
                if right.split()[:1] in (["cgroup"], ["cgroup2"]) and fields[3] == "/":
                    out.append(fields[4])
    except (OSError, IndexError):
        pass
    return out


def _existing(parent: str) -> list[tuple[str, str]]:
    """Per hierarchy, the deepest folder of `parent`'s path that exists now: the engine
    makes the rest (and leaves some behind), and `_clean` removes what it made."""
    out = []
    for mount in _cgroup_mounts():
        path = mount
        for part in parent.strip("/").split("/"):
            if not os.path.isdir(os.path.join(path, part)):
                break
            path = os.path.join(path, part)
        out.append((os.path.join(mount, parent.strip("/")), path))
    return out


def _clean(groups: list[tuple[str, str]]) -> None:
    """Remove the empty cgroups the engine left under `parent` (conmon's, libpod's) and
    the folders it made for it, so the job's own groups can go."""
    for target, existed in groups:
        for root, dirs, _ in os.walk(target, topdown=False):
            for d in dirs:
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.join(root, d))
        path = target
        while len(path) > len(existed) and path.startswith(existed):
            with contextlib.suppress(OSError):
                os.rmdir(path)
            path = os.path.dirname(path)


def create_args(cfg: dict[str, Any], argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """The SDK's `containers.create` keyword arguments for one run."""
    import docker  # type: ignore[import-untyped]

    cwd = cfg["cwd"]
    volumes = {cwd: {"bind": cwd, "mode": "rw"}}
    tmp = env.get("TMPDIR")
    if tmp and os.path.isdir(tmp) and not tmp.startswith(cwd + "/"):
        volumes[tmp] = {"bind": tmp, "mode": "rw"}
    kw: dict[str, Any] = {
        "image": cfg["image"],
        "command": argv,
        "environment": env,
        "working_dir": cwd,
        "volumes": volumes,
        "user": cfg["user"],
        "network_mode": cfg["network"],
        "name": cfg["name"],
        "detach": True,
    }
    if cfg.get("run_uid"):  # --run-uids: as outside containers, no setuid way back up
        kw["security_opt"] = ["no-new-privileges"]
        kw["cap_drop"] = ["ALL"]
    parent = own_cgroup()
    if parent is not None:
        kw["cgroup_parent"] = parent
    if cfg.get("memory_bytes"):
        kw["mem_limit"] = int(cfg["memory_bytes"])
    if cfg.get("cpus"):
        kw["nano_cpus"] = int(float(cfg["cpus"]) * 1e9)
    if cfg.get("pids_max"):
        kw["pids_limit"] = int(cfg["pids_max"])
    gpus = cfg.get("gpus") or []
    if gpus and cfg.get("runtime") == "podman":
        kw["devices"] = [f"nvidia.com/gpu={g}" for g in gpus]  # CDI names
    elif gpus:
        kw["device_requests"] = [
            docker.types.DeviceRequest(device_ids=gpus, capabilities=[["gpu"]])
        ]
    return kw


def main(args: list[str]) -> int:
    if len(args) < 3 or args[1] != "--":
        print(
            "usage: python -m rbs.executor.container_exec CONFIG_FILE -- ARGV...", file=sys.stderr
        )
        return CONFIG_ERROR
    with open(args[0]) as f:
        cfg = json.load(f)
    argv = args[2:]
    import docker

    client = docker.DockerClient(base_url=cfg["engine"], timeout=None)
    with contextlib.suppress(docker.errors.NotFound):  # left by a killed attempt
        client.containers.get(cfg["name"]).remove(force=True)
    kw = create_args(cfg, argv, dict(os.environ))
    if cfg.get("stdin"):  # -i: stdin open (with --pty the engine's terminal), joined to ours
        kw = container_tty.create_args(kw, bool(cfg.get("pty")))
    groups = _existing(kw["cgroup_parent"]) if "cgroup_parent" in kw else []
    try:
        ctr = client.containers.create(**kw)
    except docker.errors.APIError as e:
        print(f"rbs: cannot create the container: {e.explanation or e}", file=sys.stderr)
        _clean(groups)
        return CONFIG_ERROR
    stopping = threading.Event()

    def stop(signum: int, _frame: object) -> None:
        if stopping.is_set():
            return
        stopping.set()
        grace = max(float(cfg.get("grace_s") or 0) - 1.0, 0.0)

        def run() -> None:
            with contextlib.suppress(docker.errors.APIError):
                ctr.stop(timeout=int(grace))  # SIGTERM, SIGKILL after the grace

        threading.Thread(target=run, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        if cfg.get("stdin"):
            (container_tty.run if cfg.get("pty") else container_tty.run_stdin)(client, ctr)
            stream: Any = ()
        else:
            stream = client.api.attach(ctr.id, stream=True, logs=True, demux=True)
            ctr.start()
        for out, err in stream:
            if out:
                sys.stdout.buffer.write(out)
                sys.stdout.buffer.flush()
            if err:
                sys.stderr.buffer.write(err)
                sys.stderr.buffer.flush()
        code = int(ctr.wait().get("StatusCode", CONFIG_ERROR))
    except docker.errors.APIError as e:
        print(f"rbs: the container failed: {e.explanation or e}", file=sys.stderr)
        code = CONFIG_ERROR
    finally:
        with contextlib.suppress(docker.errors.APIError):
            ctr.remove(force=True)
        _clean(groups)
    if stopping.is_set() and 128 < code < 128 + 65:
        # Stopped by a signal, as the engine reports it: end the same way.
        signal.signal(code - 128, signal.SIG_DFL)
        os.kill(os.getpid(), code - 128)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
