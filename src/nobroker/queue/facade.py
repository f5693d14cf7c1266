"""The public Queue: one facade, two storages.

Owns: Queue, the parts put together (each part is a module of this package).
Imports: work, looking, periodic, control, limiting, explaining.
"""

from __future__ import annotations

from .control import ControlMethods
from .explaining import ExplainMethods
from .limiting import LimitMethods
from .looking import LookMethods
from .periodic import ScheduleMethods
from .work import WorkMethods


class Queue(WorkMethods, ExplainMethods, LookMethods, ScheduleMethods, ControlMethods, LimitMethods):
    """A durable job queue. Enqueue work, lease it, ack it.

    ``Queue("./jobs")`` keeps the queue in a folder on local disk (created if
    missing); ``Queue("postgresql://...")`` keeps it in PostgreSQL (needs the
    optional ``psycopg`` driver). Both behave the same.

    ``fsync=False`` skips fsync: faster, and NOT durable (a power cut can lose
    acknowledged work). ``auto_compact`` is the share of superseded bytes in
    the log at which the file storage compacts by itself (None: never).
    ``create=False`` opens only a queue that is already there and raises
    QueueNotFoundError instead of creating one: on the file storage the
    folder must hold this queue's files; on PostgreSQL the nobroker schema
    must exist (its queues are rows of one table, so opening one creates
    nothing else). A location that is neither a folder path nor a PostgreSQL
    DSN (``mysql://...``) raises UnknownStorageError, and nothing is created.
    """
