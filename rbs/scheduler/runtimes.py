"""Container jobs in the job core: which workers may run an image, and the refusal at submit.

A worker that registers with a container runtime (`WorkerUp.container_runtimes`) is
marked `WorkerCapacity.containers` (not journaled: a worker says it at each Register);
`placement.place` gives a job that names an image only such workers. A job's shape
carries whether it needs one, so a container job that cannot start closes no shape of
plain jobs for the pass. docs/design/containers.md.
"""

from __future__ import annotations

from collections.abc import Iterable

from rbs.model import JobManifest
from rbs.scheduler.state import SchedulerError
from rbs.scheduler.workers import WorkerCapacity


def refuse_without_runtime(m: JobManifest, workers: Iterable[WorkerCapacity]) -> None:
    """A job that names an image is refused while no live worker has a runtime."""
    if m.container is None or any(w.alive and w.containers for w in workers):
        return
    raise SchedulerError(
        f"--container {m.container}: no worker can run containers (none has a container "
        "runtime); start a worker where podman and runc are installed, or with "
        "--containers unix:///PATH/TO/docker.sock"
    )
