"""Dependencies (afterok/afterany/afternotok, never-satisfiable) and multi-node gangs."""

from __future__ import annotations

from sched_harness import Harness, env, kills, manifest, starts

from rbs.model import JobState, KillReason
from rbs.scheduler.instructions import Note
from rbs.wire.specs import parse_array, parse_dependencies


def _deps(text: str):  # type: ignore[no-untyped-def]
    return parse_dependencies(text)


def test_afterok_chain_of_20_runs_in_order() -> None:
    h = Harness()
    h.up("w", slots=4)
    ids = [h.submit()]
    for _ in range(19):
        ids.append(h.submit(dependencies=_deps(f"afterok:{ids[-1]}")))
    assert h.reason(ids[1]) == "Dependency" and h.state(ids[1]) is JobState.PENDING
    for i, jid in enumerate(ids):
        out = h.exit(jid)
        if i + 1 < len(ids):
            (start,) = starts(out)
            assert start.run.job_id == ids[i + 1]
    assert all(h.state(j) is JobState.COMPLETED for j in ids)


def test_never_satisfiable_dependencies_cancel_and_cascade() -> None:
    h = Harness()
    h.up("w", slots=1)
    a = h.submit()
    ok = h.submit(dependencies=_deps(f"afterok:{a}"))
    chained = h.submit(dependencies=_deps(f"afterok:{ok}"))
    after_fail = h.submit(dependencies=_deps(f"afterany:{ok}"))
    notok = h.submit(dependencies=_deps(f"afternotok:{a}"))
    h.exit(a, code=1)
    assert h.state(ok) is JobState.CANCELLED and h.reason(ok) == "DependencyNeverSatisfied"
    assert (
        h.state(chained) is JobState.CANCELLED and h.reason(chained) == "DependencyNeverSatisfied"
    )
    # afterany is satisfied by a cancelled job; afternotok by a failed one.
    assert {h.state(after_fail), h.state(notok)} == {JobState.RUNNING, JobState.PENDING}
    # A dependency on an already-completed job that needs a failure can never hold.
    done = h.submit()
    while h.state(done) is not JobState.COMPLETED:
        running = [j for j in (after_fail, notok, done) if h.state(j) is JobState.RUNNING]
        h.exit(running[0])
    late = h.submit(dependencies=_deps(f"afternotok:{done}"))
    assert h.state(late) is JobState.CANCELLED and h.reason(late) == "DependencyNeverSatisfied"


def test_dependency_on_an_array_waits_for_every_task() -> None:
    h = Harness()
    h.up("w", slots=8)
    arr = h.submit(array=parse_array("0-2"))
    after = h.submit(dependencies=_deps(f"afterok:{arr}"))
    h.exit(arr, index=0)
    h.exit(arr, index=1)
    assert h.state(after) is JobState.PENDING
    (start,) = starts(h.exit(arr, index=2))
    assert start.run.job_id == after


def test_cancelled_dependency_target_with_afterok_cancels_dependent() -> None:
    h = Harness()
    h.up("w", slots=1)
    h.submit()
    target = h.submit()
    dep = h.submit(dependencies=_deps(f"afterok:{target}"))
    h.cancel(str(target))
    assert h.reason(dep) == "DependencyNeverSatisfied"


def test_gang_starts_all_nodes_together_with_rendezvous_env() -> None:
    h = Harness()
    h.up("a", cpus=4, slots=1)
    h.up("b", cpus=4, slots=1)
    busy = h.submit(res=(4, 1, 0))
    jid = h.submit(nodes=2, res=(4, 1, 0))
    assert h.state(jid) is JobState.PENDING and h.reason(jid) == "Resources"
    out = h.exit(busy)  # all or nothing: one free worker was not enough
    ss = starts(out)
    assert sorted(s.worker_id for s in ss) == ["a", "b"]
    by_rank = {s.run.rank: s for s in ss}
    e0, e1 = env(by_rank[0]), env(by_rank[1])
    assert e0["RBS_NNODES"] == e0["WORLD_SIZE"] == "2"
    assert (e0["RBS_NODE_RANK"], e0["RANK"], e1["RBS_NODE_RANK"], e1["RANK"]) == (
        "0",
        "0",
        "1",
        "1",
    )
    assert (
        e0["RBS_NODELIST"] == e1["RBS_NODELIST"] == ",".join(by_rank[r].nodelist[r] for r in (0, 1))
    )
    master = by_rank[0].nodelist[0]
    assert e0["MASTER_ADDR"] == e1["RBS_MASTER_ADDR"] == master
    assert e0["MASTER_PORT"] == e1["RBS_MASTER_PORT"] == "29500"


def test_gang_ends_with_rank_zero_and_peers_hold_resources_until_they_exit() -> None:
    h = Harness()
    for w in ("a", "b", "c"):
        h.up(w, cpus=2, slots=1)
    jid = h.submit(nodes=3, res=(2, 1, 0))
    waiting = h.submit(res=(2, 1, 0))
    assert h.state(waiting) is JobState.PENDING
    run = h.sched.job(jid).runs[0]
    rank0 = run.nodes[0].worker_id
    out = h.exit(jid, rank=0, worker=rank0, code=0)
    assert h.state(jid) is JobState.COMPLETED
    peer_kills = kills(out)
    assert sorted(k.run.rank for k in peer_kills) == [1, 2]
    assert all(k.reason is KillReason.GANG_PEER_ENDED for k in peer_kills)
    # Rank 0's worker is free now; the peers' workers stay held until they exit.
    (start,) = starts(out)
    assert start.worker_id == rank0
    assert not starts(h.exit(jid, rank=1, worker=run.nodes[1].worker_id, code=143, signal=15))
    assert h.state(jid) is JobState.COMPLETED


def test_elastic_gang_takes_what_is_free_between_min_and_max() -> None:
    h = Harness()
    for w in ("a", "b", "c"):
        h.up(w, cpus=1, slots=1)
    jid = h.submit(elastic=True, min_nodes=2, max_nodes=5, res=(1, 1, 0))
    (run,) = h.sched.job(jid).runs
    assert len(run.nodes) == 3


def test_gang_peer_loss_requeues_the_whole_gang() -> None:
    h = Harness()
    for w in ("a", "b", "c"):
        h.up(w, cpus=1, slots=1)
    jid = h.submit(nodes=2, res=(1, 1, 0))
    run = h.sched.job(jid).runs[0]
    peer = run.nodes[1].worker_id
    out = h.down(peer)
    survivor_kill = [k for k in kills(out) if k.run.attempt == 1]
    assert [k.reason for k in survivor_kill] == [KillReason.NODE_FAIL]
    # Only one worker is free (the survivor still holds its node), so attempt 2 waits...
    assert h.state(jid) is JobState.PENDING
    (survivor,) = survivor_kill
    out = h.exit(jid, rank=0, worker=survivor.worker_id, code=143, signal=15)
    # ...and starts once the old rank 0 has really stopped.
    assert {s.run.attempt for s in starts(out)} == {2}
    assert h.sched.job(jid).attempts == 2


def test_gangs_on_one_worker_get_distinct_master_ports() -> None:
    h = Harness()
    h.up("a", cpus=8, slots=4)
    h.up("b", cpus=8, slots=4)
    j1 = h.submit(nodes=2)
    j2 = h.submit(nodes=2)
    p1 = h.sched.job(j1).runs[0].nodes[0].master_port
    p2 = h.sched.job(j2).runs[0].nodes[0].master_port
    assert p1 is not None and p2 is not None
    r1 = h.sched.job(j1).runs[0].nodes[0].worker_id
    r2 = h.sched.job(j2).runs[0].nodes[0].worker_id
    assert r1 != r2 or p1 != p2


def test_array_and_gang_together_are_refused_by_the_manifest() -> None:
    import pytest

    with pytest.raises(ValueError, match="cannot also be a multi-node gang"):
        manifest(nodes=2, array=parse_array("0-1"))


def _gang(h: Harness, n: int = 3) -> tuple[int, list[str]]:
    for w in ("a", "b", "c")[:n]:
        h.up(w, cpus=2, slots=1)
    jid = h.submit(nodes=n, res=(2, 1, 0))
    return jid, [node.worker_id for node in h.sched.job(jid).runs[0].nodes]


def test_a_gang_ends_with_the_highest_exit_code_of_its_ranks_as_srun_reports() -> None:
    h = Harness()
    jid, where = _gang(h)
    h.exit(jid, rank=2, worker=where[2], code=3)
    h.exit(jid, rank=1, worker=where[1], code=7)
    assert h.state(jid) is JobState.RUNNING  # rank 0 still runs: the gang goes on
    h.exit(jid, rank=0, worker=where[0], code=0)
    view = h.sched.job(jid)
    assert (view.state, view.exit_code, view.reason) == (JobState.FAILED, 7, "exit 7")


def test_a_rank_killed_by_a_signal_fails_the_gang_and_peers_killed_after_rank_0_do_not() -> None:
    h = Harness()
    jid, where = _gang(h)
    h.exit(jid, rank=1, worker=where[1], code=0, signal=11)
    h.exit(jid, rank=0, worker=where[0], code=0)
    assert h.state(jid) is JobState.FAILED
    h2 = Harness()
    ok, where2 = _gang(h2)
    h2.exit(ok, rank=0, worker=where2[0], code=0)
    # The peers' SIGTERM exits come after the gang ended: they change nothing.
    h2.exit(ok, rank=1, worker=where2[1], code=143, signal=15)
    h2.exit(ok, rank=2, worker=where2[2], code=143, signal=15)
    assert (h2.state(ok), h2.sched.job(ok).exit_code) == (JobState.COMPLETED, 0)


def test_a_never_satisfiable_dependency_is_named_in_the_changes_and_the_log() -> None:
    h = Harness()
    h.up("w", slots=2)
    a = h.submit()
    b = h.submit()
    dep = h.submit(dependencies=_deps(f"afterok:{a},afterok:{b}"))
    out = h.exit(b, code=2)
    assert (h.state(dep), h.reason(dep)) == (JobState.CANCELLED, "DependencyNeverSatisfied")
    (change,) = h.sched.job(dep).changes
    want = f"dependency afterok:{b} can never be satisfied: job {b} ended FAILED"
    assert change.action == f"cancelled: {want}"
    notes = [i for i in out if isinstance(i, Note) and i.job_id == dep]
    assert [n.text for n in notes] == [want + "; cancelled"]
    late = h.submit(dependencies=_deps(f"afterok:{b}"))  # at submit, likewise
    assert h.sched.job(late).changes[0].action == f"cancelled: {want}"
