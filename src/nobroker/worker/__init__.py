"""The Worker: runs a handler over leased jobs, concurrently and safely.

Owns nothing itself: it names the package's face (Worker, WorkerStats,
WorkQueue), which live in worker.py. Imports: worker.
"""

from __future__ import annotations

from .worker import Worker, WorkerStats, WorkQueue

__all__ = ["Worker", "WorkerStats", "WorkQueue"]
