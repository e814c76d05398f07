"""A job whose afterok dependency failed is cancelled naming the dependency, through the
server: its reason, its changes (what `rbs job show` prints) and a `sys` line of its log."""

from __future__ import annotations

from jobs_harness import JobCluster

from rbs.client.jobs import JobsClient


def test_a_failed_afterok_dependency_is_named(cluster: JobCluster, client: JobsClient) -> None:
    first = client.submit(["sh", "-c", "exit 3"], name="first")
    ok = client.submit(["true"], name="ok")
    after = client.submit(["echo", "never"], deps=f"afterok:{ok},afterok:{first}")
    assert cluster.wait(first).state == "FAILED"
    info = cluster.wait(after)
    assert (info.state, info.reason) == ("CANCELLED", "DependencyNeverSatisfied")
    want = f"dependency afterok:{first} can never be satisfied: job {first} ended FAILED"
    changes = [c["action"] for c in client.show(after).raw["changes"]]
    assert changes == [f"cancelled: {want}"]
    deps = {d["dep"]: d["state"] for d in client.show(after).raw["dependencies"]}
    assert deps[f"afterok:{first}"] == "FAILED"
    lines = [x.text for x in client.logs(after) if x.stream == "sys"]
    assert f"{want}; cancelled" in lines
