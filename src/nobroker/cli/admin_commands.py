"""The commands that look after a queue: stats, counters, workers, compact, purge, inspect, verify, recover, repair.

Owns: each command's call into the library (the Queue, or
nobroker.filestore.admin for the file storage's inspect, verify and repair)
and its text or JSON; the confirmation before purge and repair.
``counters`` prints what the storage counted per kind (Queue.counters);
``workers`` lists the workers' announcements (nobroker.announcements). Later
homes: ``limit`` (settings stored in the queue) belongs here.
Imports: jobs, filestore.admin, output, location.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from typing import Any

from ..jobs import COUNTER_NAMES
from .location import check_queue_exists, file_storage_of, open_queue, storage_of
from .output import EXIT_ERROR, EXIT_OK, Output, Progress, confirm, preview, safe

#: Log bodies are cut to this many characters in the human view of ``inspect`` (``--json`` shows them whole).
INSPECT_BODY_CHARS = 200
#: Job ids ``repair`` lists on a terminal per kind of loss (``--json`` lists more).
REPORTED_IDS = 20
#: The counts ``stats`` shows, in this order.
STATS_FIELDS = ("ready", "delayed", "leased", "done", "dead", "cancelled", "total")
#: What ``compact --json`` and ``recover --json`` report of the library's result, in this order.
COMPACTION_FIELDS = ("old_generation", "new_generation", "jobs_kept", "jobs_dropped", "bytes_before", "bytes_after", "elapsed")
RECOVERY_FIELDS = ("generation", "records", "bytes_read", "torn_bytes", "jobs", "elapsed", "clean")


def _fields(result: Any, names: Sequence[str]) -> dict[str, Any]:
    return {name: getattr(result, name) for name in names}


def cmd_stats(args: argparse.Namespace, out: Output) -> int:
    with open_queue(args) as queue:
        stats = queue.stats()
        durable = queue.durable
    if out.as_json:
        out.document(stats.to_dict())
        return EXIT_OK
    counts = stats.to_dict()
    out.line(f"queue {safe(args.queue)!s}" + ("" if durable else "  (NOT durable: fsync is off)"))
    for key in STATS_FIELDS:
        if key in counts:  # cancelled: only once some job is
            out.line(f"  {key:<8}{counts[key]:>10,}")
    return EXIT_OK


def cmd_counters(args: argparse.Namespace, out: Output) -> int:
    """What happened to the queue's jobs so far, per kind (kept by the storage: they survive restarts and compaction)."""
    with open_queue(args) as queue:
        counters = queue.counters()
    if out.as_json:
        out.document({"queue": args.queue, "counters": counters})
        return EXIT_OK
    if not counters:
        out.line(f"queue {safe(args.queue)!s} has counted nothing yet")
        return EXIT_OK
    width = max(16, *(len(safe(kind)) for kind in counters))
    out.line(f"{'kind':<{width}}" + "".join(f" {name:>10}" for name in COUNTER_NAMES))
    for kind in sorted(counters):
        out.line(f"{safe(kind):<{width}}" + "".join(f" {counters[kind].get(name, 0):>10,}" for name in COUNTER_NAMES))
    return EXIT_OK


def cmd_workers(args: argparse.Namespace, out: Output) -> int:
    """The workers that announced themselves to the queue; one whose heartbeat is old is shown as gone."""
    with open_queue(args) as queue:
        workers = queue.workers()
    now = time.time()
    if out.as_json:
        out.document({"workers": [w.to_dict(now) for w in workers], "now": now})
        return EXIT_OK
    if not workers:
        out.line(f"no worker has announced itself to queue {safe(args.queue)!s}")
        return EXIT_OK
    out.line(f"{'worker':<24} {'host':<20} {'pid':>7} {'running':>9}  {'kinds':<16} {'started':>9}  heartbeat")
    for w in workers:
        kinds = "all" if w.kinds is None else ",".join(w.kinds)
        beat = f"{_ago(now - w.heartbeat_at)} ago" + ("  GONE" if w.gone(now) else "")
        out.line(
            f"{safe(w.name):<24} {safe(w.host):<20} {w.pid:>7} {f'{w.running}/{w.concurrency}':>9}  {safe(kinds):<16} "
            f"{_ago(now - w.started_at):>9}  {beat}"
        )
    return EXIT_OK


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def cmd_purge(args: argparse.Namespace, out: Output) -> int:
    with open_queue(args) as queue:
        held = len(queue)
        if not confirm(args, f"Delete all {held:,} job(s) of queue {args.queue!r} for good?"):
            out.note("purge cancelled; nothing was changed")
            return EXIT_ERROR
        count = queue.purge()
    if out.as_json:
        out.document({"purged": count})
    else:
        out.line(f"purged {count:,} job(s)")
    return EXIT_OK


def cmd_compact(args: argparse.Namespace, out: Output) -> int:
    progress = Progress(f"compacting queue {args.queue!r}")
    with open_queue(args) as queue:
        progress.start()
        try:
            result = queue.compact()
        finally:
            progress.done()
    if out.as_json:
        out.document(_fields(result, COMPACTION_FIELDS))
        return EXIT_OK
    files = ""
    if result.new_generation != result.old_generation:  # the file storage wrote a new generation
        files = (
            f", generation {result.old_generation} -> {result.new_generation}, "
            f"{result.bytes_before:,} -> {result.bytes_after:,} bytes"
        )
    out.line(
        f"compacted: kept {result.jobs_kept:,} job(s), dropped {result.jobs_dropped:,} done{files} "
        f"in {result.elapsed:.2f}s"
    )
    return EXIT_OK


def cmd_recover(args: argparse.Namespace, out: Output) -> int:
    _where, is_dsn = storage_of(args)
    with open_queue(args) as queue:
        report = queue.recovery
    if out.as_json:
        out.document(_fields(report, RECOVERY_FIELDS))
        return EXIT_OK
    if is_dsn:
        out.line(f"opened queue {args.queue!r} on PostgreSQL: the database recovers itself; nothing to report")
        return EXIT_OK
    out.line(
        f"opened queue {args.queue!r}: generation {report.generation}, {report.records:,} record(s) "
        f"({report.bytes_read:,} bytes), {report.jobs:,} job(s) in {report.elapsed:.2f}s"
    )
    if report.clean:
        out.line("clean: nothing was torn")
    else:
        out.line(f"a torn tail of {report.torn_bytes:,} bytes (a write cut by a crash) was truncated")
    return EXIT_OK


# ---------------------------------------------------------------- the file storage's own files
def _queue_folder(args: argparse.Namespace) -> str:
    """The folder of a file queue that is there (refused in one line otherwise; nothing is created)."""
    directory = file_storage_of(args)
    check_queue_exists(args, directory, False)
    return directory


def cmd_inspect(args: argparse.Namespace, out: Output) -> int:
    from ..filestore import admin as maintenance  # the file engine, loaded only for the commands that read its files

    directory = _queue_folder(args)
    progress = Progress("reading log")
    records = 0
    damage: tuple[int, str] | None = None
    stream = out.out
    # Stream the records out one by one (also as JSON) so a large log never
    # has to fit in memory twice.
    if out.as_json:
        stream.write('{\n  "records": [')
    else:
        out.line(f"{'OFFSET':>10} {'LENGTH':>9}  {'TYPE':<8} BODY")
    first = True
    progress.start()
    try:
        for view in maintenance.inspect_log(directory, args.queue, generation=args.generation):
            if view.damage is not None:
                damage = (view.offset, view.damage)
            elif view.type_name != "HEADER":
                records += 1
            if out.as_json:
                stream.write(("\n    " if first else ",\n    ") + json.dumps(view.to_dict(), ensure_ascii=True))
                first = False
            elif view.damage is not None:
                out.line(f"{view.offset:>10} {'-':>9}  {'DAMAGE':<8} {safe(view.damage)}")
            else:
                body = "-" if view.body is None else preview(view.body, INSPECT_BODY_CHARS)
                out.line(f"{view.offset:>10} {view.length:>9}  {safe(view.type_name):<8} {body}")
            progress.update(records)
    finally:
        progress.done()
    if out.as_json:
        summary = {"offset": damage[0], "message": damage[1]} if damage else None
        stream.write(("\n  " if not first else "") + f'],\n  "count": {records},\n  "damage": {json.dumps(summary)}\n}}\n')
    elif damage:
        out.line(f"{records:,} record(s); damage at offset {damage[0]:,}: {safe(damage[1])}")
        out.line("  `nobroker verify` says whether opening will truncate it (a torn tail) or refuse (run `nobroker repair`)")
    else:
        out.line(f"{records:,} record(s), no damage")
    return EXIT_OK


def cmd_verify(args: argparse.Namespace, out: Output) -> int:
    from ..filestore import admin as maintenance

    directory = _queue_folder(args)
    report = maintenance.verify(directory, args.queue)
    if out.as_json:
        out.document(report.to_dict())
    elif report.ok:
        torn = f", a torn tail of {report.torn_bytes:,} bytes (opening truncates it)" if report.torn_bytes else ""
        out.line(
            f"ok: queue {args.queue!r}, generation {report.generation}, "
            f"{report.records:,} record(s), {report.jobs:,} job(s){torn}"
        )
    else:
        out.line(f"queue {args.queue!r}: {len(report.problems)} problem(s)")
        for problem in report.problems:
            out.line(f"  - {safe(problem)}")
        out.line("`nobroker repair` keeps the damaged file aside and rebuilds from the valid records")
    return EXIT_OK if report.ok else EXIT_ERROR


def cmd_repair(args: argparse.Namespace, out: Output) -> int:
    from ..filestore import admin as maintenance

    directory = _queue_folder(args)
    before = maintenance.verify(directory, args.queue)
    if before.ok:
        if out.as_json:
            out.document({"repaired": False, "verify": before.to_dict()})
        else:
            out.line(f"queue {args.queue!r} is healthy; nothing to repair")
        return EXIT_OK
    if not out.as_json:
        for problem in before.problems:
            out.line(f"  - {safe(problem)}")
    if not confirm(args, "Rebuild the queue from its valid records (the damaged file is kept aside)?"):
        out.note("repair cancelled; nothing was changed")
        return EXIT_ERROR
    report = maintenance.repair(directory, args.queue)
    if out.as_json:
        out.document({"repaired": True, **report.to_dict()})
        return EXIT_OK
    out.line(
        f"repaired: kept {report.records_kept:,} record(s), dropped {report.records_dropped:,} record(s) "
        f"({report.bytes_dropped:,} bytes); the damaged file is kept at {safe(report.kept_aside)}"
    )
    _repair_losses(out, report)
    return EXIT_OK


def _id_list(ids: Sequence[str], total: int) -> str:
    shown = ", ".join(safe(job_id) for job_id in ids[:REPORTED_IDS])
    return shown + (f", ... ({total - min(len(ids), REPORTED_IDS):,} more; --json lists up to {len(ids):,})" if total > REPORTED_IDS else "")


def _repair_losses(out: Output, report: Any) -> None:
    """Which jobs the repair lost or set back: ids where the records could be read, counts otherwise."""
    if report.lost_job_count:
        out.line(f"lost {report.lost_job_count:,} job(s) whose enqueue was in the damage: "
                 f"{_id_list(report.lost_jobs, report.lost_job_count)}")
    if report.changed_job_count:
        out.line(f"kept {report.changed_job_count:,} job(s) that lost later records (their state may be older "
                 f"than it was: a done job may run again): {_id_list(report.changed_jobs, report.changed_job_count)}")
    unknown = []
    if report.unidentified_records:
        unknown.append(f"{report.unidentified_records:,} damaged record(s) whose job id cannot be read")
    if report.unreadable_bytes:
        unknown.append(f"{report.unreadable_bytes:,} byte(s) in which no record can be made out")
    if unknown:
        out.line("also lost, job unknown: " + " and ".join(unknown))
    if not (report.lost_job_count or report.changed_job_count or unknown):
        out.line("no job lost a record")
