"""The queue commands: `enqueue`, `lease`, `ack`, `nack`, `extend`, `stats`, `list` and `get`.

Owns: their text and JSON output, exit codes and refusals (bad payloads,
unknown ids, refused numbers of seconds), `enqueue --count` and Ctrl-C
during it (in-process: a real process is tests/test_cli_processes.py), and
that reading never creates a queue.
Imports: the standard library, nobroker and tests.clisupport.
"""

from __future__ import annotations

import os
import signal
import time
import unittest
from unittest import mock

from nobroker import JobState, Queue
from nobroker.cli import job_commands
from tests.clisupport import CliTestCase, Result


# ---------------------------------------------------------------- the queue commands
class EnqueueTests(CliTestCase):
    def test_enqueue_json_payload(self) -> None:
        result = self.ok("enqueue", '{"to": "ada@example.com"}', "--priority", "5")
        self.assertTrue(result.out.startswith("enqueued "), result.out)
        [job] = self.queue().list_jobs()
        self.assertEqual(job.payload, {"to": "ada@example.com"})
        self.assertEqual(job.priority, 5)
        self.assertIn(job.id, result.out)

    def test_enqueue_json_output_is_the_job(self) -> None:
        job = self.enqueue("hello", "--kind", "greet", "--max-attempts", "2", "--dedupe-key", "k1")
        self.assertEqual(job["payload"], "hello")
        self.assertEqual(job["kind"], "greet")
        self.assertEqual(job["max_attempts"], 2)
        self.assertEqual(job["dedupe_key"], "k1")
        self.assertEqual(job["state"], "ready")
        self.assertEqual(self.queue().get(job["id"]).payload, "hello")

    def test_enqueue_with_delay_is_delayed(self) -> None:
        self.enqueue("later", "--delay", "3600")
        stats = self.ok_json("stats")
        self.assertEqual(stats["delayed"], 1)  # type: ignore[index]
        self.assertEqual(stats["ready"], 0)  # type: ignore[index]

    def test_enqueue_with_id_is_idempotent(self) -> None:
        first = self.enqueue('{"order": 42}', "--id", "order-42")
        second = self.enqueue('{"order": 43}', "--id", "order-42")
        self.assertEqual(first["id"], "order-42")
        self.assertEqual(second["id"], "order-42")
        self.assertEqual(second["payload"], {"order": 42})
        self.assertEqual(len(self.queue()), 1)

    def test_enqueue_from_stdin(self) -> None:
        job = self.ok_json("enqueue", "-", stdin='{"from": "stdin", "list": [1, 2]}\n')
        self.assertEqual(job["payload"], {"from": "stdin", "list": [1, 2]})  # type: ignore[index]

    def test_enqueue_empty_stdin_is_refused(self) -> None:
        result = self.cli("enqueue", "-", stdin="  \n")
        self.assertEqual(result.code, 2)
        self.assertIn("empty", result.err)

    def test_bad_payloads_are_refused_and_nothing_is_enqueued(self) -> None:
        self.enqueue("first")
        for payload, needle in (("two words", "not valid JSON"), ('{"a": 1, "a": 2}', "twice"), ("NaN", "NaN")):
            with self.subTest(payload=payload):
                result = self.cli("enqueue", payload)
                self.assertEqual(result.code, 2, result.err)
                self.assertIn(needle, result.err)
                self.assertEqual(result.err.count("\n"), 1, result.err)
                self.assertEqual(result.out, "")
        self.assertEqual(self.ok_json("stats")["total"], 1)  # type: ignore[index]

    def test_enqueue_count(self) -> None:
        result = self.ok("enqueue", "tick", "--count", "5")
        ids = result.out.split()
        self.assertEqual(len(ids), 5)
        self.assertEqual(len(set(ids)), 5)
        self.assertIn("enqueued 5 jobs", result.err)
        jobs = self.ok_json("enqueue", "tock", "--count", "3")
        self.assertEqual(len(jobs), 3)  # type: ignore[arg-type]
        self.assertEqual({j["payload"] for j in jobs}, {"tock"})  # type: ignore[union-attr]
        self.assertEqual(len(self.queue()), 8)

    def interrupted_count(self, *, signals_in_second_batch: int, json_output: bool = False) -> tuple[Result, Queue]:
        """``enqueue --count 10`` in batches of 3 with Ctrl-C arriving while the second batch is written."""
        calls = []
        real = Queue.enqueue_many

        def enqueue_many(queue: Queue, *args: object, **kwargs: object) -> list:
            calls.append(1)
            if len(calls) == 2:
                for _ in range(signals_in_second_batch):
                    os.kill(os.getpid(), signal.SIGINT)
            return real(queue, *args, **kwargs)  # type: ignore[arg-type]

        with mock.patch.object(job_commands, "ENQUEUE_COUNT_BATCH", 3), mock.patch.object(Queue, "enqueue_many", enqueue_many):
            result = self.cli(*(["--json"] if json_output else []), "enqueue", "x", "--count", "10")
        return result, self.queue()

    def test_ctrl_c_during_count_reports_what_was_enqueued(self) -> None:
        result, queue = self.interrupted_count(signals_in_second_batch=1)
        self.assertEqual(result.code, 130, result.err)
        ids = result.out.split()
        self.assertEqual(len(ids), 6, "the batch being written when Ctrl-C came is finished and reported")
        self.assertEqual(sorted(ids), sorted(job.id for job in queue.list_jobs()))
        self.assertIn("interrupted: enqueued 6 of 10 jobs (their ids are above)", result.err)
        as_json, queue = self.interrupted_count(signals_in_second_batch=1, json_output=True)
        self.assertEqual(as_json.code, 130, as_json.err)
        self.assertEqual(len(as_json.json()), 6)  # type: ignore[arg-type]
        self.assertEqual(len(queue), 12)

    def test_a_second_ctrl_c_quits_during_the_batch_and_says_so(self) -> None:
        result, queue = self.interrupted_count(signals_in_second_batch=2)
        self.assertEqual(result.code, 130, result.err)
        self.assertEqual(result.out.split(), [job.id for job in queue.list_jobs()])
        self.assertIn("interrupted: enqueued 3 of 10 jobs", result.err)
        self.assertIn("may or may not be in the queue", result.err)

    def test_count_with_id_is_a_usage_error(self) -> None:
        result = self.cli("enqueue", "x", "--count", "2", "--id", "a")
        self.assertEqual(result.code, 2)
        self.assertIn("--count", result.err)

    def test_negative_delay_is_a_usage_error(self) -> None:
        result = self.cli("enqueue", "x", "--delay", "-1")
        self.assertEqual(result.code, 2)
        self.assertFalse(os.path.exists(self.qdir))

    def test_oversized_priority_is_refused_cleanly(self) -> None:
        result = self.cli("enqueue", "x", "--priority", str(2**40))
        self.assertIn(result.code, (1, 2))
        self.assertTrue(result.err.startswith("nobroker: error: "), result.err)
        self.assertNotIn("Traceback", result.err)


class LeaseAckNackTests(CliTestCase):
    def test_lease_and_ack_with_result(self) -> None:
        job = self.enqueue('{"resize": "a.jpg"}')
        leased = self.ok_json("lease", "--visibility-timeout", "60")
        self.assertEqual(len(leased), 1)  # type: ignore[arg-type]
        self.assertEqual(leased[0]["id"], job["id"])  # type: ignore[index]
        self.assertEqual(leased[0]["state"], "leased")  # type: ignore[index]
        self.assertAlmostEqual(leased[0]["lease_deadline"], time.time() + 60, delta=30)  # type: ignore[index]
        result = self.ok("ack", job["id"], "--result", '{"pages": 12}')
        self.assertIn("acked", result.out)
        done = self.queue().get(job["id"])
        self.assertEqual(done.state, JobState.DONE)
        self.assertEqual(done.result, {"pages": 12})

    def test_lease_human_output_and_nothing_ready(self) -> None:
        job = self.enqueue("one")
        result = self.ok("lease")
        self.assertIn(f"leased {job['id']}", result.out)
        self.assertIn("attempt 1 of 5", result.out)
        self.assertIn("token", result.out)
        self.assertIn("no job is ready", self.ok("lease").out)
        self.assertEqual(self.ok_json("lease"), [])

    def test_lease_count_and_kinds(self) -> None:
        for kind in ("a", "b", "c"):
            self.enqueue(kind, "--kind", kind)
        leased = self.ok_json("lease", "--count", "10", "--kind", "a", "--kind", "c")
        self.assertEqual(sorted(j["payload"] for j in leased), ["a", "c"])  # type: ignore[union-attr]

    def test_ack_of_an_unknown_id_is_one_line_exit_1(self) -> None:
        self.enqueue("x")
        self.assert_one_line_error(self.cli("ack", "no-such-job"))

    def test_nack_retries_then_permanent_goes_dead(self) -> None:
        job = self.enqueue("flaky", "--max-attempts", "3")
        self.ok("lease")
        nacked = self.ok_json("nack", job["id"], "--error", "smtp timeout", "--delay", "0")
        self.assertEqual(nacked["state"], "ready")  # type: ignore[index]
        self.assertEqual(nacked["last_error"], "smtp timeout")  # type: ignore[index]
        self.ok("lease")
        result = self.ok("nack", job["id"], "--permanent", "--error", "no such user")
        self.assertIn("dead", result.out)
        self.assertEqual(self.queue().get(job["id"]).state, JobState.DEAD)

    def test_nack_delay_and_permanent_are_exclusive(self) -> None:
        job = self.enqueue("a")
        self.ok("lease")
        result = self.cli("nack", job["id"], "--delay", "5", "--permanent")
        self.assertEqual(result.code, 2, result.err)
        self.assertIn("not allowed with argument", result.err)
        self.assertEqual(self.queue().get(job["id"]).state, JobState.LEASED)

    def test_nack_human_output_says_when_it_runs_again(self) -> None:
        job = self.enqueue("flaky")
        self.ok("lease")
        result = self.ok("nack", job["id"], "--delay", "120")
        self.assertIn("ready again in", result.out)

    def test_extend_sets_the_deadline_from_now(self) -> None:
        job = self.enqueue("slow")
        self.ok("lease", "--visibility-timeout", "5")
        extended = self.ok_json("extend", job["id"], "600")
        self.assertAlmostEqual(extended["lease_deadline"], time.time() + 600, delta=30)  # type: ignore[index]
        self.assertIn("lease ends", self.ok("extend", job["id"], "60").out)

    def test_extend_of_a_job_not_leased_is_an_error(self) -> None:
        job = self.enqueue("idle")
        self.assert_one_line_error(self.cli("extend", job["id"], "60"))

    def test_a_refused_number_of_seconds_is_described_as_it_is_checked(self) -> None:
        positive = self.cli("extend", "some-id", "-1")
        self.assertEqual(positive.code, 2)
        self.assertIn("expected a finite number of seconds > 0, got '-1'", positive.err)
        self.assertNotIn(">= 0", positive.err)
        self.assertIn("> 0, got 'inf'", self.cli("lease", "--visibility-timeout", "inf").err)
        self.assertIn(">= 0, got '-2'", self.cli("enqueue", "a", "--delay", "-2").err)

    def test_extend_needs_positive_seconds(self) -> None:
        self.assertEqual(self.cli("extend", "x", "0").code, 2)


class ReadingTests(CliTestCase):
    def test_stats_human_and_json(self) -> None:
        self.enqueue("a")
        self.enqueue("b", "--delay", "3600")
        stats = self.ok_json("stats")
        self.assertEqual(stats, {"ready": 1, "delayed": 1, "leased": 0, "done": 0, "dead": 0, "total": 2})
        out = self.ok("stats").out
        self.assertRegex(out, r"ready\s+1")
        self.assertRegex(out, r"total\s+2")

    def test_reading_a_missing_queue_does_not_create_it(self) -> None:
        for command in (["stats"], ["list"], ["get", "x"], ["dlq"], ["inspect"], ["verify"], ["recover"]):
            with self.subTest(command=command):
                self.assert_one_line_error(self.cli(*command))
                self.assertFalse(os.path.exists(self.qdir))

    def test_reading_an_unknown_queue_name_names_the_ones_found(self) -> None:
        self.enqueue("a")
        result = self.cli("--queue", "emials", "stats")
        self.assert_one_line_error(result)
        self.assertIn("'default'", result.err)

    def test_list_filters_and_pages(self) -> None:
        ids = [self.enqueue(str(n))["id"] for n in range(5)]
        self.enqueue("other", "--kind", "special")
        listed = self.ok_json("list")
        self.assertEqual([j["id"] for j in listed][:5], ids)  # type: ignore[index]
        page = self.ok_json("list", "--limit", "2", "--offset", "1")
        self.assertEqual([j["id"] for j in page], ids[1:3])  # type: ignore[union-attr]
        special = self.ok_json("list", "--kind", "special")
        self.assertEqual([j["payload"] for j in special], ["other"])  # type: ignore[union-attr]
        self.ok("lease")
        leased = self.ok_json("list", "--state", "leased")
        self.assertEqual([j["id"] for j in leased], ids[:1])  # type: ignore[union-attr]

    def test_list_state_delayed_and_runnable_split_ready_as_stats_counts_it(self) -> None:
        now = self.enqueue('"now"')
        later = self.enqueue('"later"', "--delay", "3600")

        def ids(*args: str) -> list[str]:
            return [j["id"] for j in self.ok_json("list", *args)]  # type: ignore[index, union-attr]

        self.assertEqual(ids("--state", "delayed"), [later["id"]])
        self.assertEqual(ids("--state", "runnable"), [now["id"]])
        self.assertEqual(ids("--state", "ready"), [now["id"], later["id"]])
        stats = self.ok_json("stats")
        self.assertEqual((stats["ready"], stats["delayed"]), (1, 1))  # type: ignore[index]
        self.assertIn("delayed (in", self.ok("list", "--state", "delayed").out)

    def test_list_human_table_and_paging_hint(self) -> None:
        for n in range(3):
            self.enqueue(f'{{"n": {n}}}')
        result = self.ok("list", "--limit", "2")
        lines = result.out.splitlines()
        self.assertTrue(lines[0].startswith("ID"))
        self.assertEqual(len(lines), 3)
        self.assertIn('{"n":0}', lines[1])
        self.assertIn("--limit 0", result.err)
        self.assertEqual(len(self.ok("list", "--limit", "0").out.splitlines()), 4)

    def test_list_refuses_an_unknown_state(self) -> None:
        self.assertEqual(self.cli("list", "--state", "sleeping").code, 2)

    def test_get_shows_the_whole_job(self) -> None:
        job = self.enqueue('{"deep": {"x": [1, 2]}}', "--kind", "k")
        self.ok("lease")
        self.ok("nack", job["id"], "--error", "line one\nline two", "--delay", "0")
        out = self.ok("get", job["id"]).out
        self.assertIn(job["id"], out)
        self.assertIn("line two", out)
        self.assertIn('"x": [', out)
        got = self.ok_json("get", job["id"])
        self.assertEqual(got["payload"], {"deep": {"x": [1, 2]}})  # type: ignore[index]
        self.assertEqual(got["attempts"], 1)  # type: ignore[index]
        self.assertIsNone(got["traceback"])  # type: ignore[index]

    def test_get_shows_a_failed_handlers_traceback(self) -> None:
        job = self.enqueue('"x"')
        with Queue(self.qdir) as q:
            q.nack(q.lease_one(), error="ValueError: bad", traceback='Traceback (most recent call last):\n  File "h.py", line 2\nValueError: bad\n')
        out = self.ok("get", job["id"]).out
        self.assertIn("last error   ValueError: bad", out)
        self.assertIn("traceback    Traceback (most recent call last):", out)
        self.assertIn('               File "h.py", line 2', out)
        self.assertEqual(self.ok_json("get", job["id"])["traceback"].splitlines()[-1], "ValueError: bad")  # type: ignore[index]

    def test_get_unknown_id_is_one_line_exit_1(self) -> None:
        self.enqueue("a")
        result = self.cli("get", "nope")
        self.assert_one_line_error(result)
        self.assertIn("nope", result.err)

    def test_terminal_control_characters_are_escaped(self) -> None:
        self.enqueue("x", "--id", "evil\x1b[2Jid")
        for command in (["list"], ["get", "evil\x1b[2Jid"]):
            with self.subTest(command=command):
                out = self.ok(*command).out
                self.assertNotIn("\x1b", out)
                self.assertIn("evil", out)


if __name__ == "__main__":
    unittest.main()
