"""The Worker in real processes: SIGTERM lets the job finish, a second SIGINT leaves at once, SIGKILL's job comes back.

Owns: ``ProcessTests`` and ``WORKER_SCRIPT``, the worker process they start
(it marks each job it starts in a folder and waits for a "go" file); also an
idle worker process woken by a job from another. Imports: the standard
library, the public ``nobroker`` API, tests.support and tests.workersupport.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import unittest
from typing import Any

from nobroker import JobState, Queue, Worker
from tests.support import TempDirTestCase, wait_until
from tests.workersupport import LONG_POLL, PATIENCE, SRC_DIR


WORKER_SCRIPT = r"""
import json, logging, os, sys, time
from nobroker import Queue, Worker

queue_dir, marks, mode, visibility = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
poll_interval = float(sys.argv[5]) if len(sys.argv) > 5 else 0.05
logging.basicConfig(filename=os.path.join(marks, "worker.log"), level=logging.INFO,
                    format="%(levelname)s %(name)s %(message)s")

def handler(job):
    open(os.path.join(marks, "started-" + job.id), "w").close()
    if mode == "block":
        time.sleep(120)
    while not os.path.exists(os.path.join(marks, "go")):
        time.sleep(0.01)
    return {"finished": job.payload}

queue = Queue(queue_dir, visibility_timeout=visibility)
try:
    stats = Worker(queue, handler, poll_interval=poll_interval).run()
except KeyboardInterrupt:
    sys.exit(130)
finally:
    queue.close()
print(json.dumps(stats.to_dict()))
"""


class ProcessTests(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.queue_dir = os.path.join(self.dir, "q")
        self.marks = os.path.join(self.dir, "marks")
        os.mkdir(self.marks)
        self.script = os.path.join(self.dir, "worker_script.py")
        with open(self.script, "w", encoding="utf-8") as fh:
            fh.write(WORKER_SCRIPT)
        self.queue = Queue(self.queue_dir)
        self.addCleanup(self.queue.close)

    def start_worker(self, mode: str, visibility: float, poll_interval: float = 0.05) -> subprocess.Popen[str]:
        env = dict(os.environ, PYTHONPATH=SRC_DIR)
        child = subprocess.Popen(
            [sys.executable, self.script, self.queue_dir, self.marks, mode, str(visibility), str(poll_interval)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

        def reap() -> None:
            if child.poll() is None:
                child.kill()
            child.communicate()

        self.addCleanup(reap)
        return child

    def mark(self, name: str) -> str:
        return os.path.join(self.marks, name)

    def wait_for_log(self, text: str) -> bool:
        def found() -> bool:
            try:
                with open(self.mark("worker.log"), encoding="utf-8") as fh:
                    return text in fh.read()
            except FileNotFoundError:
                return False

        return wait_until(found, PATIENCE, 0.02)

    def test_sigterm_lets_the_running_job_finish_and_ack(self) -> None:
        first = self.queue.enqueue("first", job_id="first")
        second = self.queue.enqueue("second", job_id="second")
        child = self.start_worker("wait-go", visibility=30.0)
        self.assertTrue(wait_until(lambda: os.path.exists(self.mark("started-first")), PATIENCE))
        child.send_signal(signal.SIGTERM)
        self.assertTrue(self.wait_for_log("signal received"))
        open(self.mark("go"), "w").close()
        out, err = child.communicate(timeout=PATIENCE)
        self.assertEqual(child.returncode, 0, err)
        self.assertEqual(json.loads(out)["succeeded"], 1)
        self.assertEqual(self.queue.get(first.id).state, JobState.DONE)
        self.assertEqual(self.queue.get(first.id).result, {"finished": "first"})
        self.assertEqual((self.queue.get(second.id).state, self.queue.get(second.id).attempts), (JobState.READY, 0))

    def test_second_sigint_exits_at_once_and_leaves_the_lease_to_expire(self) -> None:
        job = self.queue.enqueue("stuck", job_id="stuck")
        child = self.start_worker("block", visibility=30.0)
        self.assertTrue(wait_until(lambda: os.path.exists(self.mark("started-stuck")), PATIENCE))
        child.send_signal(signal.SIGINT)
        self.assertTrue(self.wait_for_log("signal received"))
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=PATIENCE)
        self.assertEqual(child.returncode, 130, err)
        stored = self.queue.get(job.id)
        self.assertEqual((stored.state, stored.attempts), (JobState.LEASED, 1))

    def test_an_idle_worker_is_woken_by_a_job_from_another_process(self) -> None:
        # A poll interval far longer than the test may take: only the wake-up can start the job.
        child = self.start_worker("wait-go", visibility=30.0, poll_interval=LONG_POLL)
        self.assertTrue(self.wait_for_log("started"))
        time.sleep(0.3)  # idle now, blocked in its wait
        job = self.queue.enqueue("wake up", job_id="woken")
        self.assertTrue(wait_until(lambda: os.path.exists(self.mark("started-woken")), PATIENCE))
        open(self.mark("go"), "w").close()
        self.assertTrue(wait_until(lambda: self.queue.get(job.id).state is JobState.DONE, PATIENCE))
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=PATIENCE)
        self.assertEqual(child.returncode, 0, err)
        self.assertEqual(json.loads(out)["succeeded"], 1)

    def test_sigterm_stops_an_idle_worker_at_once(self) -> None:
        child = self.start_worker("wait-go", visibility=30.0, poll_interval=LONG_POLL)
        self.assertTrue(self.wait_for_log("started"))
        time.sleep(0.3)  # idle now, blocked in its wait
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=PATIENCE)
        self.assertEqual(child.returncode, 0, err)
        self.assertEqual(json.loads(out)["leased"], 0)
        self.assertIn("signal received", open(self.mark("worker.log"), encoding="utf-8").read())

    def test_sigkilled_worker_job_comes_back_after_one_visibility_timeout(self) -> None:
        job = self.queue.enqueue("resume me", job_id="resume")
        child = self.start_worker("block", visibility=1.0)
        self.assertTrue(wait_until(lambda: os.path.exists(self.mark("started-resume")), PATIENCE))
        child.kill()
        child.wait(PATIENCE)
        killed_at = time.monotonic()
        payloads: list[Any] = []
        stats = Worker(
            self.queue, lambda job: payloads.append(job.payload) or "resumed",
            max_jobs=1, idle_timeout=PATIENCE, poll_interval=0.05, handle_signals=False,
        ).run()
        self.assertLess(time.monotonic() - killed_at, PATIENCE)
        self.assertEqual((stats.succeeded, payloads), (1, ["resume me"]))
        stored = self.queue.get(job.id)
        self.assertEqual((stored.state, stored.attempts, stored.result), (JobState.DONE, 2, "resumed"))


if __name__ == "__main__":
    unittest.main()
