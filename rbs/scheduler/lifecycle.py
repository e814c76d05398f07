"""How runs start and end: env building, exits, retries, requeues, worker loss, dependencies."""

from __future__ import annotations

import heapq
import logging

from rbs.model import DepKind, JobState, KillReason
from rbs.scheduler import endings
from rbs.scheduler.compaction import state_of
from rbs.scheduler.instructions import Start
from rbs.scheduler.state import Job, Run, SchedState
from rbs.scheduler.workers import WorkerCapacity

log = logging.getLogger(__name__)

NEVER = "DependencyNeverSatisfied"
DEADLINE_EXPIRED = "DeadlineExpired"
_ENDING_STATE = {
    KillReason.TIMEOUT: JobState.TIMEOUT,
    KillReason.CANCEL: JobState.CANCELLED,
}


# ---- readiness: dependencies and begin times


def dependency_status(st: SchedState, job: Job) -> str:
    """'ok' when every dependency holds, else 'wait'; 'never' when one never can, which the
    job's changes and log then name (the caller cancels it)."""
    status = "ok"
    for dep in job.manifest.dependencies:
        target = state_of(st, dep.job_id)
        if not target.terminal:
            status = "wait"
        elif (dep.kind is DepKind.AFTEROK and target is not JobState.COMPLETED) or (
            dep.kind is DepKind.AFTERNOTOK and target is JobState.COMPLETED
        ):
            endings.note_never(st, job, str(dep), dep.job_id, target)
            return "never"
    return status


def admit(st: SchedState, job: Job) -> None:
    """Place a new or restored non-terminal job: waiting on deps, on its begin time, or ready."""
    if job.manifest.deadline is not None and job.start_time is None:
        heapq.heappush(st.expiry_heap, (job.manifest.deadline, job.id))
    status = dependency_status(st, job)
    if status == "never":
        cancel_pending_job(st, job, NEVER)
        return
    if status == "wait":
        for dep in job.manifest.dependencies:
            st.dependents.setdefault(dep.job_id, []).append(job.id)
        st.set_state(job, job.state, "Dependency")
        return
    begin = job.manifest.begin_time
    if begin is not None and begin > st.now and job.eligible_time is None:
        heapq.heappush(st.begin_heap, (begin, job.id))
        st.set_state(job, job.state, "BeginTime")
        return
    if job.eligible_time is None:
        job.eligible_time = st.now
        st.touch(job)
    sync_ready(st, job)


def expire_deadlines(st: SchedState) -> None:
    """Cancel the jobs whose --deadline passed before any of their tasks started."""
    while st.expiry_heap and st.expiry_heap[0][0] <= st.now:
        _, job_id = heapq.heappop(st.expiry_heap)
        job = st.jobs.get(job_id)
        if job is None:
            continue  # ended and forgotten
        if not job.state.terminal and job.start_time is None and not job.runs:
            cancel_pending_job(st, job, DEADLINE_EXPIRED)
            st.need_pass = True


def is_ready(job: Job) -> bool:
    """Eligible, with tasks to start, and not held by its array's `%N` throttle."""
    if not job.pool.pending or job.eligible_time is None or job.state.terminal:
        return False
    throttle = job.manifest.array.throttle if job.manifest.array is not None else None
    return throttle is None or len(job.runs) < throttle


def could_start(st: SchedState, job: Job) -> bool:
    """Whether enough workers have room for one task of the job now, reservations aside."""
    lo = job.manifest.node_range[0]
    fitting = enumerate(st.free.fitting(job.manifest.resources), 1)
    return any(found >= lo for found, _ in fitting)


def sync_ready(st: SchedState, job: Job) -> None:
    """Keep the ready queue holding exactly the ready jobs (`is_ready`)."""
    if is_ready(job):
        if job.id not in st.ready:
            st.ready.add(job)
            # A job no worker has room for now, reservations aside, cannot start in a
            # pass run for it, nor let anything else start (capacity did not grow): the
            # next change that frees resources runs the pass it waits for.
            queue = st.config.queue(job.manifest.queue)
            if could_start(st, job) or (queue is not None and queue.preempts):
                st.need_pass = True  # (a job that may preempt needs its pass too)
            elif job.state is JobState.PENDING and not st.need_pass:
                # What that pass would have said of it.
                lo = job.manifest.node_range[0]
                enough = st.capable_count(job.manifest.resources) >= lo
                why = "ReqNodeNotAvail" if st.live_workers else st.waiting_reason()
                st.set_state(job, job.state, "Resources" if enough else why)
                job.eval_pass = st.pass_no
                return
            if job.state is JobState.PENDING and job.reason in (None, "Dependency", "BeginTime"):
                st.set_state(job, job.state, st.waiting_reason())
    else:
        st.ready.discard(job.id)


def on_terminal(st: SchedState, job: Job) -> None:
    """A job ended: settle its dependents, cascading through chains without recursion."""
    work = [job.id]
    while work:
        ended = work.pop()
        for dep_id in st.dependents.pop(ended, []):
            dependent = st.jobs.get(dep_id)  # None: it ended (cancelled) and was forgotten
            if dependent is None or dependent.state.terminal or dependent.reason != "Dependency":
                continue
            status = dependency_status(st, dependent)
            if status == "never":
                cancel_pending_job(st, dependent, NEVER, cascade=False)
                work.append(dependent.id)
            elif status == "ok":
                admit(st, dependent)


def cancel_pending_job(st: SchedState, job: Job, reason: str | None, cascade: bool = True) -> None:
    job.pool.cancel_all()
    st.ready.discard(job.id)
    job.reason = reason
    st.refresh(job)
    if cascade and job.state.terminal:
        on_terminal(st, job)


# ---- starting


def start_run(st: SchedState, job: Job, placement: list[WorkerCapacity]) -> Run:
    raw, attempt, retries, restarts = job.pool.pop()
    index = job.index_of(raw)
    run = Run(job.id, index, attempt, retries, st.now, restarts)
    res = job.manifest.resources
    gang = job.manifest.node_range[1] > 1
    for rank, worker in enumerate(placement):
        run.nodes.append(worker.allocate(run.node_key(rank), res, port=gang and rank == 0))
    if job.time_limit is not None:
        run.deadline = st.now + job.time_limit
        st.push_deadline(job, run)
    job.runs[raw] = run
    st.sync_release(run)
    st.pass_starts += 1
    job.attempts = max(job.attempts, attempt)
    job.workers = tuple(w.worker_id for w in placement)
    st.touch_run(run)
    if not is_ready(job):
        st.ready.discard(job.id)
    st.refresh(job)
    _emit_starts(st, job, run, placement)
    return run


def _emit_starts(st: SchedState, job: Job, run: Run, placement: list[WorkerCapacity]) -> None:
    m = job.manifest
    base = dict(m.env)
    base["RBS_JOB_ID"] = str(job.id)
    base["RBS_JOB_NAME"] = m.name
    base["RBS_QUEUE"] = m.queue
    base["RBS_ATTEMPT"] = str(run.attempt)
    if run.index is not None:
        base["RBS_ARRAY_JOB_ID"] = str(job.id)
        base["RBS_ARRAY_INDEX"] = str(run.index)
        base["RBS_TASK_ID"] = f"{job.id}_{run.index}"
    gang = m.node_range[1] > 1
    nodelist = tuple(w.address for w in placement)
    master_addr = placement[0].address
    master_port = run.nodes[0].master_port
    if gang:
        base["RBS_NODELIST"] = ",".join(nodelist)
        base["RBS_NNODES"] = base["WORLD_SIZE"] = str(len(placement))
        base["RBS_MASTER_ADDR"] = base["MASTER_ADDR"] = master_addr
        base["RBS_MASTER_PORT"] = base["MASTER_PORT"] = str(master_port)
    for node, worker in zip(run.nodes, placement, strict=True):
        env = dict(base)
        # Always set, also to "": a job without GPUs must not see the worker's cards.
        env["CUDA_VISIBLE_DEVICES"] = ",".join(node.gpus)
        if gang:
            env["RBS_NODE_RANK"] = env["RANK"] = str(node.rank)
        st.actions.append(
            Start(
                run=run.ref(node.rank),
                worker_id=worker.worker_id,
                manifest=m,
                cpu_millis=node.cpu_millis,
                memory_bytes=node.memory_bytes,
                gpus=node.gpus,
                nodelist=nodelist,
                master_addr=master_addr,
                master_port=master_port,
                time_limit=job.time_limit,
                env=tuple(sorted(env.items())),
            )
        )


# ---- stopping and ending


def stop_run(st: SchedState, run: Run, reason: KillReason) -> None:
    """Ask every live node of a run to stop; the run ends when rank 0 reports its exit."""
    final = (KillReason.CANCEL, KillReason.TIMEOUT)
    if run.ending in final or (run.ending is not None and reason not in final):
        return  # a cancel or timeout already decided how this run ends
    run.ending = reason
    st.sync_release(run)
    st.touch_run(run)
    for node in run.live_nodes:
        st.kill(run, node, reason)


def release_node(st: SchedState, run: Run, rank: int) -> None:
    node = run.nodes[rank]
    if node.exited:
        return
    worker = st.workers.get(node.worker_id)
    if worker is not None:
        worker.release(run.node_key(rank))
    run.mark_exited(rank)
    st.sync_release(run)
    st.touch_run(run)
    st.need_pass = True


def node_exited(
    st: SchedState,
    job: Job,
    run: Run,
    rank: int,
    exit_code: int,
    signal: int | None,
    oom: bool,
    peak: int | None,
) -> None:
    release_node(st, run, rank)
    if peak is not None:
        run.peak = max(run.peak or 0, peak)
    # Rank 0 ends a gang; each rank that ended before it counts, as srun reports the
    # highest exit code of its tasks (a signal or an OOM kill of any rank, likewise).
    if run.ending is None:
        code = run.exit_code
        run.exit_code = exit_code if code is None else max(code, exit_code)
        if signal is not None and (rank == 0 or run.signal is None):
            run.signal = signal
        run.oom = run.oom or oom
    elif rank == 0:
        run.exit_code, run.signal, run.oom = exit_code, signal, oom
    if rank != 0:
        return
    if run.ending in _ENDING_STATE:
        end_run(st, job, run, _ENDING_STATE[run.ending], KillReason.GANG_PEER_ENDED)
    elif run.ending in (KillReason.REQUEUE, KillReason.PREEMPT, KillReason.NODE_FAIL):
        lost(st, job, run, preempt=run.ending is KillReason.PREEMPT)
    elif run.oom:
        end_run(st, job, run, JobState.OUT_OF_MEMORY, KillReason.GANG_PEER_ENDED)
    elif run.exit_code == 0 and run.signal is None:
        end_run(st, job, run, JobState.COMPLETED, KillReason.GANG_PEER_ENDED)
    else:
        end_run(st, job, run, JobState.FAILED, KillReason.GANG_PEER_ENDED)


def lost(st: SchedState, job: Job, run: Run, preempt: bool = False) -> None:
    """A run that did not end by itself: requeue it, or end it NODE_FAIL / PREEMPTED."""
    if run.ending in _ENDING_STATE:
        end_run(st, job, run, _ENDING_STATE[run.ending], KillReason.NODE_FAIL)
        return
    state = (
        JobState.PREEMPTED if preempt or run.ending is KillReason.REQUEUE else JobState.NODE_FAIL
    )
    if state is JobState.NODE_FAIL:
        # Worker loss spends the task's `restarts`; preemption and requeues spend nothing.
        worker = endings.lost_worker_of(st, run)
        restart = endings.may_restart(job, run)
        if restart:
            endings.note_restart(st, job, run, worker)
        else:
            endings.note_node_fail(st, job, run, worker)
        end_run(st, job, run, state, KillReason.NODE_FAIL, requeue=restart, lost_worker=worker)
        return
    admin = run.ending is KillReason.REQUEUE
    # A preempted run requeues unless its queue's preempt_mode is "cancel".
    queue = st.config.queue(job.manifest.queue)
    mode = queue.preempt_mode if queue is not None and preempt else "requeue"
    requeue = admin or (job.manifest.requeue and mode == "requeue")
    end_run(st, job, run, state, KillReason.NODE_FAIL, requeue=requeue)


def end_run(
    st: SchedState,
    job: Job,
    run: Run,
    state: JobState,
    peer_reason: KillReason,
    requeue: bool = False,
    lost_worker: str | None = None,
) -> None:
    """Close a run with `state`; then retry, requeue, or count the task as finished."""
    raw = job.raw_of(run.index)
    del job.runs[raw]
    st.sync_release(run)
    run.state = state
    run.end_time = st.now
    run.reason = endings.run_reason(job, run, state, lost_worker)
    st.touch_run(run)
    st.need_pass = True
    if run.live_nodes:
        # Other ranks still hold their workers until they report exiting.
        for node in run.live_nodes:
            st.kill(run, node, peer_reason)
        st.draining[run.key] = run
    if run.exit_code is not None:
        # An array reports its highest task exit code, like Slurm's derived exit code.
        keep = job.exit_code if job.is_array and job.exit_code is not None else run.exit_code
        job.exit_code = max(keep, run.exit_code)
    job.signal, job.oom, job.peak = run.signal, run.oom, run.peak
    retry = state in (JobState.FAILED, JobState.OUT_OF_MEMORY) and (
        run.retries_used < job.manifest.max_retries
    )
    if retry:
        job.pool.push_retry(raw, run.attempt + 1, run.retries_used + 1, run.restarts_used)
    elif requeue:
        restarts = run.restarts_used + (state is JobState.NODE_FAIL)
        job.pool.push_retry(raw, run.attempt + 1, run.retries_used, restarts)
    else:
        job.pool.finish(state)
    sync_ready(st, job)
    if st.refresh(job).terminal:
        if job.reason is None:
            job.reason = endings.job_reason(job) if job.is_array else run.reason
        on_terminal(st, job)


def node_lost(st: SchedState, run: Run, rank: int) -> None:
    """The worker of one node is gone: its allocation is dropped, the run treated as lost."""
    release_node(st, run, rank)
    job = st.jobs[run.job_id]
    if job.runs.get(job.raw_of(run.index)) is run:
        lost(st, job, run)
    else:
        settle_draining(st, run)


def settle_draining(st: SchedState, run: Run) -> None:
    if not run.live_nodes:
        st.draining.pop(run.key, None)
        st.touch_run(run)


def worker_lost(st: SchedState, worker: WorkerCapacity) -> None:
    log.info("worker %s lost with %d running nodes", worker.worker_id, len(worker.allocs))
    st.count_worker(worker, -1)
    worker.alive = False
    st.dirty_workers[worker.worker_id] = worker
    for key in list(worker.allocs):
        run = find_run(st, key[0], key[1], key[2])
        if run is None:
            worker.release(key)  # defensive: an allocation without a run
            continue
        node_lost(st, run, key[3])


def find_run(st: SchedState, job_id: int, index: int | None, attempt: int) -> Run | None:
    job = st.jobs.get(job_id)
    if job is None:
        return None
    run = job.runs.get(job.raw_of(index))
    if run is not None and run.attempt == attempt:
        return run
    return st.draining.get((job_id, index, attempt))
