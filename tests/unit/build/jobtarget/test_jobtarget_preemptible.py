"""`preemptible = True` on the job rules, as `rbs job submit --preemptible`."""

from __future__ import annotations

from jobrule_ws import Analyze

from rbs.build.jobtarget import make_manifest
from rbs.model import Digest


def test_preemptible_is_a_rule_attribute(analyze_job: Analyze) -> None:
    build = 'batch_job(name = "job", binary = ":train", partition = "low", preemptible = True)\n'
    m = make_manifest(analyze_job(build), Digest.of(b"tree"))
    assert m.preemptible and m.queue == "low"
    plain = make_manifest(
        analyze_job('batch_job(name = "job", binary = ":train")\n'), Digest.of(b"tree")
    )
    assert not plain.preemptible
