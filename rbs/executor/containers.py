"""Container jobs on a worker: the engine, images (pulled once, cached), the run's spec.

A job that names an image (`--container IMAGE`, `container = "..."` on a job rule) runs
in it on this worker's engine, driven through the `docker` SDK: podman's Docker-compatible
API service, started by the worker on a private socket (`rbs.executor.podman_service`),
or a Docker-compatible engine the worker is pointed at (`--containers unix:///PATH`).

The daemon resolves the image while it prepares the run (`ContainerEngine.prepare`): a
local image is used as is, a missing one is pulled once and then cached by the engine;
the run's log names the image's id (its digest). The process the supervisor starts is
`python -m rbs.executor.container_exec` (`container_argv`), in the job's cgroup and
process group; it creates the container under that cgroup (`--cgroup-parent`), streams
its output, forwards a stop, and exits as the payload did. docs/design/containers.md.
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from rbs.executor import podman_service
from rbs.executor.podman_service import EngineError
from rbs.executor.supervisor_proto import RunSpec
from rbs.wire.workers_images import ImagesReport, LocalImageInfo

log = logging.getLogger(__name__)
AUTO, NONE = "auto", "none"
USAGE_FILE = "images.json"  # in <work-dir>/containers: the images this worker's jobs ran
# Whether a pull may work, until one is tried: does the default registry answer?
REGISTRY = ("registry-1.docker.io", 443)
REPORT_POLL_S = 2.0  # how often the reporter looks whether a new stream is open
RELIST_S = 30.0  # how often it lists the images again (one `podman load`ed by hand)


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerSettings:
    """A worker's `--containers` (the engine), `--container-cache-size`, `--container-pull`."""

    engine: str = AUTO
    # Past this total, the least recently used images its jobs ran are removed.
    cache_max_bytes: int | None = None
    # Whether it pulls a missing image: "auto" (and says it can while its registry
    # answers or its last pull worked), "yes" (says it can), "no" (never pulls).
    pull: str = AUTO


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageInfo:
    """A local image: what the job named, the engine's id (sha256:...), its size."""

    ref: str
    image_id: str
    repo_digests: tuple[str, ...] = ()
    size_bytes: int = 0


class ContainerEngine:
    """One worker's engine: reached lazily (the service starts at the first container job)."""

    def __init__(
        self, work_dir: Path, setting: str, cache_max_bytes: int | None = None, pull: str = AUTO
    ) -> None:
        self.work_dir = work_dir
        self.pull = pull
        self.setting = setting  # "auto" / "podman": our own service; "unix://...": given
        self.cache_max_bytes = cache_max_bytes
        self._gc_lock = threading.Lock()
        self._url: str | None = None
        self._client: Any = None
        self._lock = threading.Lock()
        self.started_service = False
        # What it reports: None in auto mode until it knows (see images_report).
        self.can_pull: bool | None = {"yes": True, "no": False}.get(pull)
        self._changed = threading.Event()  # pulled or removed: report the images again
        self._stopped = threading.Event()

    @classmethod
    def for_worker(cls, work_dir: Path, settings: ContainerSettings) -> ContainerEngine | None:
        """The engine `--containers SETTING` names; None for "none" (or no podman with auto)."""
        setting = settings.engine
        if setting == NONE:
            return None
        if setting == AUTO and not podman_service.installed():
            return None
        if setting not in (AUTO, "podman") and not setting.startswith("unix://"):
            raise ValueError(
                f"--containers {setting!r}: want auto, podman, none or unix:///PATH/TO/SOCKET"
            )
        if settings.pull not in (AUTO, "yes", "no"):
            raise ValueError(f"--container-pull {settings.pull!r}: want auto, yes or no")
        return cls(work_dir, setting, settings.cache_max_bytes, settings.pull)

    @property
    def runtime(self) -> str:
        """What the worker advertises: "podman", or "docker" for a given engine socket."""
        return "docker" if self.setting.startswith("unix://") else "podman"

    def client(self) -> Any:
        """The SDK client (blocking: call on a thread); EngineError when unreachable."""
        with self._lock:
            if self._client is not None:
                return self._client
            import docker  # type: ignore[import-untyped]  # only workers that run containers

            if self.setting.startswith("unix://"):
                url = self.setting
            else:
                url = podman_service.ensure(self.work_dir)
                self.started_service = True
            client = docker.DockerClient(base_url=url, timeout=300)
            try:
                client.ping()
            except Exception as e:  # the SDK raises requests' and its own errors
                raise EngineError(f"the container engine at {url} does not answer: {e}") from e
            self._url, self._client = url, client
            return client

    @property
    def worker_id(self) -> str:
        """The worker's id (`<work-dir>/worker-id`, written before any job arrives)."""
        try:
            return (self.work_dir / "worker-id").read_text().strip() or "worker"
        except OSError:
            return "worker"

    @property
    def url(self) -> str:
        assert self._url is not None
        return self._url

    def image(self, ref: str) -> ImageInfo:
        """The local image `ref` names, pulled first when the engine lacks it."""
        import docker

        client = self.client()
        try:
            img = client.images.get(ref)
        except docker.errors.ImageNotFound:
            if self.pull == "no":
                raise EngineError(
                    f"image {ref!r} is not on this worker, which does not pull "
                    "(--container-pull no)"
                ) from None
            try:
                img = client.images.pull(ref)
                self.can_pull = True
            except docker.errors.APIError as e:
                self.can_pull = self.pull == "yes"  # auto: what the last pull said
                raise EngineError(
                    f"image {ref!r} is not on this worker and pulling it failed: "
                    f"{e.explanation or e}"
                ) from None
            finally:
                self._changed.set()
        except docker.errors.APIError as e:
            raise EngineError(f"cannot look up image {ref!r}: {e.explanation or e}") from None
        return ImageInfo(
            ref=ref,
            image_id=img.id,
            repo_digests=tuple(img.attrs.get("RepoDigests") or ()),
            size_bytes=int(img.attrs.get("Size") or 0),
        )

    def prepare(self, spec: RunSpec, image: str, network: str) -> tuple[RunSpec, str]:
        """The spec of a container run and the log line naming the image used.

        On a worker with --run-uids the payload runs as the run's uid inside the container:
        the supervisor writes it into `container.json` when it takes the uid, and starts
        the wrapper itself as the worker's user, as only that user reaches the engine's
        socket (rbs.executor.runuser.Seat)."""
        info = self.image(image)
        self._collect(info)
        container = {
            "engine": self.url,
            "runtime": self.runtime,
            "image": info.image_id,
            "ref": image,
            "network": network,
            # Named per worker: workers of other clusters may share the host's engine.
            "name": f"rbs-{self.worker_id}-{spec.key}".replace("/", "-"),
            "user": f"{os.getuid()}:{os.getgid()}",
        }
        config = {
            **container,
            "cwd": spec.cwd,
            "cpus": spec.cpus,
            "memory_bytes": spec.memory_bytes,
            "pids_max": spec.pids_max,
            "gpus": list(spec.gpus or ()),
            "grace_s": spec.grace_s,
            "stdin": spec.stdin,
            "pty": spec.pty,
        }
        path = os.path.join(os.path.dirname(spec.spool), "container.json")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(config, f)
        argv = (sys.executable, "-m", "rbs.executor.container_exec", path, "--")
        repo = f", {info.repo_digests[0]}" if info.repo_digests else ""
        who = "the run's uid" if spec.users is not None else f"user {container['user']}"
        line = (
            f"container: image {image} ({info.image_id}{repo}) on {self.runtime}, "
            f"network {network}, as {who}, {spec.cwd} mounted at the same path"
        )
        users = None if spec.users is None else {**spec.users, "container": path}
        new = dataclasses.replace(spec, argv=argv + spec.argv, container=container, users=users)
        return new, line

    def _collect(self, used: ImageInfo) -> None:
        """Note the image a run uses; past the cap, remove the least recently used images
        this worker's jobs ran (never one a container still uses; never others)."""
        import docker

        path = podman_service.folder(self.work_dir) / USAGE_FILE
        with self._gc_lock:
            try:
                usage: dict[str, Any] = json.loads(path.read_text())
            except (OSError, ValueError):
                usage = {}
            usage[used.image_id] = {"ref": used.ref, "size": used.size_bytes, "used": time.time()}
            total = sum(int(u["size"]) for u in usage.values())
            cap = self.cache_max_bytes
            if cap is not None and total > cap:
                client = self.client()
                busy = {c.attrs.get("Image") for c in client.containers.list(all=True)}
                for image_id, u in sorted(usage.items(), key=lambda kv: kv[1]["used"]):
                    if total <= cap:
                        break
                    if image_id == used.image_id or image_id in busy:
                        continue
                    try:
                        client.images.remove(image_id, force=False)
                    except docker.errors.ImageNotFound:
                        pass
                    except docker.errors.APIError as e:
                        log.info("keeping image %s: %s", u["ref"], e.explanation or e)
                        continue
                    log.info(
                        "removed image %s (%s, %d bytes): this worker's images passed %d bytes",
                        u["ref"],
                        image_id,
                        u["size"],
                        cap,
                    )
                    total -= int(u["size"])
                    del usage[image_id]
                    self._changed.set()
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(usage, sort_keys=True))
            os.replace(tmp, path)

    def images_report(self) -> ImagesReport:
        """The engine's images and whether a pull may work (blocking: on a thread). Until
        a pull is tried, a pull is expected to work when the default registry answers."""
        if self.can_pull is None:
            self.can_pull = answers(REGISTRY)
        if self.runtime == "podman" and not podman_service.answers(
            podman_service.socket_path(self.work_dir)
        ):
            # No service yet (it starts at the first container job): podman's CLI lists.
            found = podman_service.list_images(self.work_dir)
        else:
            found = [img.attrs for img in self.client().images.list()]
        images = []
        for a in found:
            tags = a.get("RepoTags") or a.get("Names") or ()
            image_id = str(a.get("Id") or "")
            images.append(
                LocalImageInfo(
                    image_id=image_id if image_id.startswith("sha256:") else f"sha256:{image_id}",
                    names=(
                        *(t for t in tags if not t.startswith("<none>")),
                        *(a.get("RepoDigests") or ()),
                    ),
                    size_bytes=int(a.get("Size") or 0),
                )
            )
        return ImagesReport(images=tuple(images), can_pull=self.can_pull)

    def report_images(self, send: Callable[[ImagesReport], Any], up: Callable[[], bool]) -> None:
        """Send the images when a stream opens (`up` turns true), after each pull and
        removal, and when a listing every RELIST_S differs from the last one sent, from a
        thread of its own, until `stop`."""

        def loop() -> None:
            was, last, listed = False, None, time.monotonic()
            while not self._stopped.is_set():
                now = up()
                due = time.monotonic() - listed >= RELIST_S
                if now and (not was or self._changed.is_set() or due):
                    fresh = not was or self._changed.is_set()
                    self._changed.clear()
                    listed = time.monotonic()
                    try:
                        report = self.images_report()
                        if fresh or report != last:
                            send(report)
                            last = report
                    except Exception as e:  # the engine's and the SDK's errors alike
                        log.warning("cannot list the container engine's images: %s", e)
                was = now
                (self._changed if now else self._stopped).wait(REPORT_POLL_S)

        threading.Thread(target=loop, name="images", daemon=True).start()

    def stop(self) -> None:
        """End the podman service this worker started."""
        self._stopped.set()
        if self.started_service:
            podman_service.stop(self.work_dir)


S = TypeVar("S")


def answers(address: tuple[str, int], timeout: float = 3.0) -> bool:
    """Whether a TCP connection to (host, port) opens within `timeout`."""
    try:
        socket.create_connection(address, timeout=timeout).close()
    except OSError:
        return False
    return True


def runtimes_for(settings: ContainerSettings) -> tuple[str, ...]:
    """What a worker with `--containers SETTING` advertises: the scheduler places
    container jobs only on workers that name a runtime."""
    setting = settings.engine
    if setting == NONE or (setting == AUTO and not podman_service.installed()):
        return ()
    return ("docker",) if setting.startswith("unix://") else ("podman",)


def with_containers(setup: S, config: Any, worker: Any = None) -> S:
    """A worker's HostSetup with the engine its `--containers` names (ValueError).

    The podman service it starts ends with the daemon's plain stop (atexit), and lives on
    for the next daemon after `--leave-jobs-running` or a kill: its runs' output flows
    through it. Given the `worker` (in its event loop), the engine reports its images
    down each stream the worker opens (`ContainerEngine.report_images`)."""
    engine = ContainerEngine.for_worker(config.work_dir, config.containers)
    if engine is not None and not config.leave_jobs_running:
        atexit.register(engine.stop)
    if engine is not None and worker is not None:
        loop = asyncio.get_running_loop()
        engine.report_images(
            lambda r: loop.call_soon_threadsafe(worker.send, r), worker.connected.is_set
        )
    return dataclasses.replace(setup, containers=engine)  # type: ignore[type-var]
