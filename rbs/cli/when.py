"""`--begin WHEN`: a start time as people write it, read in the local time zone, as epoch seconds.

The forms (`BEGIN_FORMS`): a span from now (`30m`, `2h30m`, `1hour`, `30min`, `now+1h`),
an ISO date and time (`2025-07-18T20:02:48`, local unless it ends in `Z` or an offset),
and a day word with a time of day (`today at 11pm`, `tonight at 2am`, `tomorrow 09:00`,
or a time alone: its next occurrence). `tonight at T` is the next T, so `tonight at 2am`
after midnight's passing is the coming night's. Only the standard library is imported:
this runs on `rbs job submit`'s fast path.
"""

from __future__ import annotations

import datetime as dt
import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from datetime import tzinfo

BEGIN_FORMS = (
    "30m, 2h30m, 1hour, 30min, now+1h, an ISO time (2025-07-18T20:02:48, local unless it "
    'ends in Z or +02:00), today at 11pm, tonight at 2am, tomorrow 09:00, or "" for none'
)

_UNITS = {
    "s": 1,
    "sec": 1,
    "secs": 1,
    "second": 1,
    "seconds": 1,
    "m": 60,
    "min": 60,
    "mins": 60,
    "minute": 60,
    "minutes": 60,
    "h": 3600,
    "hr": 3600,
    "hrs": 3600,
    "hour": 3600,
    "hours": 3600,
    "d": 86400,
    "day": 86400,
    "days": 86400,
    "w": 604800,
    "week": 604800,
    "weeks": 604800,
}
_SPAN = re.compile(r"\s*(\d+)\s*([a-z]+)")
_CLOCK = re.compile(r"(\d{1,2})(?::(\d{2}))?(?::(\d{2}))?\s*(am|pm)?")


class BeginError(ValueError):
    """A `--begin` value that is none of the forms; the message names the flag and the forms."""

    def __init__(self, flag: str, value: str, problem: str) -> None:
        super().__init__(f"{flag} {value!r}: {problem}; accepted: {BEGIN_FORMS}")


def _span(text: str) -> int | None:
    """Seconds of `2h30m`, `1hour`, `30 min`; None when `text` is not a span."""
    total, pos = 0, 0
    for _ in range(len(text) + 1):  # each step consumes at least two characters
        if pos == len(text.rstrip()):
            return total if pos else None
        m = _SPAN.match(text, pos)
        if m is None or m.group(2) not in _UNITS:
            return None
        total += int(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    return None


def _clock(text: str) -> dt.time | None:
    """The time of day of `11pm`, `2am`, `9:30am`, `09:00`, `23:15:05`, `noon`, `midnight`."""
    if text in ("noon", "midnight"):
        return dt.time(12 if text == "noon" else 0)
    m = _CLOCK.fullmatch(text)
    if m is None or (m.group(2) is None and m.group(4) is None):
        return None  # a bare number is not a time of day
    hour, minute, second = int(m.group(1)), int(m.group(2) or 0), int(m.group(3) or 0)
    if m.group(4):
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if m.group(4) == "pm" else 0)
    if hour > 23 or minute > 59 or second > 59:
        return None
    return dt.time(hour, minute, second)


def _local(day: dt.date, at: dt.time, tz: tzinfo | None) -> float:
    wall = dt.datetime.combine(day, at)
    # A naive time's timestamp() is the system's local time (mktime), DST included.
    return (wall.replace(tzinfo=tz) if tz is not None else wall).timestamp()


def parse_begin(value: str, now: float, tz: tzinfo | None = None, flag: str = "--begin") -> float:
    """Epoch seconds (UTC) of `value` read at `now` in `tz` (default: this machine's zone).

    A time in the past is returned as it is: the caller says so and starts the job at once.
    """
    text = " ".join(value.strip().lower().split())
    if not text:
        raise BeginError(flag, value, "is empty")
    rel = text.removeprefix("now").strip()
    if text.startswith("now") and (not rel or rel.startswith(("+", "-"))):
        if not rel:
            return now
        seconds = _span(rel[1:].strip())
        if seconds is None:
            raise BeginError(flag, value, f"{rel[1:].strip()!r} is not a span of time")
        return now + seconds * (1 if rel[0] == "+" else -1)
    seconds = _span(text.removeprefix("+").strip())
    if seconds is not None:
        return now + seconds
    try:
        point = dt.datetime.fromisoformat(value.strip())
    except ValueError:
        pass
    else:
        if point.tzinfo is not None:
            return point.timestamp()
        return point.replace(tzinfo=tz).timestamp() if tz is not None else point.timestamp()
    return _day_and_time(text, value, now, tz, flag)


def _day_and_time(text: str, value: str, now: float, tz: tzinfo | None, flag: str) -> float:
    word, _, rest = text.partition(" ")
    if word not in ("today", "tonight", "tomorrow"):
        word, rest = "", text
    rest = rest.removeprefix("at ").strip()
    at = _clock(rest) if rest else dt.time(0)
    if at is None or (not word and not rest):
        raise BeginError(flag, value, "is not a time")
    today = dt.datetime.fromtimestamp(now, tz).date()
    if word == "tomorrow":
        return _local(today + dt.timedelta(days=1), at, tz)
    if word == "today":
        return _local(today, at, tz)
    # `tonight at 2am` and a bare `11pm`: the next time the clock shows it.
    when = _local(today, at, tz)
    return when if when >= now else _local(today + dt.timedelta(days=1), at, tz)
