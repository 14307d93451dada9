"""Durations and deadlines as people type them: `90`, `90s`, `5m`, `1h30m` (seconds), and a deadline that is a
time with its date and UTC offset (`2026-12-01T06:00+01:00`, `2026-12-01 06:00Z`) or a duration from now. Pure:
the caller gives the clock."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

from vgpuctl.lazyclass import dataclass

_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?")
DAY_S = 24 * 3600.0
DURATION_EXPECTED = "must be a duration such as 90, 90s, 5m or 1h30m"
MAX_DEADLINE_S = 7 * DAY_S  # a change window longer than a week is a typing mistake more likely than a plan


def duration_seconds(text: str, most_s: float = DAY_S) -> float:
    """Seconds from `90`, `90s`, `5m`, `1h30m`, `2m30s`: finite, 0 to `most_s`; ValueError saying what is expected
    (the caller names the value)."""
    m = _DURATION.fullmatch(text.strip())
    if not text.strip() or m is None:
        raise ValueError(DURATION_EXPECTED)
    hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if not math.isfinite(total) or total > most_s:
        raise ValueError(f"must be at most {_hours(most_s)}")
    return total


def _hours(seconds: float) -> str:
    return f"{seconds / DAY_S:g} days" if seconds > DAY_S else f"{seconds / 3600:g}h"


@dataclass(frozen=True)
class Deadline:
    """A point in time (POSIX seconds, the wall clock: a change window is a time on the calendar)."""

    at: float

    def passed(self, now: float) -> bool:
        return now >= self.at

    @property
    def text(self) -> str:
        """The deadline in local time with its UTC offset: `2026-12-01T06:00:00+01:00`."""
        return datetime.fromtimestamp(self.at).astimezone().isoformat(timespec="seconds")


def parse_deadline(text: str, now: float) -> Deadline:
    """A deadline from a time with its date and UTC offset (ISO 8601: `2026-12-01T06:00+01:00`, a space instead
    of the T, `Z` for UTC) or a duration from `now` (`2h`, `90m`); ValueError for anything else, for a time
    without its offset (whose zone would be a guess), and for a deadline that is not in the future."""
    text = text.strip()
    if not text:
        raise ValueError("expected a time with its date and UTC offset (2026-12-01T06:00+01:00) or a duration (2h)")
    if _DURATION.fullmatch(text):
        try:
            at = now + duration_seconds(text, MAX_DEADLINE_S)
        except ValueError as err:
            raise ValueError(f"{text!r}: {err}") from None
    else:
        at = _absolute(text)
        if at - now > MAX_DEADLINE_S:
            raise ValueError(f"{text!r} is more than {_hours(MAX_DEADLINE_S)} away")
    if at <= now:
        raise ValueError(f"{text!r} is not in the future (now: {Deadline(now).text})")
    return Deadline(at)


def _absolute(text: str) -> float:
    try:
        when = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        raise ValueError(f"expected a time with its date and UTC offset, such as 2026-12-01T06:00+01:00, or a "
                         f"duration such as 2h or 90m (got {text!r})") from None
    if when.tzinfo is None:
        raise ValueError(f"{text!r} has no UTC offset: add one (2026-12-01T06:00+01:00, or Z for UTC)")
    return when.astimezone(UTC).timestamp()
