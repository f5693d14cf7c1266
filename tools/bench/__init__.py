"""The benchmark suites behind ``python make.py bench``: kept out of the package, the wheel and the single-file app.

Owns: nothing but this map. Imports: nothing. ``nobroker bench`` is the small
quick figure that ships (nobroker.cli.bench); these are the full suites, run
from a clone. Bottom up (each module imports only those above it):

    plan.py         the sizes of a run (--quick, --full, --runs), a figure, scratch folders, the progress line
    report.py       the tables: the file storage's figures as text or Markdown; the Markdown both suites print
    throughput.py   the file storage's throughput: enqueue (threads, processes), lease + ack, a Worker's drain, enqueue_many
    scale.py        the file storage at size: memory, opening with and without a snapshot, compaction beside a peer
    pickup.py       pickup by an idle Worker, and the CPU an idle Worker burns
    pg_baseline.py  the hand-written SKIP LOCKED queue the PostgreSQL storage is measured against
    pg.py           the PostgreSQL suite: nobroker beside that baseline, figure by figure (--pg)
    file.py         the command: flags, the file storage's suites in order (SUITES), the header, the table

A new suite of the file storage is one module with ``figures(root, plan)``
and one line in file.SUITES; the 1,000,000-job figures are scale.py's at
``--full`` size; a hand-written sqlite3 queue to measure the file storage
against would sit beside pg_baseline.py as its own baseline module.
"""
