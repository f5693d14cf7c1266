"""The operator's tools for a file queue, under their documented name: inspect, verify, repair.

Owns nothing: it hands on the public names of nobroker.filestore.admin, where
they live with the rest of the file engine, so ``nobroker.maintenance``
keeps working for code and docs that use it. Imports: filestore.admin.
"""

from __future__ import annotations

from .filestore.admin import (
    RecordView,
    RepairReport,
    VerifyReport,
    inspect_log,
    list_queues,
    repair,
    verify,
)

__all__ = ["RecordView", "RepairReport", "VerifyReport", "inspect_log", "list_queues", "repair", "verify"]
