"""Run users: the --run-uids range, the host-wide uid pool, what a host without them is told."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rbs.executor import runuser
from rbs.executor.runuser import NoFreeUid, RunUserError, RunUsers, UidPool, UidRange


def test_a_range_is_first_dash_last_and_a_bad_one_names_the_flag() -> None:
    assert runuser.parse_range("200000-265535") == UidRange(first=200000, last=265535)
    for bad in ("200000", "a-b", "5-3", "0-10", "-5", f"1-{2**32}"):
        with pytest.raises(RunUserError, match="--run-uids"):
            runuser.parse_range(bad)


def test_a_range_holding_a_user_of_the_host_or_the_worker_is_refused() -> None:
    with pytest.raises(RunUserError, match="uid 65534 is the user 'nobody' of this host"):
        runuser.check_range(UidRange(first=65534, last=65600))
    runuser.check_range(UidRange(first=200000, last=265535))


def test_switching_users_needs_root_and_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert runuser.setup(None, tmp_path) is None
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(RunUserError, match="must run as root"):
        runuser.setup("200000-265535", tmp_path)
    text = runuser.no_users_warning()
    assert "uid 1000" in text and "run the worker as root with --run-uids" in text
    assert "token" in text and "/proc/PID/environ" in text and "/tmp is shared" in text


def test_runs_must_be_able_to_reach_the_work_dir(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    (closed / "deeper").mkdir(parents=True)
    closed.chmod(0o700)
    with pytest.raises(RunUserError, match=f"{closed} is not searchable by other users"):
        runuser.check_reachable(closed / "deeper" / "work")
    runuser.check_reachable(Path("/usr/share/rbs-worker"))  # /usr and / are searchable


def test_two_pools_on_one_host_never_hand_out_one_uid(tmp_path: Path) -> None:
    users = RunUsers(uids=UidRange(first=300000, last=300002), lock_dir=str(tmp_path))
    a, b = UidPool(users), UidPool(users)
    taken = [a.acquire(), b.acquire(), a.acquire()]
    assert sorted(taken) == [300000, 300001, 300002]
    with pytest.raises(NoFreeUid, match="all 3 uids"):
        b.acquire()
    a.release(taken[0])
    assert b.acquire() == taken[0]


def test_the_wrapper_drops_groups_and_privileges_and_mounts_tmp_when_asked() -> None:
    argv = runuser.wrap(["/bin/true"], 200001, None)
    assert argv[0].endswith("setpriv") and argv[-2:] == ["--", "/bin/true"]
    assert {"--reuid=200001", "--regid=200001", "--clear-groups", "--no-new-privs"} <= set(argv)
    mounted = runuser.wrap(["/bin/true"], 200001, "/w/jobs/1/tmp")
    assert mounted[0].endswith("unshare") and "/w/jobs/1/tmp" in mounted
    assert mounted[mounted.index("/w/jobs/1/tmp") + 1 :] == argv
