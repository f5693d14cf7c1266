"""When a periodic job comes due: the standard five-field cron grammar and fixed intervals.

Owns: Cron (a parsed expression: ``minute hour day-of-month month
day-of-week``, with ``*``, ranges ``a-b``, steps ``*/n`` and ``a-b/n``, lists
``a,b``, month and weekday names, ``7`` for Sunday, and the macros
``@yearly``/``@annually``, ``@monthly``, ``@weekly``, ``@daily``/``@midnight``
and ``@hourly``), its ``next_after`` in a time zone, and ``time_zone``.
Imports: nothing from nobroker. Pure: no clock, no I/O; the caller passes
the time.

The rules, as Vixie cron (and POSIX) has them:

- When both day fields are restricted (neither starts with ``*``), a day
  matches if *either* does: ``0 0 1 * MON`` is the 1st of each month and
  every Monday.
- Time zones follow the wall clock of ``tz`` (an IANA name; UTC when None).
  A wall time that a daylight-saving change skips (02:30 on the night the
  clocks go forward) fires once, at the first minute that exists after the
  gap; a wall time that happens twice (01:30 when they go back) fires once,
  at the first occurrence. So a schedule never fires twice for one wall
  time and never skips a day because of a change.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

#: Field bounds: (name, lowest, highest).
FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12), ("day of week", 0, 7))
MONTH_NAMES = {name.lower(): i for i, name in enumerate(calendar.month_abbr) if name}
DAY_NAMES = {name.lower(): (i + 1) % 7 for i, name in enumerate(calendar.day_abbr)}  # Monday is 1, Sunday 0
MACROS = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}  # fmt: skip
#: Longest expression text, and the farthest ahead next_after looks (a match exists within 28 years).
MAX_EXPRESSION_CHARS = 256
MAX_SEARCH_DAYS = 28 * 366


@dataclass(frozen=True)
class Cron:
    """A parsed five-field cron expression. ``Cron.parse("*/5 * * * *")``."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday .. 6 = Saturday
    days_restricted: bool
    weekdays_restricted: bool

    @classmethod
    def parse(cls, text: str) -> Cron:
        """The expression ``text``, or ValueError naming the field that is wrong."""
        if not isinstance(text, str) or not text.strip() or len(text) > MAX_EXPRESSION_CHARS:
            raise ValueError(f"a cron expression is 1 to {MAX_EXPRESSION_CHARS} characters of text, got {text!r}")
        expanded = MACROS.get(text.strip().lower(), text)
        parts = expanded.split()
        if len(parts) != 5:
            raise ValueError(
                f"cron expression {text!r} has {len(parts)} fields; it needs five: minute hour day-of-month month "
                "day-of-week (or a macro such as @daily)"
            )
        sets = [_field(part, spec) for part, spec in zip(parts, FIELDS)]
        weekdays = frozenset(d % 7 for d in sets[4])
        cron = cls(text.strip(), sets[0], sets[1], sets[2], sets[3], weekdays,
                   not parts[2].startswith("*"), not parts[4].startswith("*"))  # fmt: skip
        if cron._never():
            raise ValueError(f"cron expression {text!r} never fires (no such day in any month)")
        return cron

    def next_after(self, when: float, tz: tzinfo | None = None) -> float:
        """The first time after ``when`` (epoch seconds) that matches, on the wall clock of ``tz``."""
        zone = tz or timezone.utc
        local = datetime.fromtimestamp(when, zone).replace(tzinfo=None, second=0, microsecond=0)
        day, start = local.replace(hour=0, minute=0), (local.hour, local.minute)
        for _ in range(MAX_SEARCH_DAYS):
            if self._day_matches(day):
                for hour in sorted(h for h in self.hours if h >= start[0]):
                    for minute in sorted(m for m in self.minutes if (hour, m) >= start):
                        fires = _instant(day.replace(hour=hour, minute=minute), zone)
                        if fires > when:
                            return fires
            day, start = day + timedelta(days=1), (0, 0)
        raise AssertionError("unreachable: parse() refuses expressions that never fire")

    def _day_matches(self, day: datetime) -> bool:
        if day.month not in self.months:
            return False
        in_month = day.day in self.days
        on_weekday = (day.isoweekday() % 7) in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return in_month or on_weekday
        return in_month and on_weekday

    def _never(self) -> bool:
        """True when the day fields can match no real date (``0 0 30 2 *``, February 30th)."""
        if self.weekdays_restricted and self.days_restricted:
            return False  # any matching weekday will do
        longest = {m: calendar.monthrange(2000, m)[1] for m in self.months}  # 2000: a leap year
        return not any(d <= longest[m] for m in self.months for d in self.days)


def _field(part: str, spec: tuple[str, int, int]) -> frozenset[int]:
    name, low, high = spec
    values: set[int] = set()
    for item in part.split(","):
        base, _, step_text = item.partition("/")
        step = _number(step_text, name, 1, high - low + 1) if step_text else 1
        if base == "*":
            first, last = low, high
        elif "-" in base:
            a, _, b = base.partition("-")
            first, last = _value(a, name, low, high), _value(b, name, low, high)
            if first > last:
                raise ValueError(f"cron {name} range {base!r} runs backwards")
        else:
            first = _value(base, name, low, high)
            last = high if step_text else first
        values.update(range(first, last + 1, step))
    return frozenset(values)


def _value(text: str, name: str, low: int, high: int) -> int:
    names = MONTH_NAMES if name == "month" else DAY_NAMES if name == "day of week" else {}
    if text.lower() in names:
        return names[text.lower()]
    return _number(text, name, low, high)


def _number(text: str, name: str, low: int, high: int) -> int:
    if not (text.isascii() and text.isdigit()) or not low <= int(text) <= high:
        raise ValueError(f"cron {name} {text!r} is not a number from {low} to {high}")
    return int(text)


def _instant(wall: datetime, zone: tzinfo) -> float:
    """Epoch seconds of the naive local ``wall`` time in ``zone``: its first occurrence, or after a gap."""
    first = wall.replace(tzinfo=zone, fold=0)
    back = first.astimezone(timezone.utc).astimezone(zone).replace(tzinfo=None)
    if back == wall:
        return first.timestamp()
    # Skipped by a clock change: the first whole minute after it that exists.
    probe = wall
    for _ in range(24 * 60):
        probe += timedelta(minutes=1)
        candidate = probe.replace(tzinfo=zone, fold=0)
        if candidate.astimezone(timezone.utc).astimezone(zone).replace(tzinfo=None) == probe:
            return candidate.timestamp()
    raise AssertionError(f"no wall time exists in the day after {wall} in {zone}")


def time_zone(name: str | None) -> tzinfo:
    """The zone of an IANA name (``"Europe/Berlin"``), UTC for None or ``"UTC"``; ValueError if unknown."""
    if name is None or name == "UTC":
        return timezone.utc
    if not isinstance(name, str) or not name or len(name) > 64:
        raise ValueError(f"tz must be an IANA time zone name such as 'Europe/Berlin', got {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown time zone {name!r}: give an IANA name such as 'Europe/Berlin' (this Python finds its zones in "
            "the system's tz database, or in the tzdata package)"
        ) from None


def every_after(when: float, anchor: float, every: float) -> float:
    """The first tick after ``when`` of a schedule that fires at ``anchor + k * every`` (k >= 0)."""
    assert every > 0, "an interval is positive"
    if when < anchor:
        return anchor
    return anchor + (int((when - anchor) // every) + 1) * every
