"""`--begin WHEN` read in a given time zone: spans, ISO times, day words, and bad values."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from rbs.cli.when import BeginError, parse_begin

PARIS = ZoneInfo("Europe/Paris")
# 2026-07-18 20:00 in Paris (UTC+2 in summer).
NOW = dt.datetime(2026, 7, 18, 20, 0, tzinfo=PARIS).timestamp()


def at(*fields: int, tz: dt.tzinfo = PARIS) -> float:
    return dt.datetime(*fields, tzinfo=tz).timestamp()  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30m", 1800),
        ("2h30m", 9000),
        ("1hour", 3600),
        ("30min", 1800),
        ("now+1h", 3600),
        ("now + 90s", 90),
        ("+2d", 172800),
        ("1 hour 30 minutes", 5400),
        ("now", 0),
    ],
)
def test_spans_count_from_now(text: str, seconds: int) -> None:
    assert parse_begin(text, NOW, PARIS) == NOW + seconds


def test_iso_times_are_local_unless_they_name_a_zone() -> None:
    assert parse_begin("2026-07-18T20:02:48", NOW, PARIS) == at(2026, 7, 18, 20, 2, 48)
    assert parse_begin("2026-07-18T20:02:48Z", NOW, PARIS) == at(2026, 7, 18, 20, 2, 48, tz=dt.UTC)
    assert parse_begin("2026-07-18T20:02:48+05:00", NOW, PARIS) == at(
        2026, 7, 18, 15, 2, 48, tz=dt.UTC
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("today at 11pm", (2026, 7, 18, 23, 0)),
        ("tonight at 2am", (2026, 7, 19, 2, 0)),  # the next 02:00
        ("tonight at 10:30pm", (2026, 7, 18, 22, 30)),
        ("tomorrow 09:00", (2026, 7, 19, 9, 0)),
        ("tomorrow at noon", (2026, 7, 19, 12, 0)),
        ("Tomorrow   at 9AM", (2026, 7, 19, 9, 0)),
        ("21:15", (2026, 7, 18, 21, 15)),
        ("7pm", (2026, 7, 19, 19, 0)),  # a time alone: its next occurrence
        ("today at 8am", (2026, 7, 18, 8, 0)),  # past: the caller starts the job at once
    ],
)
def test_day_words_and_times_of_day(text: str, expected: tuple[int, ...]) -> None:
    assert parse_begin(text, NOW, PARIS) == at(*expected)


def test_a_day_word_across_a_dst_change_keeps_the_wall_clock() -> None:
    # Paris leaves summer time on 2026-10-25 at 03:00: tomorrow 09:00 is 25 h away.
    now = dt.datetime(2026, 10, 24, 9, 0, tzinfo=PARIS).timestamp()
    assert parse_begin("tomorrow 09:00", now, PARIS) - now == 25 * 3600


@pytest.mark.parametrize(
    "text", ["", "soon", "tomorrow at 25:00", "13pm", "now+", "now+5x", "30 parsecs", "12"]
)
def test_bad_values_name_the_flag_and_the_forms(text: str) -> None:
    with pytest.raises(BeginError) as e:
        parse_begin(text, NOW, PARIS, flag="--schedule")
    assert str(e.value).startswith(f"--schedule {text!r}: ")
    assert "tomorrow 09:00" in str(e.value)
