"""The examples README points to: the handlers do what their names say, the demos run to the end.

Owns: ``HandlersTest`` (examples/handlers.py: ok, echo, flaky, permanent,
slow) and ``ExamplesTest`` (examples/demo.py and examples/video_demo.py, run
as a user would, in subprocesses, with nothing on PYTHONPATH). Imports: the
standard library, nobroker, examples.handlers, tests.support and
tests.toolingsupport.
"""

from __future__ import annotations

import os
import tempfile
import time
import unittest

from nobroker import Job, PermanentError

from examples import handlers
from tests.support import slow
from tests.toolingsupport import bare_env, run


def make_job(payload: object, attempts: int = 1) -> Job:
    return Job(id="job-1", payload=payload, attempts=attempts)


class HandlersTest(unittest.TestCase):
    def test_ok_and_echo_succeed(self) -> None:
        self.assertEqual(handlers.ok(make_job({"a": 1}, attempts=2)), {"ok": True, "attempt": 2})
        self.assertEqual(handlers.echo(make_job({"a": [1, 2]})), {"a": [1, 2]})

    def test_flaky_fails_the_first_attempts_then_succeeds(self) -> None:
        for attempt in (1, 2):
            with self.assertRaises(RuntimeError):
                handlers.flaky(make_job({}, attempts=attempt))
        self.assertEqual(handlers.flaky(make_job({}, attempts=3))["attempt"], 3)
        self.assertEqual(handlers.flaky(make_job({"fail_times": 0}, attempts=1))["ok"], True)
        with self.assertRaises(RuntimeError):
            handlers.flaky(make_job({"fail_times": 5}, attempts=5))

    def test_permanent_raises_permanent_error(self) -> None:
        with self.assertRaises(PermanentError):
            handlers.permanent(make_job("anything"))

    def test_slow_sleeps_for_the_payloads_seconds(self) -> None:
        start = time.monotonic()
        result = handlers.slow(make_job({"seconds": 0.2}))
        self.assertGreaterEqual(time.monotonic() - start, 0.2)
        self.assertEqual(result["slept"], 0.2)


class ExamplesTest(unittest.TestCase):
    @slow
    def test_demo_runs_to_completion(self) -> None:
        proc = run(["examples/demo.py"], env=bare_env(), timeout=180)
        self.assertEqual(proc.returncode, 0, proc.stdout[-3000:] + proc.stderr[-3000:])
        for title in ("1. Enqueue", "4. A worker is killed mid-job", "5. Fencing", "8. Compaction", "10. Where it all lives"):
            self.assertIn(title, proc.stdout)
        self.assertIn("NotLeasedError", proc.stdout)
        self.assertIn("Done in", proc.stdout)

    def test_demo_keeps_the_queue_when_given_a_folder(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            proc = run(["examples/video_demo.py", "--fast", "--scenes", "1,7", "--dir", tmp], env=bare_env())
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
            self.assertIn("7. Idempotent enqueue", proc.stdout)
            self.assertNotIn("2. Lease and ack", proc.stdout)
            self.assertTrue(os.listdir(tmp), "the queue files stay in --dir")

    def test_video_demo_fast_runs_one_scene(self) -> None:
        proc = run(["examples/video_demo.py", "--fast", "--scenes", "1"], env=bare_env())
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("1. Enqueue", proc.stdout)
        self.assertIn("Done in", proc.stdout)

    def test_video_demo_rejects_a_scene_that_does_not_exist(self) -> None:
        proc = run(["examples/video_demo.py", "--fast", "--scenes", "99"], env=bare_env())
        self.assertEqual(proc.returncode, 2)
        self.assertIn("scenes run from 1 to", proc.stderr)


if __name__ == "__main__":
    unittest.main()
