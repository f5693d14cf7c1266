"""The job lists the dashboard shows: by state and kind, searched, oldest or newest first, a page at a time.

Owns: JobQuery (what a list asks for), JobPage (what it gets), list_page and
count_listed (how many jobs a listing holds, found by reads at chosen offsets).
Imports: errors, jobs. Everything is read through the public list_jobs,
stats and get of a queue (any object with those methods: the API passes one
that takes the dashboard's lock for each call), so a list means the same on
both storages and a long search never holds the lock for more than one page.

The storages list oldest first. Newest first is the same listing read from
its end: the count of the listing says where the end is (stats() counts it
for a state alone; with a kind, count_listed finds it in log2(n / 250)
one-job reads and one read of 250, and a hint from the last answer usually
confirms it in one read).

A search reads jobs page by page and keeps those whose id or payload holds
the text, ignoring case: the payload as compact JSON (``"to":"ada`` finds
``{"to": "ada@example.com"}``), or any one string in it, key or value, as
itself (``say "hi"`` finds ``{"text": "say \"hi\""}``). It stops after
MAX_SEARCH_SCAN jobs or MAX_SEARCH_TEXT characters of payload, and says how
far it got, so a search on a large queue costs a bounded time and the page
says to narrow it by state or kind. A search for a whole id finds that job at
once, wherever it is.

What this costs is what an offset costs the storage: the file storage walks
its index up to the offset, so on a queue of 100,000 jobs each read far from
the oldest end takes a good part of a second on a slow machine, and a first
newest-first list with a kind about ten of them. A storage call that lists
newest first, or counts a listing by kind, would make these one read each.

Each call reads the queue as it is at that moment: while workers change it, a
job can move between pages (as with any offset paging); nothing is missed for
good, since the page is read afresh every round.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Protocol

from ..errors import JobNotFoundError
from ..jobs import LISTINGS, Job, JobState, QueueStats

#: The two orders a list can have.
SORTS = ("oldest", "newest")
#: Jobs one read of a search takes (each comes with its payload).
SEARCH_PAGE = 250
#: Most jobs, and most characters of payload JSON, one search reads before it stops and says so.
MAX_SEARCH_SCAN = 10_000
MAX_SEARCH_TEXT = 32 * 1024 * 1024
#: Longest search text, and longest kind asked for (a kind is at most this long anyway).
MAX_SEARCH_CHARS = 256
#: Jobs count_listed reads at once to end its bracket (its one-job reads halve it down to this).
COUNT_READ = 250
#: Most one-job reads count_listed makes (64 halve any bracket a count can have).
MAX_COUNT_PROBES = 64


class Listed(Protocol):
    """What a list is read from: the public Queue's list_jobs, stats and get."""

    def list_jobs(self, state: str | None = None, *, limit: int | None = None, offset: int = 0, kind: str | None = None) -> list[Job]: ...

    def stats(self) -> QueueStats: ...

    def get(self, job_id: str) -> Job: ...


@dataclasses.dataclass(frozen=True)
class JobQuery:
    """One list: ``listing`` one of LISTINGS or None (every job), ``kind`` or None, search ``text`` ("" for none)."""

    listing: str | None = None
    kind: str | None = None
    text: str = ""
    newest: bool = False
    offset: int = 0
    limit: int = 50

    def __post_init__(self) -> None:
        assert self.listing is None or self.listing in LISTINGS, f"unknown listing {self.listing!r}"
        assert self.offset >= 0 and self.limit >= 1, "a page starts at 0 or later and holds a job or more"
        assert len(self.text) <= MAX_SEARCH_CHARS, "the API refuses longer search texts"


@dataclasses.dataclass(frozen=True)
class JobPage:
    """One page of a list.

    ``total``: how many jobs the state and kind hold (None when not counted:
    oldest first with a kind asks for no count). For a search, ``scanned`` is
    how many of them were read and ``complete`` whether that was all of them.
    """

    jobs: list[Job]
    has_more: bool
    total: int | None = None
    scanned: int | None = None
    complete: bool = True


def listing_count(stats: QueueStats, listing: str | None) -> int:
    """How many jobs ``listing`` holds, as ``stats`` counts them (ready is runnable and delayed together)."""
    if listing is None:
        return stats.total
    if listing == "ready":
        return stats.ready + stats.delayed
    if listing == "runnable":
        return stats.ready
    count = getattr(stats, listing)  # to_dict() leaves cancelled out when it is 0: the fields never do
    assert isinstance(count, int), listing
    return count


def count_listed(queue: Listed, listing: str | None, kind: str | None, upper: int, hint: int | None = None) -> int:
    """How many jobs ``list_jobs(listing, kind=kind)`` lists, known to be at most ``upper``, by reads at chosen offsets.

    ``upper`` is the count of the listing without the kind (stats() gives it).
    ``hint`` (the count last found) is checked first with one read of two
    jobs: exactly one job at ``hint - 1`` means the count is still ``hint``,
    and otherwise the answer says on which side of it the count is. The
    bracket is then halved by one-job reads until it is COUNT_READ wide, and
    one read of that many jobs ends it: about log2(upper / COUNT_READ) reads,
    each of which costs a storage what skipping to its offset costs.
    """
    low, high = 0, max(0, upper)  # the count is in [low, high]
    if hint is not None and 0 < hint <= high:
        around = len(queue.list_jobs(listing, limit=2, offset=hint - 1, kind=kind))
        if around == 1:
            return hint
        low, high = (hint + 1, high) if around == 2 else (0, hint - 1)
    probes = 0
    while high - low > COUNT_READ:
        middle = (low + high) // 2
        if queue.list_jobs(listing, limit=1, offset=middle, kind=kind):
            low = middle + 1  # a job at index middle: more than middle jobs
        else:
            high = middle
        probes += 1
        assert probes <= MAX_COUNT_PROBES, "halving a bracket of at most 2**64 jobs ends sooner"
    # One more than the bracket's width: if the list grew meanwhile, the read still ends it.
    return low + len(queue.list_jobs(listing, limit=high - low + 1, offset=low, kind=kind))


def in_listing(job: Job, listing: str | None, now: float) -> bool:
    """Would ``listing`` list ``job`` at ``now`` (its kind aside)?"""
    if listing is None:
        return True
    if listing in ("runnable", "delayed"):
        if job.state is not JobState.READY:
            return False
        return (job.available_at > now) == (listing == "delayed")
    return job.state.value == listing


def payload_text(job: Job) -> str:
    """The payload as compact JSON, the text a search looks in."""
    try:
        return json.dumps(job.payload, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return repr(job.payload)


def _holds(value: Any, needle: str) -> bool:
    """Does any string in ``value`` (a JSON value: keys and values, at any depth) hold ``needle``, ignoring case?"""
    stack = [value]
    while stack:  # a stack, not recursion: a payload may nest as deep as the storage allows
        item = stack.pop()
        if isinstance(item, str):
            if needle in item.casefold():
                return True
        elif isinstance(item, dict):
            for key, inner in item.items():
                if needle in str(key).casefold():
                    return True
                stack.append(inner)
        elif isinstance(item, list):
            stack.extend(item)
    return False


def matches(job: Job, needle: str, text: str) -> bool:
    """Does ``job`` match the search ``needle`` (casefolded), given ``text``, its payload as compact JSON?"""
    return needle in job.id.casefold() or needle in text.casefold() or _holds(job.payload, needle)


def list_page(queue: Listed, query: JobQuery, *, now: float, count_hint: int | None = None) -> JobPage:
    """The page ``query`` asks for, read from ``queue`` (at ``now``, the time a whole-id match is judged at)."""
    if query.text:
        return _search(queue, query, now)
    total = _count(queue, query, count_hint) if query.newest or query.kind is None else None
    if not query.newest:
        # One more than asked tells whether a next page exists without a count.
        jobs = queue.list_jobs(query.listing, limit=query.limit + 1, offset=query.offset, kind=query.kind)
        return JobPage(jobs[: query.limit], len(jobs) > query.limit, total)
    assert total is not None, "newest first is counted from the end"
    end = total - query.offset  # the page ends here in oldest-first order (exclusive)
    if end <= 0:
        return JobPage([], False, total)
    start = max(0, end - query.limit)
    jobs = queue.list_jobs(query.listing, limit=end - start, offset=start, kind=query.kind)
    return JobPage(jobs[::-1], start > 0, total)


def _count(queue: Listed, query: JobQuery, hint: int | None) -> int:
    upper = listing_count(queue.stats(), query.listing)
    if query.kind is None:
        return upper
    return count_listed(queue, query.listing, query.kind, upper, hint)


def _search(queue: Listed, query: JobQuery, now: float) -> JobPage:
    """The matches of a search, ``query.offset`` of them skipped, at most ``query.limit`` (and whether more were found)."""
    needle = query.text.casefold()
    exact = _whole_id(queue, query, now)
    wanted = query.offset + query.limit + 1  # one more than the page says whether there is a next one
    found: list[Job] = [exact] if exact is not None else []
    total = _count(queue, query, None) if query.newest else None
    scanned = read_chars = 0
    complete = False
    while len(found) < wanted and not complete and scanned < MAX_SEARCH_SCAN and read_chars < MAX_SEARCH_TEXT:
        batch, complete = _search_batch(queue, query, scanned, total)
        scanned += len(batch)
        for job in batch:
            text = payload_text(job)
            read_chars += len(text)
            if (exact is None or job.id != exact.id) and matches(job, needle, text):
                found.append(job)
    page = found[query.offset : query.offset + query.limit]
    return JobPage(page, len(found) > query.offset + query.limit, total, scanned, complete)


def _search_batch(queue: Listed, query: JobQuery, scanned: int, total: int | None) -> tuple[list[Job], bool]:
    """The next jobs of the listing after ``scanned`` of them, in the query's order, and whether they are its last."""
    size = min(SEARCH_PAGE, MAX_SEARCH_SCAN - scanned)
    if not query.newest:
        jobs = queue.list_jobs(query.listing, limit=size, offset=scanned, kind=query.kind)
        return jobs, len(jobs) < size
    assert total is not None, "newest first is counted from the end"
    end = total - scanned
    if end <= 0:
        return [], True
    start = max(0, end - size)
    return queue.list_jobs(query.listing, limit=end - start, offset=start, kind=query.kind)[::-1], start == 0


def _whole_id(queue: Listed, query: JobQuery, now: float) -> Job | None:
    """The job whose id is the search text, if there is one and the state and kind take it."""
    try:
        job = queue.get(query.text)
    except (JobNotFoundError, ValueError):
        return None
    if query.kind is not None and job.kind != query.kind:
        return None
    return job if in_listing(job, query.listing, now) else None


def page_fields(page: JobPage) -> dict[str, Any]:
    """The parts of a page the API sends beside its jobs."""
    out: dict[str, Any] = {"has_more": page.has_more, "total": page.total}
    if page.scanned is not None:
        out.update(scanned=page.scanned, complete=page.complete)
    return out


__all__ = [
    "JobQuery", "JobPage", "list_page", "count_listed", "listing_count", "in_listing", "payload_text", "matches", "page_fields",
    "SORTS", "SEARCH_PAGE", "MAX_SEARCH_SCAN", "MAX_SEARCH_TEXT", "MAX_SEARCH_CHARS",
]  # fmt: skip
