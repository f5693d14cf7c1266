"""What ``repair`` reports: which jobs lost records, by id where the bytes still read, by count otherwise.

Owns: ``build_damaged_queue`` (a log of four jobs with three records
damaged, each in its own way; tests/test_cli_maintenance.py repairs it too)
and ``RepairNamesTheLosses``. Imports: the standard library, nobroker and
tests.support.
"""

from __future__ import annotations

import os
import unittest

from nobroker import Queue
from nobroker.filestore.layout import log_path
from tests.support import TempDirTestCase


def build_damaged_queue(directory: str) -> int:
    """A log of four jobs in which three records are damaged, each in its own way.

    job-c's ENQUEUE (its later LEASE and ACK survive: the job is lost),
    job-b's ACK (the job survives, leased again: its state is older), and
    the type byte of job-a's LEASE header (nothing of that record can be read).
    Returns the size of that LEASE record.
    """
    from nobroker.filestore import admin as maintenance

    with Queue(directory) as q:
        for name in "abcd":
            q.enqueue({"job": name}, job_id=f"job-{name}")
        leased = {job.id: job for job in q.lease(3)}
        q.ack(leased["job-b"])
        q.ack(leased["job-c"])
    views = [v for v in maintenance.inspect_log(directory) if v.type_name != "HEADER"]

    def record(type_name: str, job_id: str) -> maintenance.RecordView:
        return next(v for v in views if v.type_name == type_name and v.body and v.body["id"] == job_id)

    path = log_path(directory, "default", 0)
    with open(path, "r+b") as f:
        for view in (record("ENQUEUE", "job-c"), record("ACK", "job-b")):
            f.seek(view.offset + 9 + view.length - 2)  # inside the body, well after the id
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0x55]))
        lease = record("LEASE", "job-a")
        f.seek(lease.offset + 4)  # the header's type byte
        f.write(b"\xee")
    return 9 + lease.length


class RepairNamesTheLosses(TempDirTestCase):
    """repair says which jobs lost records: ids where the bytes still read, counts otherwise."""

    def test_lost_changed_and_unknown(self) -> None:
        from nobroker.filestore import admin as maintenance

        lease_size = build_damaged_queue(self.dir)
        report = maintenance.repair(self.dir)
        self.assertTrue(report.repaired)
        self.assertEqual((report.lost_jobs, report.lost_job_count), (["job-c"], 1))
        self.assertEqual((report.changed_jobs, report.changed_job_count), (["job-b"], 1))
        self.assertEqual(report.records_dropped, 2, "the two whose headers still read; the third is unreadable bytes")
        self.assertEqual(len(report.damage), 3)
        self.assertEqual(report.unidentified_records, 0)
        self.assertEqual(report.unreadable_bytes, lease_size, "the record whose header is unreadable")
        self.assertEqual([s.ids for s in report.damage], [["job-c"], [], ["job-b"]])
        as_dict = report.to_dict()
        self.assertEqual(as_dict["lost_jobs"], ["job-c"])
        self.assertEqual(as_dict["damage"][0]["ids"], ["job-c"])
        with Queue(self.dir) as q:
            states = {job.id: job.state.value for job in q.list_jobs()}
        self.assertEqual(states, {"job-a": "ready", "job-b": "leased", "job-d": "ready"})


if __name__ == "__main__":
    unittest.main()
