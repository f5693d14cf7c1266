"""The file storage's maintenance commands: `compact`, `inspect`, `verify`, `recover` and `repair`.

Owns: their reports (text and JSON) on a healthy log, a torn tail and a
damaged record, that verify only reads, that repair keeps the damaged file
aside and names the jobs it lost, and that opening a damaged queue is one
line pointing at repair. Imports: the standard library,
nobroker.filestore.admin, tests.support, tests.clisupport and
tests.test_repair_report (build_damaged_queue, inside one test).
"""

from __future__ import annotations

import os
import shutil
import unittest

from nobroker.filestore import admin as maintenance
from tests.clisupport import CliTestCase, run_main
from tests.support import records_end


# ---------------------------------------------------------------- maintenance
class MaintenanceTests(CliTestCase):
    def fill(self, n: int = 4) -> list[str]:
        return [self.enqueue(f'{{"n": {i}}}')["id"] for i in range(n)]

    def read_log(self) -> bytes:
        with open(self.log_path(), "rb") as f:
            return f.read()

    def damage_middle_record(self) -> None:
        """Flip a byte inside the body of a record that has whole records after it."""
        views = [v for v in maintenance.inspect_log(self.qdir) if v.type_name != "HEADER"]
        self.assertGreaterEqual(len(views), 3)
        target = views[1]
        with open(self.log_path(), "r+b") as f:
            f.seek(target.offset + target.length - 2)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0x55]))

    def append_torn_tail(self) -> int:
        junk = b"\x40\x00\x00\x00\x01\xde\xad"  # a record header promising more than is there
        with open(self.log_path(), "r+b") as f:
            f.seek(records_end(self.log_path()))  # where the next record would go (a version 2 file has room after it)
            f.write(junk)
        return len(junk)

    def test_compact_drops_done_jobs(self) -> None:
        ids = self.fill(3)
        self.ok("lease")
        self.ok("ack", ids[0])
        result = self.cli("--json", "compact")
        self.assertEqual(result.code, 0, result.err)
        self.assertEqual(result.err, "")  # no progress drawn when stderr is not a terminal
        data = result.json()
        self.assertEqual(data["jobs_dropped"], 1)  # type: ignore[index]
        self.assertEqual(data["jobs_kept"], 2)  # type: ignore[index]
        self.assertEqual(data["new_generation"], data["old_generation"] + 1)  # type: ignore[index]
        self.assertEqual(len(self.queue()), 2)
        self.assertIn("compacted: kept 2 job(s), dropped 0 done, generation 1 -> 2", self.ok("compact").out)

    def test_inspect_prints_every_record(self) -> None:
        ids = self.fill(2)
        out = self.ok("inspect").out
        self.assertIn("HEADER", out)
        self.assertEqual(out.count("ENQUEUE"), 2)
        for job_id in ids:
            self.assertIn(job_id, out)
        self.assertIn("2 record(s), no damage", out)
        data = self.ok_json("inspect")
        self.assertEqual(data["count"], 2)  # type: ignore[index]
        self.assertEqual(data["records"][0]["offset"], 0)  # type: ignore[index]
        self.assertEqual([r["type_name"] for r in data["records"]], ["HEADER", "ENQUEUE", "ENQUEUE"])  # type: ignore[index]
        self.assertIsNone(data["damage"])  # type: ignore[index]

    def test_inspect_a_chosen_generation(self) -> None:
        ids = self.fill(2)
        self.ok("lease")
        self.ok("ack", ids[0])
        before = self.ok_json("inspect", "--generation", "0")
        self.assertIn("ACK", [r["type_name"] for r in before["records"]])  # type: ignore[index]
        self.ok("compact")
        current = self.ok_json("inspect")
        self.assertEqual(self.ok_json("inspect", "--generation", "1"), current)
        names = [r["type_name"] for r in current["records"]]  # type: ignore[index]
        self.assertNotIn("ACK", names)
        self.assertEqual(names.count("ENQUEUE"), 1)
        self.assert_one_line_error(self.cli("inspect", "--generation", "7"))

    def test_inspect_reports_damage_where_found(self) -> None:
        self.fill(2)
        size = records_end(self.log_path())
        self.append_torn_tail()
        out = self.ok("inspect").out
        self.assertIn("DAMAGE", out)
        self.assertIn(f"damage at offset {size:,}", out)
        data = self.ok_json("inspect")
        self.assertEqual(data["damage"]["offset"], size)  # type: ignore[index]

    def test_verify_healthy_and_damaged(self) -> None:
        self.fill(4)
        healthy = self.ok("verify")
        self.assertTrue(healthy.out.startswith("ok:"), healthy.out)
        self.assertTrue(self.ok_json("verify")["ok"])  # type: ignore[index]
        self.damage_middle_record()
        before = self.read_log()
        damaged = self.cli("verify")
        self.assertEqual(damaged.code, 1)
        self.assertIn("problem", damaged.out)
        self.assertIn("repair", damaged.out)
        as_json = self.cli("--json", "verify")
        self.assertEqual(as_json.code, 1)
        self.assertFalse(as_json.json()["ok"])  # type: ignore[index]
        self.assertEqual(self.read_log(), before)  # verify only reads

    def test_opening_a_damaged_queue_is_one_line_pointing_at_repair(self) -> None:
        self.fill(4)
        self.damage_middle_record()
        result = self.cli("stats")
        self.assert_one_line_error(result)
        self.assertIn("repair", result.err)

    def test_recover_reports_a_torn_tail(self) -> None:
        self.fill(2)
        clean = self.ok("recover")
        self.assertIn("clean", clean.out)
        torn = self.append_torn_tail()
        report = self.ok_json("recover")
        self.assertEqual(report["torn_bytes"], torn)  # type: ignore[index]
        self.assertFalse(report["clean"])  # type: ignore[index]
        self.assertEqual(report["jobs"], 2)  # type: ignore[index]
        self.assertTrue(self.ok_json("recover")["clean"])  # type: ignore[index]

    def test_repair_keeps_the_damaged_file_aside(self) -> None:
        self.fill(4)
        self.assertIn("nothing to repair", self.ok("repair").out)
        self.damage_middle_record()
        refused = self.cli("repair")
        self.assertEqual(refused.code, 2)
        self.assertIn("--yes", refused.err)
        report = self.ok_json("repair", "--yes")
        self.assertTrue(report["repaired"])  # type: ignore[index]
        self.assertTrue(os.path.exists(report["kept_aside"]))  # type: ignore[index]
        self.assertEqual(self.ok("verify").code, 0)
        self.assertGreaterEqual(self.ok_json("stats")["total"], 1)  # type: ignore[index]


    def test_repair_names_the_jobs_it_lost(self) -> None:
        from tests.test_repair_report import build_damaged_queue

        os.mkdir(self.qdir)
        lease_size = build_damaged_queue(self.qdir)
        aside = os.path.join(self.dir, "copy")
        shutil.copytree(self.qdir, aside)
        out = self.ok("repair", "--yes").out
        self.assertIn("dropped 2 record(s)", out)
        self.assertIn("lost 1 job(s) whose enqueue was in the damage: job-c", out)
        self.assertIn("kept 1 job(s) that lost later records (their state may be older than it was: "
                      "a done job may run again): job-b", out)
        self.assertIn(f"also lost, job unknown: {lease_size:,} byte(s) in which no record can be made out", out)
        report = run_main(["--dir", aside, "--json", "repair", "--yes"]).json()
        self.assertEqual(report["lost_jobs"], ["job-c"])  # type: ignore[index]
        self.assertEqual(report["changed_jobs"], ["job-b"])  # type: ignore[index]
        self.assertEqual(report["unreadable_bytes"], lease_size)  # type: ignore[index]


if __name__ == "__main__":
    unittest.main()
