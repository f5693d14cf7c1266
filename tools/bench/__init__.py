"""The benchmark suites behind ``python make.py bench``: kept out of the package, the wheel and the single-file app.

Owns: nothing but this map. Imports: nothing. ``nobroker bench`` is the small
quick figure that ships (nobroker.cli.bench); these are the full suites, run
from a clone. Bottom up (each module imports only those above it):

    plan.py         the sizes of a run (--quick, --full, --runs), a figure, scratch folders, the progress line
    report.py       the tables: the file storage's figures as text or Markdown; the Markdown both suites print
    sqlite_queue.py the hand-written sqlite3 queue (WAL, synchronous=FULL) the file storage is measured against
    engine.py       the comparison table: enqueue (1 and 4 processes, 8 threads), lease + ack, enqueue_many,
                    each beside the disk's limit and sqlite_queue in the same round, with CPU and bytes per job
    throughput.py   the file storage's throughput: a Worker's drain
    scale.py        the file storage at size: memory, opening with and without a snapshot
    peers.py        what a compaction or an opening costs the other processes, measured from outside (target 5)
    pickup.py       pickup by an idle Worker, and the CPU an idle Worker burns
    limited.py      the cost of a lease + ack under limits beside the same without, same run (issue 16)
    pg_baseline.py  the hand-written SKIP LOCKED queue the PostgreSQL storage is measured against
    pg.py           the PostgreSQL suite: nobroker beside that baseline, figure by figure (--pg)
    file.py         the command: flags, the file storage's suites in order (SUITES), the header, the table

A new suite of the file storage is one module with ``figures(root, plan)``
and one line in file.SUITES; the 1,000,000-job figures are scale.py's and
peers.py's at ``--full`` size.
"""
