"""Tests for Worker(processes=N) and `nobroker work --processes N`: real forked processes, real signals.

Imports: nobroker and tests.support. The pool forks children from the test
process itself (the library tests) or from a `nobroker work` process (the
command-line tests); handlers leave marks in files, so the test sees what
each process did and waits for progress, never for a time.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import unittest
import unittest.mock
from typing import Any

from nobroker import JobState, Queue, StorageError, Worker
from nobroker.worker import budget as budget_module
from nobroker.worker.budget import BudgetFeed, LeaseBudget
from tests.pgsupport import PostgresTestCase, fresh_name
from tests.support import TempDirTestCase, ThreadedRun, wait_until

SRC_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
#: Generous bound for anything that should happen "soon" on a busy shared machine.
PATIENCE = 60.0
CAN_FORK = hasattr(os, "fork")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def touch(path: str, text: str = "") -> None:
    """Make the mark whole at once (a rename): a test that sees it never reads it half written."""
    folder, name = os.path.split(path)
    part = os.path.join(folder, f".{name}.{os.getpid()}.part")  # no mark's prefix: marks_in never counts it
    with open(part, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(part, path)


def read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        return ""


def marks_in(folder: str, prefix: str) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.startswith(prefix))


@unittest.skipUnless(CAN_FORK, "processes= needs os.fork")
class PoolTests(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.marks = os.path.join(self.dir, "marks")
        os.mkdir(self.marks)

    def open_queue(self, **options: Any) -> Queue:
        queue = Queue(os.path.join(self.dir, "q"), fsync=False, **options)
        self.addCleanup(queue.close)
        return queue

    def log_to_file(self) -> str:
        """The Worker's log lines, the children's too (they inherit the handler), in a file: its path."""
        path = os.path.join(self.dir, "worker.log")
        handler = logging.FileHandler(path, encoding="utf-8")
        logger = logging.getLogger("nobroker.worker")
        previous = logger.level
        logger.setLevel(logging.INFO)
        logger.addHandler(handler)

        def restore() -> None:
            logger.removeHandler(handler)
            logger.setLevel(previous)
            handler.close()

        self.addCleanup(restore)
        return path

    def test_three_processes_do_every_job_exactly_once(self) -> None:
        queue = self.open_queue()
        jobs = queue.enqueue_many(list(range(60)))
        marks = self.marks

        def handler(job: Any) -> int:
            # O_EXCL: a second run of a job anywhere fails it, and the test sees a failure.
            os.close(os.open(os.path.join(marks, f"ran-{job.id}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            first_here = not os.path.exists(os.path.join(marks, f"pid-{os.getpid()}"))
            touch(os.path.join(marks, f"pid-{os.getpid()}"))
            if first_here:  # each process's first job waits for the other two to run one: three at once
                wait_until(lambda: len(marks_in(marks, "pid-")) >= 3, PATIENCE)
            return os.getpid()

        worker = Worker(queue, handler, processes=3, max_jobs=len(jobs), handle_signals=False)
        stats = worker.run()
        self.assertEqual(stats.to_dict(), {"leased": 60, "succeeded": 60, "failed": 0, "dead": 0, "lost_leases": 0})
        self.assertEqual(worker.processes_replaced, 0)
        self.assertEqual(len(marks_in(self.marks, "pid-")), 3, "three processes ran jobs")
        self.assertEqual(len(marks_in(self.marks, "ran-")), 60)
        pids = set()
        for job in jobs:
            stored = queue.get(job.id)
            self.assertEqual((stored.state, stored.attempts), (JobState.DONE, 1))
            pids.add(stored.result)
        self.assertEqual(len(pids), 3)
        self.assertNotIn(os.getpid(), pids, "the parent runs no job")

    def test_max_jobs_counts_the_leases_of_every_process_together(self) -> None:
        queue = self.open_queue()
        queue.enqueue_many(list(range(40)))
        stats = Worker(queue, lambda job: None, processes=3, concurrency=4, max_jobs=7, handle_signals=False).run()
        self.assertEqual((stats.leased, stats.succeeded), (7, 7))
        self.assertEqual((queue.stats().done, queue.stats().ready), (7, 33))

    def test_a_child_killed_mid_job_is_replaced_and_its_job_comes_back_after_the_visibility_timeout(self) -> None:
        queue = self.open_queue(visibility_timeout=1.0)
        victim = queue.enqueue("victim")
        marks = self.marks

        def handler(job: Any) -> str:
            if job.attempts == 1:
                touch(os.path.join(marks, "victim-pid"), str(os.getpid()))
                threading.Event().wait(PATIENCE)  # until killed
            return f"done by {os.getpid()} on attempt {job.attempts}"

        worker = Worker(queue, handler, processes=2, poll_interval=0.05, handle_signals=False)
        run = ThreadedRun(worker)
        self.addCleanup(worker.stop)
        self.assertTrue(wait_until(lambda: os.path.exists(os.path.join(marks, "victim-pid")), PATIENCE))
        with open(os.path.join(marks, "victim-pid"), encoding="utf-8") as fh:
            killed = int(fh.read())
        os.kill(killed, signal.SIGKILL)
        self.assertTrue(wait_until(lambda: queue.get(victim.id).state is JobState.DONE, PATIENCE))
        self.assertTrue(wait_until(lambda: worker.processes_replaced == 1, PATIENCE))
        worker.stop()
        run.join(self)
        self.assertIsNone(run.error)
        stored = queue.get(victim.id)
        self.assertEqual(stored.attempts, 2)
        self.assertTrue(stored.result.endswith("on attempt 2"), stored.result)
        assert run.stats is not None
        self.assertEqual(run.stats.succeeded, 1)
        self.assertFalse(alive(killed))

    def test_stop_lets_every_childs_running_job_finish(self) -> None:
        queue = self.open_queue()
        first, second, third = queue.enqueue("a"), queue.enqueue("b"), queue.enqueue("c")
        marks = self.marks
        go = threading.Event()  # never set in the children: they wait for the file

        def handler(job: Any) -> str:
            touch(os.path.join(marks, f"started-{job.id}"), str(os.getpid()))
            while not os.path.exists(os.path.join(marks, "go")):
                go.wait(0.01)
            return "finished"

        log = self.log_to_file()
        worker = Worker(queue, handler, processes=2, handle_signals=False)
        run = ThreadedRun(worker)
        self.addCleanup(worker.stop)
        self.assertTrue(wait_until(lambda: len(marks_in(marks, "started-")) == 2, PATIENCE))
        worker.stop()
        # Let them finish only once both children took the stop, so no one leases the third job.
        self.assertTrue(wait_until(lambda: read(log).count("stop signal received") == 2, PATIENCE))
        touch(os.path.join(marks, "go"))
        run.join(self)
        self.assertIsNone(run.error)
        assert run.stats is not None
        self.assertEqual((run.stats.leased, run.stats.succeeded), (2, 2))
        states = [queue.get(job.id).state for job in (first, second, third)]
        self.assertEqual(sorted(states), [JobState.DONE, JobState.DONE, JobState.READY])

    def test_a_storage_error_in_a_child_stops_the_pool_and_is_raised(self) -> None:
        class BrokenQueue:
            def lease(self, count: int = 1, **kwargs: Any) -> list[Any]:
                raise StorageError("the disk is full")

            def ack(self, job: Any, **kwargs: Any) -> None: ...

            def nack(self, job: Any, **kwargs: Any) -> Any: ...

            def extend(self, job: Any, seconds: float) -> Any: ...

        worker = Worker(BrokenQueue(), lambda job: None, processes=2, handle_signals=False)  # type: ignore[arg-type]
        with self.assertLogs("nobroker.worker", "ERROR"), self.assertRaises(StorageError) as raised:
            worker.run()
        self.assertIn("the disk is full", str(raised.exception))
        self.assertEqual(worker.processes_replaced, 0, "a child that stopped on an error is not replaced")

    def test_stop_before_run_forks_nothing(self) -> None:
        queue = self.open_queue()
        queue.enqueue("x")
        worker = Worker(queue, lambda job: None, processes=2, handle_signals=False)
        worker.stop()
        self.assertEqual(worker.run().leased, 0)
        self.assertEqual(queue.stats().ready, 1)


@unittest.skipUnless(CAN_FORK, "processes= needs os.fork")
class PostgresPoolTests(PostgresTestCase):
    """The pool on the PostgreSQL storage: each child opens its own connection (skipped without a server)."""

    def test_three_processes_do_every_job_exactly_once(self) -> None:
        queue = Queue(self.dsn, fresh_name("pool"), schema=self.schema)
        self.addCleanup(queue.close)
        jobs = queue.enqueue_many(list(range(30)))
        queue.stats()  # the parent has used its connection: the children must not speak on it

        def handler(job: Any) -> int:
            return os.getpid()

        worker = Worker(queue, handler, processes=3, concurrency=2, max_jobs=30, handle_signals=False)
        stats = worker.run()
        self.assertEqual((stats.leased, stats.succeeded, stats.failed, stats.lost_leases), (30, 30, 0, 0))
        stored = [queue.get(job.id) for job in jobs]
        self.assertEqual({(job.state, job.attempts) for job in stored}, {(JobState.DONE, 1)})
        self.assertNotIn(os.getpid(), {job.result for job in stored}, "the parent runs no job")
        self.assertEqual(queue.stats().done, 30, "the parent's own connection still works")


class OptionTests(TempDirTestCase):
    def test_bad_process_counts_are_refused(self) -> None:
        with Queue(os.path.join(self.dir, "q"), fsync=False) as queue:
            for bad in (0, -1, True, 1.5, "2", 10_000):
                with self.subTest(processes=bad), self.assertRaises(ValueError):
                    Worker(queue, lambda job: None, processes=bad)  # type: ignore[arg-type]
            self.assertEqual(Worker(queue, lambda job: None, processes=2).processes, 2)

    def test_without_fork_processes_is_refused_clearly(self) -> None:
        with Queue(os.path.join(self.dir, "q"), fsync=False) as queue, \
                unittest.mock.patch("nobroker.worker.options.can_fork", return_value=False):  # fmt: skip
            with self.assertRaises(NotImplementedError) as refused:
                Worker(queue, lambda job: None, processes=2)
            self.assertIn("os.fork", str(refused.exception))
            Worker(queue, lambda job: None)  # the threads need no fork

    def test_the_command_line_refuses_processes_without_fork_in_one_line(self) -> None:
        from nobroker import cli

        err = io.StringIO()
        with unittest.mock.patch("nobroker.worker.options.can_fork", return_value=False), \
                contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):  # fmt: skip
            code = cli.main(["--dir", os.path.join(self.dir, "q"), "work", "tests.test_worker_pool:touch", "--processes", "2"])
        self.assertEqual(code, 2)
        self.assertIn("needs os.fork", err.getvalue())
        self.assertNotIn("Traceback", err.getvalue())


class LabelTests(unittest.TestCase):
    """The label a lease records is made once per process: a forked child's names the child."""

    @unittest.skipUnless(hasattr(os, "fork"), "needs os.fork")
    def test_a_forked_child_labels_its_leases_with_its_own_pid(self) -> None:
        from nobroker.storage import worker_label

        mine = worker_label()
        self.assertTrue(mine.endswith(f":{os.getpid()}"), mine)
        self.assertIs(worker_label(), mine, "made once, then kept")
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: tell the parent its label, and leave at once
            try:
                os.write(write, worker_label().encode())
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read, "rb") as pipe:
            childs = pipe.read().decode()
        os.waitpid(pid, 0)
        self.assertEqual(childs, f"{mine.rsplit(':', 1)[0]}:{pid}")
        self.assertIs(worker_label(), mine)


class BudgetTests(unittest.TestCase):
    """The pipe of tokens behind max_jobs, beyond what one pipe holds: no token lost, none twice, EOF only at the end."""

    def test_every_token_is_taken_once_and_the_end_comes_only_after_the_last(self) -> None:
        total = 200_003
        feed = BudgetFeed(total)
        self.addCleanup(feed.close)
        readers = [LeaseBudget(feed.read_fd), LeaseBudget(feed.read_fd)]
        taken, empty_for_now = 0, 0
        with unittest.mock.patch.object(budget_module, "REFILL_WAIT", 0.0):
            feed.feed()
            while True:
                # Take until the pipe runs dry (or ends), then refill it, as the pool's parent does.
                results = [reader.take(1000) for reader in readers]
                for result in results:
                    taken += result or 0
                    empty_for_now += result == 0
                if None in results:
                    break
                if 0 in results:
                    feed.feed()
                self.assertLessEqual(taken, total)
        self.assertEqual(taken, total)
        self.assertGreater(empty_for_now, 0, "the pipe ran empty before the parent refilled it (the test covers that)")
        self.assertIsNone(feed.write_fd, "the parent's end is closed once every token is in the pipe")

    def test_a_lease_keeps_what_it_did_not_use_for_the_next(self) -> None:
        feed = BudgetFeed(5)
        self.addCleanup(feed.close)
        feed.feed()
        reader = LeaseBudget(feed.read_fd)
        self.assertEqual(reader.take(4), 4)
        reader.keep(3)  # the lease found one job
        self.assertEqual(reader.take(8), 4)  # the three kept, and the last in the pipe
        self.assertIsNone(reader.take(1))


# ---------------------------------------------------------------- the command line
WAIT_FOR_GO = textwrap.dedent(
    """
    import os, time
    MARKS = os.environ["POOL_TEST_MARKS"]

    def handle(job):
        with open(os.path.join(MARKS, "started-" + job.id), "w") as fh:
            fh.write(str(os.getpid()))
        while not os.path.exists(os.path.join(MARKS, "go")):
            time.sleep(0.01)
        return os.getpid()
    """
)


@unittest.skipUnless(CAN_FORK, "processes= needs os.fork")
class CommandLineTests(TempDirTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.qdir = os.path.join(self.dir, "q")
        self.marks = os.path.join(self.dir, "marks")
        os.mkdir(self.marks)
        touch(os.path.join(self.dir, "pool_handlers.py"), WAIT_FOR_GO)
        self.queue = Queue(self.qdir)
        self.addCleanup(self.queue.close)

    def start_work(self, *options: str) -> subprocess.Popen[str]:
        env = dict(os.environ, PYTHONPATH=SRC_DIR, POOL_TEST_MARKS=self.marks)
        self.stderr_path = os.path.join(self.dir, "stderr.txt")
        stderr = open(self.stderr_path, "w", encoding="utf-8")
        self.addCleanup(stderr.close)
        proc = subprocess.Popen(
            [sys.executable, "-m", "nobroker", "--dir", self.qdir, "--json", "-v", "work", "pool_handlers:handle",
             *options],
            cwd=self.dir, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True,
        )  # fmt: skip

        def reap() -> None:
            if proc.poll() is None:
                proc.kill()
            for pid in self.child_pids():  # first: they hold the parent's stdout open
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)
            proc.communicate()

        self.addCleanup(reap)
        return proc

    def child_pids(self) -> list[int]:
        pids = []
        for name in marks_in(self.marks, "started-"):
            with open(os.path.join(self.marks, name), encoding="utf-8") as fh:
                text = fh.read()
            if text:
                pids.append(int(text))
        return pids

    def logged(self, text: str, times: int = 1) -> bool:
        with open(self.stderr_path, encoding="utf-8") as fh:
            return fh.read().count(text) >= times

    def test_sigterm_to_the_parent_lets_running_jobs_finish_then_every_child_exits_and_the_code_is_0(self) -> None:
        jobs = [self.queue.enqueue(name, job_id=name) for name in ("one", "two", "three")]
        proc = self.start_work("--processes", "2")
        self.assertTrue(wait_until(lambda: len(self.child_pids()) == 2 or proc.poll() is not None, PATIENCE))
        pids = self.child_pids()
        self.assertEqual(len(set(pids)), 2, "two processes, one job each")
        proc.send_signal(signal.SIGTERM)
        # Both children took the stop before their jobs may finish: no one leases the third job.
        self.assertTrue(wait_until(lambda: self.logged("stop signal received", 2) or proc.poll() is not None, PATIENCE))
        touch(os.path.join(self.marks, "go"))
        out, _ = proc.communicate(timeout=PATIENCE)
        with open(self.stderr_path, encoding="utf-8") as fh:
            err = fh.read()
        self.assertEqual(proc.returncode, 0, err)
        *job_lines, last = [json.loads(line) for line in out.splitlines()]
        report = last
        self.assertEqual((report["leased"], report["succeeded"], report["processes_replaced"]), (2, 2, 0))
        # Each child wrote its job's line to the shared stdout, whole.
        self.assertEqual(sorted(line["id"] for line in job_lines), sorted(job.id for job in jobs[:2]))
        states = sorted(self.queue.get(job.id).state for job in jobs)
        self.assertEqual(states, [JobState.DONE, JobState.DONE, JobState.READY])
        self.assertEqual(self.queue.get("three").attempts, 0)
        for pid in pids:
            self.assertFalse(alive(pid), f"worker process {pid} outlived its parent")

    def test_a_second_ctrl_c_kills_the_children_at_once_and_leaves_their_leases_to_expire(self) -> None:
        job = self.queue.enqueue("stuck", job_id="stuck")
        proc = self.start_work("--processes", "2")
        self.assertTrue(wait_until(lambda: len(self.child_pids()) == 1 or proc.poll() is not None, PATIENCE))
        [pid] = self.child_pids()
        proc.send_signal(signal.SIGINT)
        # The parent has taken the first Ctrl-C (whether its child has logged its own stop yet or
        # not, the second one must kill it at once).
        self.assertTrue(wait_until(lambda: self.logged("stop signal received") or proc.poll() is not None, PATIENCE))
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=PATIENCE)
        self.assertEqual(proc.returncode, 130, read(self.stderr_path))
        self.assertTrue(self.logged("interrupted: killing"), read(self.stderr_path))
        self.assertFalse(alive(pid))
        stored = self.queue.get(job.id)
        self.assertEqual((stored.state, stored.attempts), (JobState.LEASED, 1))

    def test_children_whose_parent_was_killed_finish_their_jobs_and_exit(self) -> None:
        jobs = [self.queue.enqueue(name, job_id=name) for name in ("orphaned", "forsaken")]
        proc = self.start_work("--processes", "2")
        # Both children are up (each holds a job) before the parent dies: a kill sent
        # while the parent was still forking would leave one child, not two.
        self.assertTrue(wait_until(lambda: len(self.child_pids()) == 2 or proc.poll() is not None, PATIENCE))
        pids = self.child_pids()
        self.assertEqual(len(set(pids)), 2, "two processes, one job each")
        proc.kill()
        proc.wait(PATIENCE)  # not communicate(): the children still hold its stdout
        self.assertTrue(wait_until(lambda: self.logged("its parent is gone", 2), PATIENCE), read(self.stderr_path))
        touch(os.path.join(self.marks, "go"))
        for job in jobs:
            self.assertTrue(wait_until(lambda: self.queue.get(job.id).state is JobState.DONE, PATIENCE))
        # Reaped by init once they exit (their parent is gone), so they are gone for good.
        for pid in pids:
            self.assertTrue(wait_until(lambda: not alive(pid), PATIENCE), f"worker process {pid} outlived its parent")

if __name__ == "__main__":
    unittest.main()
