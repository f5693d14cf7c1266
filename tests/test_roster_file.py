"""The file storage's worker announcements on disk: a private folder, whole files, strangers skipped.

Owns the file-only checks of roster.py (the shared ones are in
tests/semantics_roster.py). Imports: the standard library, nobroker and
tests.support, tests.semantics_roster.
"""

from __future__ import annotations

import os
import stat

from nobroker import Queue
from nobroker.announcements import MAX_ANNOUNCE_BYTES
from tests.semantics_roster import info
from tests.support import TempDirTestCase


class RosterFiles(TempDirTestCase):
    def test_one_private_file_per_worker_in_a_private_folder_and_no_temp_left(self) -> None:
        with Queue(self.dir, name="emails") as q:
            one = info()
            q.announce_worker(one)
            q.announce_worker(info())
            folder = os.path.join(self.dir, "emails.workers")
            self.assertEqual(stat.S_IMODE(os.stat(folder).st_mode), 0o700)
            names = sorted(os.listdir(folder))
            self.assertEqual(len(names), 2)
            self.assertTrue(all(n.endswith(".json") for n in names), names)
            for n in names:
                self.assertEqual(stat.S_IMODE(os.stat(os.path.join(folder, n)).st_mode), 0o600)
            q.retire_worker(one.id)
            self.assertEqual(len(os.listdir(folder)), 1, "retired: its file is gone, and no temp file is left")

    def test_files_that_are_not_announcements_are_skipped(self) -> None:
        with Queue(self.dir) as q:
            good = info()
            q.announce_worker(good)
            folder = os.path.join(self.dir, "default.workers")
            with open(os.path.join(folder, "0123456789abcdef.json"), "w") as f:
                f.write('{"id": "0123456789abcdef", "name": "half')  # cut short
            with open(os.path.join(folder, "fedcba9876543210.json"), "w") as f:
                f.write('{"not": "ours"}')
            with open(os.path.join(folder, "1111111111111111.json"), "wb") as f:
                f.write(b"x" * (MAX_ANNOUNCE_BYTES + 10))
            os.symlink(os.path.join(folder, good.id + ".json"), os.path.join(folder, "2222222222222222.json"))
            with self.assertLogs("nobroker.filestore", "WARNING") as logs:
                self.assertEqual(q.workers(), [good])
            self.assertEqual(len(logs.records), 4)

    def test_the_folder_is_no_queue_and_no_leftover(self) -> None:
        from nobroker import list_queues

        with Queue(self.dir, name="emails") as q:
            q.enqueue("x")
            q.announce_worker(info())
        self.assertEqual(list_queues(self.dir), ["emails"])
        with Queue(self.dir, name="emails") as q:  # reopening removes leftovers: not this folder
            self.assertEqual(len(q.workers()), 1)
