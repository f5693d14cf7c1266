"""The commands about jobs: enqueue, lease, ack, nack, extend, get, list, dlq.

Owns: each command's call into the Queue and its text or JSON, and the
batching of ``enqueue --count`` (Ctrl-C stops between two batches).
Later homes: ``nobroker why ID`` (explain a job) belongs here.
Imports: jobs, worker.signals, values, output, location.
"""

from __future__ import annotations

import argparse
import signal
import time
from collections.abc import Callable
from typing import Any

from ..jobs import MAX_BATCH_JOBS, Job, JobState
from .location import open_queue
from .output import EXIT_INTERRUPTED, EXIT_OK, PREVIEW_CHARS, Output, Progress, job_detail, job_table, preview, relative, safe, state_text, utc
from .values import ALL, parse_json_value, read_stdin_payload

#: ``list`` and ``dlq`` show this many jobs unless told otherwise, so a queue
#: of a million jobs does not flood a terminal by accident.
DEFAULT_LIST_LIMIT = 100
#: Most jobs one ``enqueue --count`` makes: every Job is printed, so they are all held in memory.
MAX_ENQUEUE_COUNT = 1_000_000
#: Jobs per durable write of ``enqueue --count``: a Ctrl-C takes effect after the batch being written.
ENQUEUE_COUNT_BATCH = 10_000
assert ENQUEUE_COUNT_BATCH <= MAX_BATCH_JOBS


def cmd_enqueue(args: argparse.Namespace, out: Output) -> int:
    if args.count > 1 and (args.id is not None or args.dedupe_key is not None):
        args._parser.error("--count makes that many distinct jobs; it cannot be combined with --id or --dedupe-key")
    text = read_stdin_payload("payload") if args.payload == "-" else args.payload
    payload = parse_json_value(text, what="payload")
    options: dict[str, Any] = {"priority": args.priority, "delay": args.delay, "kind": args.kind}
    if args.max_attempts is not None:
        options["max_attempts"] = args.max_attempts
    if args.timeout is not None:
        options["timeout"] = args.timeout
    if args.group is not None:
        options["group"] = args.group
    with open_queue(args, create=True) as queue:
        if args.count == 1 and not args.count_given:
            job = queue.enqueue(payload, job_id=args.id, dedupe_key=args.dedupe_key, **options)
            return _one_job(
                out, job, lambda job: f"enqueued {safe(job.id)} ({state_text(job, time.time())}, priority {job.priority})"
            )
        return _enqueue_count(args, out, queue, payload, options)


def _enqueue_count(args: argparse.Namespace, out: Output, queue: Any, payload: Any, options: dict[str, Any]) -> int:
    from ..worker.signals import StopSignals  # here, so other commands never load the worker package

    jobs: list[Job] = []
    torn = False
    progress = Progress("enqueueing")
    progress.start()
    # Ctrl-C stops between two batches, so every job reported is in the
    # queue and every job in the queue is reported; a second one quits
    # during the batch being written (which may or may not have landed).
    with StopSignals(signals=(signal.SIGINT,)) as interrupt:
        try:
            while len(jobs) < args.count and interrupt.first is None:
                batch = min(ENQUEUE_COUNT_BATCH, args.count - len(jobs))
                jobs.extend(queue.enqueue_many([payload] * batch, **options))
                progress.update(len(jobs), args.count)
        except KeyboardInterrupt:
            torn = True
        finally:
            progress.done()
    if out.as_json:
        out.document([job.to_dict() for job in jobs])
    else:
        for job in jobs:
            out.line(safe(job.id))
    if interrupt.first is None:
        out.note(f"enqueued {len(jobs):,} jobs")
        return EXIT_OK
    out.note(f"interrupted: enqueued {len(jobs):,} of {args.count:,} jobs" + (" (their ids are above)" if jobs else ""))
    if torn:
        out.note(f"the batch being written at the second Ctrl-C (up to {ENQUEUE_COUNT_BATCH:,} jobs) may or may not be in the queue")
    return EXIT_INTERRUPTED


def cmd_lease(args: argparse.Namespace, out: Output) -> int:
    with open_queue(args) as queue:
        jobs = queue.lease(args.count, visibility_timeout=args.visibility_timeout, kinds=args.kind)
    if out.as_json:
        out.document([job.to_dict() for job in jobs])
        return EXIT_OK
    if not jobs:
        out.line("no job is ready to lease")
        return EXIT_OK
    now = time.time()
    for job in jobs:
        out.line(
            f"leased {safe(job.id)}  attempt {job.attempts} of {job.max_attempts}, "
            f"lease ends {relative(job.lease_deadline, now)}, token {safe(job.lease_token)}"
        )
        out.line(f"  payload: {preview(job.payload, 4 * PREVIEW_CHARS)}")
    return EXIT_OK


def _one_job(out: Output, job: Job, text: Callable[[Job], str]) -> int:
    """One job: JSON, or the line ``text`` makes of it."""
    if out.as_json:
        out.document(job.to_dict())
    else:
        out.line(text(job))
    return EXIT_OK


def cmd_ack(args: argparse.Namespace, out: Output) -> int:
    result = parse_json_value(args.result, what="result") if args.result is not None else None
    with open_queue(args) as queue:
        queue.ack(args.id, result=result)
        job = queue.get(args.id)
    return _one_job(out, job, lambda job: f"acked {safe(job.id)}: {job.state.value}")


def _nacked(job: Job) -> str:
    if job.state is JobState.DEAD:
        return f"nacked {safe(job.id)}: dead after {job.attempts} attempt(s) (see `nobroker dlq`)"
    return (
        f"nacked {safe(job.id)}: ready again {relative(job.available_at, time.time())} "
        f"(attempt {job.attempts} of {job.max_attempts} used)"
    )


def cmd_nack(args: argparse.Namespace, out: Output) -> int:
    with open_queue(args) as queue:
        job = queue.nack(args.id, error=args.error, delay=args.delay, permanent=args.permanent)
    return _one_job(out, job, _nacked)


def cmd_extend(args: argparse.Namespace, out: Output) -> int:
    with open_queue(args) as queue:
        job = queue.extend(args.id, args.seconds)
    return _one_job(
        out, job,
        lambda job: f"extended {safe(job.id)}: lease ends {utc(job.lease_deadline)} ({relative(job.lease_deadline, time.time())})",
    )  # fmt: skip


def cmd_get(args: argparse.Namespace, out: Output) -> int:
    with open_queue(args) as queue:
        job = queue.get(args.id)
    if out.as_json:
        out.document(job.to_dict())
    else:
        job_detail(out, job)
    return EXIT_OK


def cmd_why(args: argparse.Namespace, out: Output) -> int:
    with open_queue(args) as queue:
        reasons = queue.explain(args.id)
    if out.as_json:
        out.document([reason.to_dict() for reason in reasons])
    else:
        for reason in reasons:
            out.line(f"- {safe(str(reason))}")
    return EXIT_OK


def _list_limit(value: int) -> int | None:
    return None if value == 0 else value


def _show_jobs(out: Output, jobs: list[Job], limit: int | None, empty: str) -> int:
    """A listing: JSON, or the table with a hint when the limit cut it."""
    if out.as_json:
        out.document([job.to_dict() for job in jobs])
        return EXIT_OK
    if not jobs:
        out.line(empty)
        return EXIT_OK
    job_table(out, jobs)
    if limit is not None and len(jobs) == limit:
        out.note(f"showing {len(jobs)} jobs; --limit 0 shows all, --offset pages")
    return EXIT_OK


def cmd_list(args: argparse.Namespace, out: Output) -> int:
    limit = _list_limit(args.limit)
    with open_queue(args) as queue:
        jobs = queue.list_jobs(args.state, limit=limit, offset=args.offset, kind=args.kind)
    return _show_jobs(out, jobs, limit, "no jobs")


def cmd_dlq(args: argparse.Namespace, out: Output) -> int:
    if args.requeue is not None:
        job_id = None if args.requeue is ALL else args.requeue
        with open_queue(args) as queue:
            count = queue.requeue_dead(job_id)
        if out.as_json:
            out.document({"requeued": count})
        elif job_id is not None:
            out.line(f"requeued {safe(job_id)}" if count else f"{safe(job_id)} was not dead; nothing requeued")
        else:
            out.line(f"requeued {count:,} dead job(s)")
        return EXIT_OK
    limit = _list_limit(args.limit)
    with open_queue(args) as queue:
        jobs = queue.dlq(limit=limit)
    return _show_jobs(out, jobs, limit, "the dead-letter queue is empty")
