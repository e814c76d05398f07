"""What a resubmit does with the job's absolute begin time and deadline."""

from __future__ import annotations

from rbs.client.resubmit import carried_times
from rbs.model import JobManifest

NOW = 1_800_000_000.0


def job(**kw: float) -> JobManifest:
    return JobManifest(name="j", command=("true",), **kw)


def test_a_begin_time_and_a_deadline_that_have_passed_are_dropped_with_a_note() -> None:
    m, notes = carried_times(job(begin_time=NOW - 60, deadline=NOW - 1), {}, NOW)
    assert (m.begin_time, m.deadline) == (None, None)
    assert len(notes) == 2
    assert "begin time" in notes[0] and "has passed; the new job has none" in notes[0]
    assert "deadline" in notes[1] and "has passed" in notes[1]


def test_times_still_ahead_are_kept_and_said_so() -> None:
    m, notes = carried_times(job(begin_time=NOW + 600, deadline=NOW + 3600), {}, NOW)
    assert (m.begin_time, m.deadline) == (NOW + 600, NOW + 3600)
    assert notes[0].startswith("the new job keeps the begin time ")
    assert '--begin "" clears it' in notes[0]
    assert notes[1].startswith("the new job keeps the deadline ")


def test_a_flag_given_to_the_resubmit_takes_over_and_nothing_is_noted() -> None:
    m, notes = carried_times(job(begin_time=NOW - 60, deadline=NOW - 1), {"begin": ""}, NOW)
    assert m.begin_time == NOW - 60  # --begin "" clears it when the flags are applied
    assert m.deadline is None and len(notes) == 1
    plain, none = carried_times(job(), {}, NOW)
    assert (plain.begin_time, plain.deadline, none) == (None, None, [])
