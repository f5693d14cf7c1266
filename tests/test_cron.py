"""The cron grammar and its next fire time, against a table of known answers, DST changes and a brute-force oracle.

Imports: the standard library and nobroker.cron only.
"""

from __future__ import annotations

import random
import unittest
from datetime import datetime, timedelta, timezone

from nobroker.cron import Cron, every_after, time_zone

UTC = timezone.utc


def at(*fields: int, tz: object = UTC) -> float:
    return datetime(*fields, tzinfo=tz).timestamp()  # type: ignore[arg-type, misc]


#: (expression, after, zone, the next fire time): each worked out by hand from a calendar.
KNOWN = [
    ("* * * * *", at(2026, 1, 1, 0, 0, 30), None, at(2026, 1, 1, 0, 1)),
    ("*/15 * * * *", at(2026, 1, 1), None, at(2026, 1, 1, 0, 15)),
    ("0-10/5 * * * *", at(2026, 1, 1, 0, 7), None, at(2026, 1, 1, 0, 10)),
    ("0-10/5 * * * *", at(2026, 1, 1, 0, 10), None, at(2026, 1, 1, 1, 0)),
    ("5,10-12 3 * * *", at(2026, 1, 1, 3, 5), None, at(2026, 1, 1, 3, 10)),
    ("0 9 * * MON-FRI", at(2026, 1, 2, 10), None, at(2026, 1, 5, 9)),  # Friday 10:00 -> Monday 09:00
    ("0 9 * * mon-fri", at(2026, 1, 2, 10), None, at(2026, 1, 5, 9)),
    ("0 0 * * 7", at(2026, 1, 1), None, at(2026, 1, 4)),  # 7 is Sunday too
    ("0 0 * * SUN", at(2026, 1, 1), None, at(2026, 1, 4)),
    ("0 0 1 * MON", at(2026, 1, 1, 1), None, at(2026, 1, 5)),  # both day fields: either matches
    ("0 0 1 * MON", at(2026, 1, 26, 1), None, at(2026, 2, 1)),
    ("0 0 */10 * *", at(2026, 1, 2), None, at(2026, 1, 11)),  # a step on the day: both must match
    ("0 12 29 2 *", at(2026, 3, 1), None, at(2028, 2, 29, 12)),  # leap day
    ("0 0 31 * *", at(2026, 1, 31, 1), None, at(2026, 3, 31)),  # February and its 28 days skipped
    ("15 14 1 JAN,jul *", at(2026, 1, 1, 14, 15), None, at(2026, 7, 1, 14, 15)),
    ("@hourly", at(2026, 1, 1, 0, 59), None, at(2026, 1, 1, 1)),
    ("@daily", at(2026, 1, 1, 0, 0), None, at(2026, 1, 2)),
    ("@midnight", at(2026, 1, 1, 23, 59), None, at(2026, 1, 2)),
    ("@weekly", at(2026, 1, 1), None, at(2026, 1, 4)),
    ("@monthly", at(2026, 1, 15), None, at(2026, 2, 1)),
    ("@yearly", at(2026, 1, 1), None, at(2027, 1, 1)),
    ("@annually", at(2026, 6, 1), None, at(2027, 1, 1)),
    ("0 9 * * *", at(2026, 1, 1), "Europe/Berlin", at(2026, 1, 1, 8)),  # 09:00 CET is 08:00 UTC
    ("0 9 * * *", at(2026, 7, 1), "Europe/Berlin", at(2026, 7, 1, 7)),  # 09:00 CEST is 07:00 UTC
    # New York, 2026: the clocks go forward on March 8 (02:00 -> 03:00) and back on November 1 (02:00 -> 01:00).
    ("30 2 * * *", at(2026, 3, 7, 1), "America/New_York", at(2026, 3, 7, 7, 30)),  # 02:30 EST
    ("30 2 * * *", at(2026, 3, 7, 12), "America/New_York", at(2026, 3, 8, 7)),  # skipped: 03:00 EDT
    ("30 2 * * *", at(2026, 3, 8, 7), "America/New_York", at(2026, 3, 9, 6, 30)),  # 02:30 EDT
    ("*/20 2 * * *", at(2026, 3, 8, 6), "America/New_York", at(2026, 3, 8, 7)),  # the gap's three fire once
    ("*/20 2 * * *", at(2026, 3, 8, 7), "America/New_York", at(2026, 3, 9, 6)),
    ("30 1 * * *", at(2026, 10, 31, 12), "America/New_York", at(2026, 11, 1, 5, 30)),  # first 01:30 (EDT)
    ("30 1 * * *", at(2026, 11, 1, 5, 30), "America/New_York", at(2026, 11, 2, 6, 30)),  # not the second
    ("0 * * * *", at(2026, 11, 1, 5, 0), "America/New_York", at(2026, 11, 1, 7, 0)),  # 01:00 twice: once
    ("30 1 * * *", at(2026, 11, 1, 6, 10), "America/New_York", at(2026, 11, 2, 6, 30)),  # inside the repeat
    ("0 3 * * *", at(2026, 3, 29), "Europe/Berlin", at(2026, 3, 29, 1)),  # 03:00 CEST, just after the gap
    ("30 2 * * *", at(2026, 3, 28, 12), "Europe/Berlin", at(2026, 3, 29, 1)),  # 02:30 skipped: 03:00 CEST
]

BAD = [
    "", "   ", "* * * *", "* * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * 32 * *", "* * * 13 *",
    "* * * * 8", "5-1 * * * *", "*/0 * * * *", "a * * * *", "1.5 * * * *", "* * * FOO *", "0 0 30 2 *",
    "0 0 31 4,6,9,11 *", "@fortnightly", "١ * * * *", "-1 * * * *", "x" * 300,
]


class KnownAnswers(unittest.TestCase):
    def test_the_table(self) -> None:
        for expression, after, zone, expected in KNOWN:
            with self.subTest(expression=expression, after=datetime.fromtimestamp(after, UTC).isoformat(), zone=zone):
                got = Cron.parse(expression).next_after(after, time_zone(zone))
                self.assertEqual(
                    datetime.fromtimestamp(got, UTC), datetime.fromtimestamp(expected, UTC),
                    f"{expression} after {datetime.fromtimestamp(after, UTC)} in {zone}",
                )  # fmt: skip

    def test_bad_expressions_are_refused_naming_the_fault(self) -> None:
        for expression in BAD:
            with self.subTest(expression=expression), self.assertRaises(ValueError) as caught:
                Cron.parse(expression)
            self.assertIn("cron", str(caught.exception))

    def test_a_day_that_never_comes_is_refused_but_a_weekday_rescues_it(self) -> None:
        with self.assertRaisesRegex(ValueError, "never fires"):
            Cron.parse("0 0 30 2 *")
        self.assertEqual(Cron.parse("0 0 30 2 MON").next_after(at(2026, 1, 1)), at(2026, 2, 2))

    def test_unknown_time_zones_are_refused(self) -> None:
        for name in ("Mars/Olympus", "", "../../etc/passwd", 5):
            with self.subTest(name=name), self.assertRaises(ValueError):
                time_zone(name)  # type: ignore[arg-type]
        self.assertIs(time_zone(None), UTC)
        self.assertIs(time_zone("UTC"), UTC)

    def test_fixed_intervals(self) -> None:
        self.assertEqual(every_after(5.0, anchor=10.0, every=60.0), 10.0)
        self.assertEqual(every_after(10.0, anchor=10.0, every=60.0), 70.0)
        self.assertEqual(every_after(69.9, anchor=10.0, every=60.0), 70.0)
        self.assertEqual(every_after(1_000.0, anchor=10.0, every=0.5), 1_000.5)


def brute_force(cron: Cron, after: float) -> float:
    """The first UTC minute after ``after`` whose fields match, found one minute at a time."""
    t = datetime.fromtimestamp(after, UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
    for _ in range(3 * 366 * 24 * 60):
        weekday_ok = (t.isoweekday() % 7) in cron.weekdays
        day_ok = t.day in cron.days
        days = (day_ok or weekday_ok) if cron.days_restricted and cron.weekdays_restricted else (day_ok and weekday_ok)
        if t.minute in cron.minutes and t.hour in cron.hours and t.month in cron.months and days:
            return t.timestamp()
        t += timedelta(minutes=1)
    raise AssertionError("no match within three years")


class AgainstBruteForce(unittest.TestCase):
    def test_random_expressions_in_utc(self) -> None:
        rng = random.Random(20261201)

        def field(low: int, high: int) -> str:
            kind = rng.randrange(5)
            a, b = sorted(rng.sample(range(low, high + 1), 2))
            return ["*", f"*/{rng.randint(2, 6)}", f"{a}-{b}", f"{a},{b}", f"{a}-{b}/{rng.randint(1, 3)}"][kind]

        checked = 0
        while checked < 60:
            expression = " ".join([field(0, 59), field(0, 23), field(1, 28), field(1, 12), field(0, 6)])
            cron = Cron.parse(expression)
            after = at(2026, 1, 1) + rng.randrange(365 * 24 * 3600)
            with self.subTest(expression=expression, after=after):
                self.assertEqual(cron.next_after(after), brute_force(cron, after))
            checked += 1


if __name__ == "__main__":
    unittest.main()
