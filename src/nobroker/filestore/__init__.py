"""The embedded file storage: one folder on local disk, one append-only log per queue.

Owns nothing itself: it names the package's face, FileStorage.
The package, in its order (a module imports only modules above it):

    layout.py      every file name of a queue, formatted and parsed; the queue name rule
    fs.py          the I/O seam every byte passes through; storage_error, write_fully
    bulk.py        building many objects at once: the cyclic garbage collector paused meanwhile
    room.py        room to grow in the big per-row containers, made where copying them costs no wait
    folder.py      the queue folder made private, an unsafe or network one refused; pid_alive
    framing.py     the bytes of format versions 1, 2 and 4: header, frames, CRC, JSON bodies
    entry.py       Entry (one job in memory) and the checks of a record's fields
    records.py     one encoder and one decoder per record type
    schedule_records.py  the schedule records (SCHEDULE, UNSCHEDULE, TICK) and how they fold
    control_records.py  the control records (SNOOZE, PAUSE, RESUME, RUN_NOW, DELETE): bodies, decoders
    limit_records.py  the limit records (LIMIT, UNLIMIT), how they fold, a limited lease's token
    counting.py    the counters per kind: what each record adds, the PURGE that carries them through compaction
    pointer.py     the .current pointer: which generation is the truth, replaced atomically
    reading.py     reading one generation: records forward, a torn tail told from damage, a job's record back
    log.py         one generation file: create, open, append (versions 2 and 4: room ahead), group fsync
    lock.py        the writers' lock and the compactor's, across processes
    wake.py        the named pipes that wake idle workers; waiting for a change
    index.py       JobRows: where each job lives (a hot Entry or a packed cold row)
    relocation.py  the rows after a compaction: new offsets and sizes, the gone rows dropped
    ready.py       ReadyJobs: the ready and delayed heaps, the pick of a lease; the groups' heaps and turns
    replay.py      QueueState and apply: records in, state out (pure)
    plain_jobs.py  many plain new jobs at once: their records in one pass, their cold rows in bulk
    state_form.py  QueueState as a snapshot's fields and blocks, and back
    limit_ops.py   a limit's writes, which kinds a lease may take, when the next slot frees
    leases.py      the writer's decisions, one per operation: records out
    schedule_ops.py  a schedule's writes and its due ticks, decided under the lock
    control_ops.py  snooze, pause, resume, run_now and delete, decided under the lock
    prefix_crc.py  the crc32 of a log's first bytes (what a snapshot is checked against), in threads
    snapshot.py    the checked cache of a replayed state (<name>.NNNNNN.snap)
    compaction.py  the next generation's file, written and flipped to (repair uses it too)
    unlocked.py    replaying what no longer changes without the lock, at opening and before a follower's lock
    checkpoint.py  the checkpoints: a writer's every 50,000 records, a compactor's for its followers
    forward.py     reading forward: the records after an offset applied, a torn tail cut, damage refused
    recovery.py    QueueFiles: opening, replay with a snapshot, torn tails, leftovers, fork
    retire.py      a generation left behind: its file closed, its state taken apart, in a thread
    batch.py       Batch and Op: what one group commit appends, and the operations waiting for it
    commit.py      Committer: the four beats, the group commit, roll-back, the read beat
    compactor.py   Compactor: the online compaction, mostly without the file lock
    reads.py       the read-only queries (get, stats, listings) as of now
    roster.py      the worker announcements: one small file per Worker in <name>.workers/
    storage.py     FileStorage, wiring only: one short method per operation
    repair.py      repair: the damaged file kept aside, the queue rebuilt from its valid records
    admin.py       inspect, verify and repair, from outside a queue

FileStorage is one object built in layers, one class per module, each
adding a concern to the ones below it: QueueFiles (the open files and the
state replayed from them) < Committer (operations through the four beats)
< Compactor (rewriting the log) < FileStorage (the Storage protocol). The
decisions (leases.py) and the queries (reads.py) are plain functions of the
state that the layers run under the right lock.

Imports: storage.
"""

from __future__ import annotations

from .storage import FileStorage

__all__ = ["FileStorage"]
