"""The embedded file storage: one folder on local disk, one append-only log per queue.

Owns nothing itself: it names the package's face, FileStorage. Its modules, in
the order they may import each other (each only earlier ones): fs (the I/O
seam), framing (the bytes of the format), log (one generation file), lock,
wake, replay (records in, state out), leases (the writer's decisions),
snapshot, compaction, storage (FileStorage), admin (inspect, verify, repair).
Imports: storage.
"""

from __future__ import annotations

from .storage import FileStorage

__all__ = ["FileStorage"]
