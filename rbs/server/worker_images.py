"""The server's table of each connected worker's container images (their Images reports).

A worker sends its images after Register and after each pull and each removal by its
cache cap; the hub keeps the latest per open stream (`WorkerImages`), forgets it when the
stream ends, shows it in the cluster status, and the job driver refuses at submit a
job naming an image no connected worker with a runtime has while none can pull
(`refusal`). Not journaled: a restarted server learns it again from each worker.
docs/design/containers.md.
"""

from __future__ import annotations

from collections.abc import Iterable

from rbs.scheduler.dispatch import ConnectionState, WorkerView
from rbs.server.job_errors import JobRequestError
from rbs.wire.workers_images import ImagesReport, image_refusal


class WorkerImages:
    """worker id -> its latest ImagesReport, for the workers whose stream is open."""

    def __init__(self) -> None:
        self._by_worker: dict[str, ImagesReport] = {}

    def update(self, worker_id: str, report: ImagesReport) -> None:
        self._by_worker[worker_id] = report

    def forget(self, worker_id: str) -> None:
        self._by_worker.pop(worker_id, None)

    def get(self, worker_id: str) -> ImagesReport:
        return self._by_worker.get(worker_id, ImagesReport())

    def refusal(self, ref: str | None, workers: Iterable[WorkerView]) -> str | None:
        """Why a job naming image `ref` is refused now, or None (also for no image). A
        connected worker with a runtime that has not reported yet may have it."""
        if ref is None:
            return None
        live = (
            w.info.worker_id
            for w in workers
            if w.state is ConnectionState.CONNECTED and w.info.container_runtimes
        )
        return image_refusal(ref, (self._by_worker.get(i) for i in live))

    def check(self, ref: str | None, workers: Iterable[WorkerView]) -> None:
        """`refusal` as the submit's error (JobRequestError, the jobs API's 400)."""
        why = self.refusal(ref, workers)
        if why is not None:
            raise JobRequestError(why)
