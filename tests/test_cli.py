"""Tests of the command line (nobroker.cli): every sub-command, exit codes, output.

Most tests run the CLI in-process through ``main([...])`` with stdout/stderr
captured, which is fast; a few run ``python -m nobroker`` as a real process
to check exit codes as a shell sees them, and Ctrl-C (SIGINT) on ``work``.
The dashboard, the PostgreSQL module and the bench are replaced by stand-in
modules in ``sys.modules``: what is tested here is the wiring, not them.

Imports: the standard library, nobroker and tests.support.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import types
import unittest
import urllib.request
import uuid
from dataclasses import dataclass
from unittest import mock

import nobroker
from nobroker import JobState, Queue, cli
from nobroker.cli import job_commands, output, values
from nobroker.filestore import admin as maintenance
from tests.pgsupport import connect as pg_connect
from tests.pgsupport import drop_schema, fresh_name, require_postgres
from tests.support import TempDirTestCase, records_end, wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
#: Generous: the machine is shared and two cores run many test processes.
PROCESS_TIMEOUT = 60.0


class _TtyInput(io.StringIO):
    """Standard input that claims to be a terminal (for the confirmation prompts)."""

    def isatty(self) -> bool:
        return True


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> object:
        return json.loads(self.out)


def run_main(argv: list[str], *, stdin: str = "", tty: bool = False) -> Result:
    """``cli.main(argv)`` with stdin given and stdout/stderr captured."""
    out, err = io.StringIO(), io.StringIO()
    fake_stdin = _TtyInput(stdin) if tty else io.StringIO(stdin)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), mock.patch("sys.stdin", fake_stdin):
        code = cli.main(argv)
    return Result(code, out.getvalue(), err.getvalue())


def subprocess_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("NOBROKER_DSN", None)
    env.update(extra)
    return env


class CliTestCase(TempDirTestCase):
    """A fresh queue folder per test; ``self.cli(...)`` runs against it."""

    def setUp(self) -> None:
        super().setUp()
        self.qdir = os.path.join(self.dir, "q")
        patcher = mock.patch.dict(os.environ)
        patcher.start()
        self.addCleanup(patcher.stop)
        os.environ.pop("NOBROKER_DSN", None)
        os.environ.pop("NOBROKER_TOKEN", None)

    def cli(self, *args: str, stdin: str = "", tty: bool = False) -> Result:
        return run_main(["--dir", self.qdir, *args], stdin=stdin, tty=tty)

    def ok(self, *args: str, stdin: str = "", tty: bool = False) -> Result:
        result = self.cli(*args, stdin=stdin, tty=tty)
        self.assertEqual(result.code, 0, f"nobroker {' '.join(args)} failed: {result.err}")
        return result

    def ok_json(self, *args: str, stdin: str = "") -> object:
        return self.ok("--json", *args, stdin=stdin).json()

    def enqueue(self, payload: str = '{"n": 1}', *args: str) -> dict:
        return self.ok_json("enqueue", payload, *args)  # type: ignore[return-value]

    def queue(self) -> Queue:
        q = Queue(self.qdir)
        self.addCleanup(q.close)
        return q

    def log_path(self) -> str:
        return os.path.join(self.qdir, "default.000000.log")

    def assert_one_line_error(self, result: Result, code: int = 1) -> None:
        self.assertEqual(result.code, code, result.err)
        self.assertTrue(result.err.startswith("nobroker: error: "), result.err)
        self.assertEqual(result.err.count("\n"), 1, result.err)
        self.assertNotIn("Traceback", result.err)


def fake_queue() -> mock.MagicMock:
    """A stand-in Queue that holds one job (so the CLI has no reason to look for other queues)."""
    fake = mock.MagicMock()
    fake.__len__.return_value = 1
    return fake


# ---------------------------------------------------------------- the parser
class ParserTests(CliTestCase):
    def test_version(self) -> None:
        result = run_main(["--version"])
        self.assertEqual(result.code, 0)
        self.assertEqual(result.out.strip(), f"nobroker {nobroker.__version__}")

    def test_no_command_prints_help_and_exits_2(self) -> None:
        result = run_main([])
        self.assertEqual(result.code, 2)
        self.assertIn("enqueue", result.err)

    def test_unknown_option_is_a_usage_error(self) -> None:
        result = self.cli("stats", "--frobnicate")
        self.assertEqual(result.code, 2)
        self.assertIn("unrecognized arguments: --frobnicate", result.err)

    def test_every_command_has_help_with_an_example(self) -> None:
        top = run_main(["--help"])
        self.assertEqual(top.code, 0)
        commands = ["enqueue", "lease", "ack", "nack", "extend", "stats", "list", "get", "dlq", "purge",
                    "compact", "inspect", "verify", "recover", "repair", "work", "serve", "bench", "pg", "workers", "counters"]
        for name in commands:
            self.assertIn(name, top.out)
        for argv in [[name, "--help"] for name in commands] + [["pg", "migrate", "--help"]]:
            with self.subTest(argv=argv):
                result = run_main(argv)
                self.assertEqual(result.code, 0)
                self.assertIn("example:", result.out)
                self.assertIn("nobroker ", result.out.split("example:")[1])

    def test_purge_help_documents_the_confirmation_rule(self) -> None:
        result = run_main(["purge", "--help"])
        self.assertIn("not a terminal", result.out)
        self.assertIn("--yes", result.out)

    def test_global_options_work_after_the_command_too(self) -> None:
        self.enqueue("a")
        result = run_main(["stats", "--dir", self.qdir, "--json"])
        self.assertEqual(result.code, 0, result.err)
        self.assertEqual(result.json()["ready"], 1)  # type: ignore[index]

    def test_queue_option_selects_a_queue_in_the_folder(self) -> None:
        self.ok("--queue", "emails", "enqueue", "x")
        self.assertEqual(self.ok_json("--queue", "emails", "stats")["total"], 1)  # type: ignore[index]
        with Queue(self.qdir, name="emails") as q:
            self.assertEqual(len(q), 1)

    def test_dir_and_dsn_together_is_a_usage_error(self) -> None:
        result = self.cli("--dsn", "postgresql://localhost/x", "stats")
        self.assertEqual(result.code, 2)
        self.assertIn("--dir and --dsn", result.err)

    def test_dsn_opens_the_queue_with_the_dsn_and_name(self) -> None:
        dsn = "postgresql://user@localhost/app"
        fake = fake_queue()
        fake.stats.return_value = nobroker.QueueStats(ready=3)
        with mock.patch.object(nobroker, "Queue", return_value=fake) as queue_class:
            result = run_main(["--dsn", dsn, "--queue", "mail", "--json", "stats"])
        self.assertEqual(result.code, 0, result.err)
        queue_class.assert_called_once_with(dsn, name="mail", create=False)
        self.assertEqual(result.json()["ready"], 3)  # type: ignore[index]
        fake.close.assert_called_once_with()

    def test_schema_goes_to_the_postgresql_queue_only(self) -> None:
        fake = fake_queue()
        fake.lease.return_value = []
        with mock.patch.object(nobroker, "Queue", return_value=fake) as queue_class:
            result = run_main(["--dsn", "postgresql://h/db", "lease", "--schema", "jobs"])
        self.assertEqual(result.code, 0, result.err)
        queue_class.assert_called_once_with("postgresql://h/db", name="default", create=False, schema="jobs")
        refused = self.cli("--schema", "jobs", "lease")
        self.assertEqual(refused.code, 2)
        self.assertIn("--schema applies to the PostgreSQL storage", refused.err)

    def test_dsn_from_the_environment(self) -> None:
        os.environ["NOBROKER_DSN"] = "postgres://env/db"
        fake = fake_queue()
        fake.lease.return_value = []
        with mock.patch.object(nobroker, "Queue", return_value=fake) as queue_class:
            result = run_main(["--json", "lease"])
        self.assertEqual(result.code, 0, result.err)
        queue_class.assert_called_once_with("postgres://env/db", name="default", create=False)
        self.assertEqual(result.json(), [])

    def test_file_only_commands_refuse_a_dsn(self) -> None:
        for command in ("inspect", "verify", "repair"):
            with self.subTest(command=command):
                result = run_main(["--dsn", "postgresql://localhost/x", command])
                self.assertEqual(result.code, 2)
                self.assertIn("file storage", result.err)


# ---------------------------------------------------------------- which storage, and never creating by mistake
class StorageChoiceTests(CliTestCase):
    """--dsn, --dir and NOBROKER_DSN are checked against what they must be, before anything is opened."""

    def setUp(self) -> None:
        super().setUp()
        self.workdir = os.path.join(self.dir, "cwd")
        os.mkdir(self.workdir)
        cwd = os.getcwd()
        os.chdir(self.workdir)  # a refused location must not turn into a folder here
        self.addCleanup(os.chdir, cwd)

    def test_a_libpq_keyword_dsn_is_postgresql(self) -> None:
        dsn = "host=localhost dbname=app"
        fake = fake_queue()
        fake.stats.return_value = nobroker.QueueStats(ready=2)
        with mock.patch.object(nobroker, "Queue", return_value=fake) as queue_class:
            result = run_main(["--dsn", dsn, "--json", "stats"])
        self.assertEqual(result.code, 0, result.err)
        queue_class.assert_called_once_with(dsn, name="default", create=False)
        self.assertEqual(os.listdir(self.workdir), [])

    def test_what_is_not_a_postgresql_dsn_is_refused_in_one_line_and_nothing_is_created(self) -> None:
        cases = [
            ["--dsn", "mysql://x", "enqueue", "a"],
            ["--dsn", "sqlite:///jobs.db", "stats"],
            ["--dsn", "hots=localhost dbname=app", "enqueue", "a"],  # a typo of a key word
            ["--dsn", "./jobs", "enqueue", "a"],  # a folder given as a DSN
            ["--dir", "redis://localhost/0", "enqueue", "a"],
            ["--dir", "postgresql://localhost/app", "enqueue", "a"],  # a DSN given as a folder
        ]
        for argv in cases:
            with self.subTest(argv=argv):
                result = run_main(argv)
                self.assert_one_line_error(result, code=2)
                self.assertEqual(os.listdir(self.workdir), [])
        os.environ["NOBROKER_DSN"] = "mysql://app@db/app"
        result = run_main(["enqueue", "a"])
        self.assert_one_line_error(result, code=2)
        self.assertIn("NOBROKER_DSN", result.err)
        self.assertEqual(os.listdir(self.workdir), [])

    def test_the_messages_say_what_was_wrong(self) -> None:
        self.assertIn("mysql:// URL", run_main(["--dsn", "mysql://u:pw@h/db", "stats"]).err)
        self.assertNotIn("pw", run_main(["--dsn", "mysql://u:pw@h/db", "stats"]).err)
        self.assertIn("'hots' is not a libpq key word", run_main(["--dsn", "hots=h dbname=app", "stats"]).err)
        self.assertIn("pass --dir", run_main(["--dsn", "./jobs", "stats"]).err)
        self.assertIn("pass it as --dsn", run_main(["--dir", "postgres://h/app", "stats"]).err)

    def test_the_library_makes_the_same_choice(self) -> None:
        from nobroker.addresses import dsn_parameters, is_dsn, storage_kind

        for dsn in ("postgresql://h/app", "postgres://h/app", "host=localhost dbname=app", "dbname=app",
                    "host = '/var/run/postgresql' dbname=test", "service=prod"):
            self.assertEqual(storage_kind(dsn), "postgresql", dsn)
            self.assertTrue(is_dsn(dsn), dsn)
        for folder in ("./jobs", "/var/lib/q", "jobs", "data=old", "a b", "C://x", "x=1 y=2"):
            self.assertEqual(storage_kind(folder), "folder", folder)
        for refused in ("mysql://x", "sqlite:///x.db", "file:///tmp/q", "host=h dbnmae=app"):
            with self.assertRaises(nobroker.UnknownStorageError, msg=refused):
                storage_kind(refused)
            self.assertFalse(is_dsn(refused))
            with self.assertRaises(nobroker.UnknownStorageError):
                Queue(refused)
        self.assertEqual(os.listdir(self.workdir), [])
        self.assertEqual(dsn_parameters("host='a b' password=x\\ y"), {"host": "a b", "password": "x y"})
        self.assertEqual(dsn_parameters("postgresql://h/db?connect_timeout=3"), {"connect_timeout": "3"})

    def test_a_keyword_dsn_never_shows_its_password(self) -> None:
        from nobroker.postgres import redact_dsn

        self.assertEqual(redact_dsn("host=db password=s3cret dbname=app"), "host=db dbname=app")
        self.assertEqual(redact_dsn("host='/var/run/x y' password='a b'"), "host='/var/run/x y'")


class NoCreationTests(CliTestCase):
    """Only `enqueue` and `work` may create a queue; every other command refuses one that is not there."""

    COMMANDS = [
        ["ack", "some-id"], ["nack", "some-id"], ["lease"], ["extend", "some-id", "5"], ["compact"],
        ["purge", "--yes"], ["dlq", "--requeue"], ["dlq", "--requeue", "some-id"], ["dlq"], ["stats"],
        ["list"], ["get", "some-id"], ["recover"], ["inspect"], ["verify"], ["repair", "--yes"], ["serve"],
    ]

    def run_everywhere(self, *global_args: str) -> list[tuple[list[str], Result]]:
        serve = mock.Mock(side_effect=AssertionError("serve must not start"))
        results = []
        with stand_in_module("nobroker.dashboard", serve=serve):
            for argv in self.COMMANDS:
                results.append((argv, self.cli(*global_args, *argv)))
        serve.assert_not_called()
        return results

    def test_a_mistyped_dir_is_refused_and_never_created(self) -> None:
        for argv, result in self.run_everywhere():
            with self.subTest(argv=argv):
                self.assert_one_line_error(result)
                self.assertIn(f"no queue folder at {self.qdir!r}", result.err)
                self.assertIn("check --dir", result.err)
                self.assertFalse(os.path.exists(self.qdir))

    def test_a_mistyped_queue_is_refused_with_the_queues_found(self) -> None:
        self.enqueue("a")
        before = sorted(os.listdir(self.qdir))
        for argv, result in self.run_everywhere("--queue", "emials"):
            with self.subTest(argv=argv):
                self.assert_one_line_error(result)
                self.assertIn(f"no queue named 'emials' in {self.qdir!r} (queues found: 'default')", result.err)
                self.assertIn("check --queue", result.err)
                self.assertEqual(sorted(os.listdir(self.qdir)), before)
        self.assertEqual(maintenance.list_queues(self.qdir), ["default"])

    def test_a_file_is_not_a_queue_folder(self) -> None:
        with open(self.qdir, "w") as f:
            f.write("not a folder")
        for argv in (["stats"], ["ack", "x"], ["verify"]):
            with self.subTest(argv=argv):
                result = self.cli(*argv)
                self.assert_one_line_error(result)
                self.assertIn(f"{self.qdir!r} is a file, not a queue folder", result.err)
                self.assertNotIn("enqueued", result.err)

    def test_enqueue_and_work_create_the_queue(self) -> None:
        self.ok("--queue", "fresh", "work", "examples.handlers:ok", "--idle-timeout", "0")
        self.assertEqual(maintenance.list_queues(self.qdir), ["fresh"])
        self.ok("--queue", "other", "enqueue", "a")
        self.assertEqual(maintenance.list_queues(self.qdir), ["fresh", "other"])

    def test_the_library_refuses_the_same_way(self) -> None:
        with self.assertRaises(nobroker.QueueNotFoundError) as caught:
            Queue(self.qdir, create=False)
        self.assertEqual(caught.exception.missing, "folder")
        self.assertFalse(os.path.exists(self.qdir))
        Queue(self.qdir).close()
        with self.assertRaises(nobroker.QueueNotFoundError) as caught:
            Queue(self.qdir, "emials", create=False)
        self.assertEqual((caught.exception.missing, caught.exception.found), ("queue", ["default"]))
        self.assertEqual(nobroker.list_queues(self.qdir), ["default"])
        Queue(self.qdir, create=False).close()  # an existing queue opens


def keyword_form(dsn: str) -> str:
    """The same connection as a libpq keyword string ("host=... dbname=...")."""
    from psycopg.conninfo import conninfo_to_dict

    return " ".join(f"{key}='{value}'" for key, value in conninfo_to_dict(dsn).items())


class PostgresCliTests(CliTestCase):
    """The CLI against the real PostgreSQL server: keyword DSNs, no schema made by mistake, an unreachable server."""

    def setUp(self) -> None:
        super().setUp()
        self.dsn = require_postgres(self)
        self.schema = fresh_name("nbcli")
        self.addCleanup(drop_schema, self.schema)

    def pg(self, *args: str, dsn: str | None = None) -> Result:
        return run_main(["--dsn", dsn or self.dsn, "--schema", self.schema, *args])

    def schema_exists(self) -> bool:
        with pg_connect() as conn:
            return conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,)).fetchone() is not None

    def test_a_keyword_dsn_works_like_a_url(self) -> None:
        dsn = keyword_form(self.dsn)
        self.assertEqual(self.pg("enqueue", "hello", dsn=dsn).code, 0)
        stats = self.pg("--json", "stats", dsn=dsn)
        self.assertEqual(stats.code, 0, stats.err)
        self.assertEqual(stats.json()["ready"], 1)  # type: ignore[index]
        self.assertEqual(self.pg("--json", "stats").json()["ready"], 1)  # type: ignore[index]

    def test_commands_that_only_look_or_change_jobs_create_no_schema(self) -> None:
        for argv in (["stats"], ["lease"], ["ack", "x"], ["compact"], ["purge", "--yes"], ["dlq", "--requeue"]):
            with self.subTest(argv=argv):
                result = self.pg(*argv)
                self.assert_one_line_error(result)
                self.assertIn(f"no nobroker schema {self.schema!r}", result.err)
                self.assertIn("check --dsn and --schema", result.err)
                self.assertFalse(self.schema_exists())
        self.assertEqual(self.pg("enqueue", "a").code, 0)
        self.assertTrue(self.schema_exists())
        self.assertEqual(self.pg("--json", "stats").json()["ready"], 1)  # type: ignore[index]

    def test_counters_on_postgresql(self) -> None:
        self.assertEqual(self.pg("enqueue", "a").code, 0)
        result = self.pg("--json", "counters")
        self.assertEqual(result.code, 0, result.err)
        self.assertEqual(result.json()["counters"]["default"]["enqueued"], 1)  # type: ignore[index]
        self.assertEqual(self.pg("counters").out.splitlines()[1].split(), ["default", "1", "0", "0", "0", "0"])

    def test_an_empty_queue_name_that_others_use_is_pointed_out(self) -> None:
        self.assertEqual(self.pg("--queue", "emails", "enqueue", "a").code, 0)
        result = self.pg("--queue", "emials", "--json", "stats")
        self.assertEqual(result.code, 0, result.err)
        self.assertIn("queue 'emials' holds no jobs here (queues holding jobs: 'emails'); check --queue", result.err)

    def test_an_unreachable_server_is_one_line_then_the_error(self) -> None:
        for argv in (["--connect-timeout", "1", "stats"], ["enqueue", "a"]):
            dsn = "postgresql://127.0.0.1:1/app" + ("" if "--connect-timeout" in argv else "?connect_timeout=1")
            with self.subTest(argv=argv):
                result = run_main(["--dsn", dsn, *argv])
                self.assertEqual(result.code, 1, result.err)
                lines = result.err.splitlines()
                self.assertEqual(len(lines), 2, result.err)
                self.assertRegex(lines[0], r"^nobroker: warning: cannot reach PostgreSQL at postgresql://127\.0\.0\.1:1/")
                self.assertRegex(lines[1], r"^nobroker: error: cannot connect to PostgreSQL at .*\(tried for 1 s\)$")
        once = run_main(["--dsn", "postgresql://127.0.0.1:1/app", "--connect-timeout", "0", "stats"])
        self.assertEqual(once.err.count("\n"), 1, once.err)
        self.assertIn("(tried once)", once.err)

    def test_the_library_logs_one_warning_however_long_it_tries(self) -> None:
        with self.assertLogs("nobroker.postgres", "DEBUG") as logs, self.assertRaises(nobroker.StorageError):
            Queue("host=127.0.0.1 port=1 dbname=app", reconnect_timeout=1.5)
        warnings = [r for r in logs.records if r.levelname == "WARNING"]
        self.assertEqual(len(warnings), 1, [r.getMessage() for r in logs.records])
        self.assertGreater(len(logs.records), 1, "the later attempts are logged at DEBUG")

    def test_connect_timeout_is_for_postgresql_only(self) -> None:
        result = self.cli("--connect-timeout", "3", "stats")
        self.assertEqual(result.code, 2)
        self.assertIn("--connect-timeout applies to the PostgreSQL storage", result.err)


# ---------------------------------------------------------------- payloads
class PayloadParsingTests(unittest.TestCase):
    def test_json_values(self) -> None:
        self.assertEqual(values.parse_json_value('{"a": [1, 2]}'), {"a": [1, 2]})
        self.assertEqual(values.parse_json_value("42"), 42)
        self.assertEqual(values.parse_json_value("null"), None)
        self.assertEqual(values.parse_json_value('"two words"'), "two words")

    def test_a_plain_word_is_a_string(self) -> None:
        for word in ("hello", "photo.jpg", "ada@example.com", "s3://bucket/key", "0123", "café"):
            with self.subTest(word=word):
                self.assertEqual(values.parse_json_value(word), word)

    def test_text_that_is_neither_is_refused_with_advice(self) -> None:
        for text in ("two words", "{broken", "[1,", "a;b"):
            with self.subTest(text=text):
                with self.assertRaises(values.InputError) as ctx:
                    values.parse_json_value(text)
                self.assertIn("not valid JSON", str(ctx.exception))
                self.assertIn("quote it", str(ctx.exception))

    def test_duplicate_keys_are_refused_at_any_depth(self) -> None:
        for text in ('{"a": 1, "a": 2}', '{"x": {"b": 1, "b": 1}}', '[{"k": 0, "k": 0}]'):
            with self.subTest(text=text):
                with self.assertRaises(values.InputError) as ctx:
                    values.parse_json_value(text)
                self.assertIn("twice", str(ctx.exception))

    def test_nan_and_infinity_are_refused(self) -> None:
        for text in ("NaN", "[Infinity]", '{"x": -Infinity}'):
            with self.subTest(text=text):
                with self.assertRaises(values.InputError):
                    values.parse_json_value(text)

    def test_hostile_numbers_and_nesting_are_refused_not_taken_as_words(self) -> None:
        with self.assertRaises(values.InputError):
            values.parse_json_value("9" * 5000)  # longer than Python converts by default
        with self.assertRaises(values.InputError) as ctx:
            values.parse_json_value("[" * 100_000 + "]" * 100_000)
        self.assertIn("nested too deeply", str(ctx.exception))


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


class DlqPurgeTests(CliTestCase):
    def make_dead(self, payload: str) -> str:
        job = self.enqueue(payload)
        self.ok("lease")
        self.ok("nack", job["id"], "--permanent", "--error", "boom")
        return job["id"]

    def test_dlq_lists_and_requeues_one_or_all(self) -> None:
        first, second = self.make_dead("a"), self.make_dead("b")
        self.assertEqual({j["id"] for j in self.ok_json("dlq")}, {first, second})  # type: ignore[union-attr]
        self.assertIn("boom", self.ok("dlq").out)
        self.assertEqual(self.ok_json("dlq", "--requeue", first), {"requeued": 1})
        self.assertEqual(self.queue().get(first).state, JobState.READY)
        self.assertEqual(self.queue().get(first).attempts, 0)
        result = self.ok("dlq", "--requeue")
        self.assertIn("requeued 1", result.out)
        self.assertIn("empty", self.ok("dlq").out)

    def test_cancel_a_ready_job_a_leased_one_and_a_finished_one(self) -> None:
        ready = self.enqueue("a", "--id", "ready-one")
        self.assertIn("ready-one cancelled", self.ok("cancel", ready["id"]).out)
        self.assertEqual(self.queue().get("ready-one").state, JobState.CANCELLED)
        self.assertIn("cancelled", self.ok("stats").out)
        running = self.enqueue("b")
        self.ok("lease")
        marked = self.ok_json("cancel", running["id"])
        self.assertEqual((marked["state"], marked["cancel_requested"]), ("leased", True))  # type: ignore[index]
        again = self.cli("cancel", "ready-one")
        self.assert_one_line_error(again)
        self.assertIn("already cancelled", again.err)

    def test_pause_resume_run_now_and_delete(self) -> None:
        later = self.enqueue("a", "--id", "later", "--delay", "600")
        out = self.ok("pause", "--kind", "email").out
        self.assertIn("kind 'email' paused", out)
        self.assertIn("paused now: kind 'email'", out)
        self.assertEqual(self.ok_json("pause"), {"paused": [None, "email"]})
        self.assertEqual(self.queue().paused(), [None, "email"])
        self.assertIn("paused now: kind 'email'", self.ok("resume").out)
        self.assertEqual(self.ok_json("resume", "--kind", "email"), {"paused": []})
        self.assertIn("later is runnable now", self.ok("run-now", later["id"]).out)
        self.assertEqual([j["id"] for j in self.ok_json("lease")], ["later"])  # type: ignore[index,union-attr]
        refused = self.cli("run-now", "later")
        self.assert_one_line_error(refused)
        self.assertIn("leased", refused.err)
        refused = self.cli("delete", "later")
        self.assert_one_line_error(refused)
        self.assertIn("leased", refused.err)
        gone = self.enqueue("b", "--id", "gone")
        self.assertIn("gone deleted (it was ready)", self.ok("delete", gone["id"]).out)
        missing = self.cli("delete", "gone")
        self.assert_one_line_error(missing)
        self.assertIn("gone", missing.err)

    def test_why_says_why_and_get_shows_the_attempts(self) -> None:
        job = self.enqueue("a", "--timeout", "90")
        self.assertIn("ready and first in line", self.ok("why", job["id"]).out)
        self.ok("lease")
        why = self.ok_json("why", job["id"])
        self.assertEqual(why[0]["code"], "leased")  # type: ignore[index]
        self.assertIn(f":{os.getpid()}", why[0]["by"])  # type: ignore[index]
        shown = self.ok("get", job["id"]).out
        self.assertIn("time limit   90 s", shown)
        self.assertIn("attempt 1    running at", shown)
        self.assert_one_line_error(self.cli("why", "no-such-job"))

    def test_limit_set_list_clear(self) -> None:
        self.assertEqual(self.cli("limit", "list").code, 1, "list creates no queue")
        self.assertIn("at most 3 leased at once", self.ok("limit", "set", "emails", "--concurrency", "3").out)
        shown = self.ok_json("limit", "set", "api", "--rate", "100", "--per", "60", "--burst", "10")
        self.assertEqual(shown, {"kind": "api", "concurrency": None, "rate": 100, "per": 60.0, "burst": 10})
        self.assertEqual([lim.kind for lim in self.queue().limits()], ["api", "emails"])
        listed = self.ok("limit", "list").out
        self.assertIn("100 leases per 60 s (burst 10)", listed)
        self.assertLess(listed.index("api"), listed.index("emails"))
        self.assertEqual(len(self.ok_json("limit", "list")), 2)  # type: ignore[arg-type]
        self.assertIn("emails: no limit", self.ok("limit", "clear", "emails").out)
        missing = self.cli("limit", "clear", "emails")
        self.assertEqual(missing.code, 1)
        self.assertIn("has no limit", missing.err)
        self.assertEqual(self.cli("limit", "set", "x").code, 2, "neither --concurrency nor --rate")
        self.assertEqual(self.cli("limit", "set", "x", "--concurrency", "0").code, 2)
        refused = self.cli("limit", "set", "x", "--concurrency", "2", "--burst", "3")
        self.assertEqual(refused.code, 2)
        self.assertIn("burst= goes with rate=", refused.err)
        self.assertEqual([lim.kind for lim in self.queue().limits()], ["api"])
        self.ok("limit", "clear", "api")
        self.assertIn("no limits", self.ok("limit", "list").out)

    def test_purge_with_yes(self) -> None:
        for n in range(3):
            self.enqueue(str(n))
        self.assertEqual(self.ok_json("purge", "--yes"), {"purged": 3})
        self.assertEqual(len(self.queue()), 0)

    def test_purge_without_yes_and_without_a_terminal_refuses_with_2(self) -> None:
        self.enqueue("keep")
        result = self.cli("purge", stdin="yes\n")
        self.assertEqual(result.code, 2)
        self.assertIn("--yes", result.err)
        self.assertEqual(len(self.queue()), 1)

    def test_purge_asks_on_a_terminal(self) -> None:
        self.enqueue("a")
        declined = self.cli("purge", stdin="n\n", tty=True)
        self.assertEqual(declined.code, 1)
        self.assertIn("[y/N]", declined.err)
        self.assertIn("nothing was changed", declined.err)
        self.assertEqual(len(self.queue()), 1)
        accepted = self.cli("purge", stdin="y\n", tty=True)
        self.assertEqual(accepted.code, 0, accepted.err)
        self.assertIn("purged 1", accepted.out)
        self.assertEqual(len(self.queue()), 0)


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
        from tests.test_recovery import build_damaged_queue

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


# ---------------------------------------------------------------- work
HANDLER_MODULE = textwrap.dedent(
    """
    import threading

    import nobroker

    #: What a "slow" job waits on: set by the test once it is done with the abandoned thread.
    release = threading.Event()

    def handle(job):
        if job.payload == "slow":
            release.wait(30)
        if job.payload == "fail":
            raise RuntimeError("it failed")
        if job.payload == "permanent":
            raise nobroker.PermanentError("never works")
        if job.payload == "snooze":
            raise nobroker.Snooze(3600)
        return {"echo": job.payload}

    class Holder:
        method = staticmethod(handle)

    not_callable = 42
    """
)


class WorkTests(CliTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.module = f"cli_handlers_{uuid.uuid4().hex[:8]}"
        self.workdir = os.path.join(self.dir, "app")
        os.mkdir(self.workdir)
        with open(os.path.join(self.workdir, self.module + ".py"), "w") as f:
            f.write(HANDLER_MODULE)
        saved_path = list(sys.path)
        cwd = os.getcwd()
        os.chdir(self.workdir)

        def restore() -> None:
            os.chdir(cwd)
            sys.path[:] = saved_path
            sys.modules.pop(self.module, None)

        self.addCleanup(restore)

    def test_work_runs_the_handler_from_the_current_folder(self) -> None:
        ok_job = self.enqueue("hello")
        self.enqueue("fail", "--max-attempts", "1")
        self.enqueue("permanent")
        lines = [json.loads(line) for line in self.ok("--json", "work", f"{self.module}:handle", "--max-jobs", "3",
                                                      "-c", "2").out.splitlines()]  # fmt: skip
        *jobs, stats = lines
        self.assertEqual(stats["succeeded"], 1)
        self.assertEqual(stats["leased"], 3)
        self.assertEqual(self.queue().get(ok_job["id"]).result, {"echo": "hello"})
        self.assertEqual(self.queue().stats().dead, 2)
        # One JSON line per job, with its outcome, kind, attempt and duration.
        by_id = {line["id"]: line for line in jobs}
        self.assertEqual(len(jobs), 3)
        self.assertEqual(by_id[ok_job["id"]]["outcome"], "succeeded")
        self.assertEqual(sorted(line["outcome"] for line in jobs), ["dead", "dead", "succeeded"])
        for line in jobs:
            self.assertEqual((line["kind"], line["attempts"]), ("default", 1))
            self.assertGreaterEqual(line["duration"], 0.0)
            self.assertRegex(line["time"], r"\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\Z")
        self.assertIn("never works", [line for line in jobs if "never works" in line.get("error", "")][0]["error"])

    def test_work_prints_a_line_per_job_and_q_prints_none(self) -> None:
        job = self.enqueue("hello", "--kind", "mail")
        failing = self.enqueue("fail", "--max-attempts", "2")
        result = self.ok("work", f"{self.module}:handle", "--max-jobs", "2")
        lines = result.out.splitlines()
        self.assertEqual(len(lines), 3, result.out)
        self.assertRegex(lines[0] + lines[1], rf"\d\d:\d\d:\d\d\.\d{{3}}  {job['id']}  mail  succeeded  [\d.]+ ms")
        self.assertIn(f"  {failing['id']}  default  failed     ", lines[0] + lines[1])
        self.assertIn("RuntimeError: it failed", lines[0] + lines[1])
        self.assertTrue(lines[2].startswith("worker stopped: leased 2"))
        # -q: only the counts.
        self.enqueue("hello")
        quiet = self.ok("work", f"{self.module}:handle", "--max-jobs", "1", "-q")
        self.assertEqual(quiet.out.splitlines(), ["worker stopped: leased 1, succeeded 1, failed 0, dead 0, lost leases 0"])

    def test_a_job_line_shows_control_characters_escaped(self) -> None:
        self.enqueue("hello", "--kind", "k\x1b[2Jx")
        out = self.ok("work", f"{self.module}:handle", "--max-jobs", "1").out
        self.assertNotIn("\x1b", out)
        self.assertIn("k\\x1b[2Jx", out)

    def test_work_reports_a_snoozed_job(self) -> None:
        later = self.enqueue("snooze")
        result = self.ok("work", f"{self.module}:handle", "--max-jobs", "1")
        self.assertIn("worker stopped: leased 1, succeeded 0, failed 0, dead 0, lost leases 0, snoozed 1", result.out)
        job = self.queue().get(later["id"])
        self.assertEqual((job.state, job.attempts), (JobState.READY, 0))

    def test_work_idle_timeout_and_kinds_and_dotted_callable(self) -> None:
        self.enqueue("skip", "--kind", "other")
        wanted = self.enqueue("take", "--kind", "mine")
        result = self.ok("work", f"{self.module}:Holder.method", "--kind", "mine", "--idle-timeout", "0.3")
        self.assertIn("worker stopped: leased 1, succeeded 1", result.out)
        self.assertEqual(self.queue().get(wanted["id"]).state, JobState.DONE)
        self.assertEqual(self.queue().stats().ready, 1)

    def test_counters_prints_each_kinds_counters_and_json(self) -> None:
        self.enqueue("x")
        self.assertEqual(self.ok_json("counters"), {"queue": "default", "counters": {
            "default": {"enqueued": 1, "succeeded": 0, "failed": 0, "dead": 0, "cancelled": 0}}})  # fmt: skip
        q = self.queue()
        q.enqueue("a", kind="mail\x1b[2J")
        q.ack(q.lease_one(kinds=["mail\x1b[2J"]))  # type: ignore[arg-type]
        q.cancel(q.enqueue("b").id)
        out = self.ok("counters").out
        lines = out.splitlines()
        self.assertEqual(lines[0].split(), ["kind", "enqueued", "succeeded", "failed", "dead", "cancelled"])
        self.assertEqual(lines[1].split(), ["default", "2", "0", "0", "0", "1"])
        self.assertEqual(lines[2].split(), ["mail\\x1b[2J", "1", "1", "0", "0", "0"])  # a control character escaped
        self.assertNotIn("\x1b", out)

    def test_workers_lists_the_announcements_and_shows_the_gone_ones(self) -> None:
        import dataclasses
        import time

        from nobroker.announcements import GONE_AFTER
        from tests.semantics_roster import info

        self.enqueue("x")
        self.assertIn("no worker has announced itself", self.ok("workers").out)
        q = self.queue()
        now = time.time()
        live = info(name="mailer\x1b[2J", host="box-1", kinds=("mail",), heartbeat_at=now, started_at=now - 90)
        gone = dataclasses.replace(info(name="old", host="box-2", kinds=None), heartbeat_at=now - GONE_AFTER - 5,
                                   started_at=now - 600)  # fmt: skip
        q.announce_worker(live)
        q.announce_worker(gone)
        out = self.ok("workers").out
        lines = out.splitlines()
        self.assertEqual(len(lines), 3, out)
        self.assertTrue(lines[1].startswith("old "), lines)  # the oldest start first
        self.assertIn("GONE", lines[1])
        self.assertNotIn("GONE", lines[2])
        self.assertIn("mailer\\x1b[2J", lines[2])  # a control character is shown escaped, never sent
        self.assertNotIn("\x1b", out)
        self.assertIn("2/4", lines[2])
        listed = self.ok_json("workers")
        self.assertEqual([(w["name"], w["gone"], w["kinds"]) for w in listed["workers"]],  # type: ignore[index]
                         [("old", True, None), ("mailer\x1b[2J", False, ["mail"])])  # fmt: skip

    def test_work_timeout_and_enqueue_timeout(self) -> None:
        by_worker = self.enqueue("slow", "--max-attempts", "1")
        by_job = self.enqueue("slow", "--max-attempts", "1", "--timeout", "0.2")
        self.assertEqual(by_job["timeout"], 0.2)
        self.assertNotIn("timeout", by_worker)
        self.addCleanup(lambda: sys.modules[self.module].release.set() if self.module in sys.modules else None)
        out = self.ok("--json", "work", f"{self.module}:handle", "--max-jobs", "2", "--timeout", "0.3").out
        *jobs, stats = [json.loads(line) for line in out.splitlines()]  # a JSON line per job, then the counts
        self.assertEqual((stats["timed_out"], stats["abandoned"], stats["dead"]), (2, 2, 2))
        # A timed-out attempt's line says it failed its last attempt: dead, with the time limit's error.
        self.assertEqual(sorted((line["id"], line["outcome"], line["error"]) for line in jobs),
                         sorted([(by_worker["id"], "dead", "timed out after 0.3 s"),
                                 (by_job["id"], "dead", "timed out after 0.2 s")]))  # fmt: skip
        self.assertEqual(self.queue().get(by_worker["id"]).last_error, "timed out after 0.3 s")
        self.assertEqual(self.queue().get(by_job["id"]).last_error, "timed out after 0.2 s", "the job's own wins")
        self.assertEqual(self.cli("work", f"{self.module}:handle", "--timeout", "0").code, 2)
        self.assertEqual(self.cli("enqueue", "x", "--timeout", "-1").code, 2)

    def test_bad_handler_specs(self) -> None:
        self.assertEqual(self.cli("work", "no_colon_here").code, 2)
        missing = self.cli("work", "surely_not_a_module_xyz:handle", "--max-jobs", "1")
        self.assert_one_line_error(missing)
        self.assertIn("cannot import", missing.err)
        self.assert_one_line_error(self.cli("work", f"{self.module}:nope"))
        self.assert_one_line_error(self.cli("work", f"{self.module}:not_callable"))

    def test_a_handler_module_that_fails_to_import_is_one_line(self) -> None:
        broken = {
            "needs_a_dependency": ("import surely_not_installed_xyz\n", "ModuleNotFoundError: No module named 'surely_not_installed_xyz'"),
            "imports_a_missing_name": ("from os import no_such_name_xyz\n", "ImportError: cannot import name 'no_such_name_xyz'"),
            "raises_on_import": ("raise RuntimeError('config file missing')\n", "RuntimeError: config file missing"),
            "bad_syntax": ("def handle(job)\n    pass\n", "SyntaxError:"),
            "bad_attribute": ("import os\nos.no_such_attribute_xyz\n", "AttributeError:"),
        }
        for stem, (source, expected) in broken.items():
            name = f"{stem}_{uuid.uuid4().hex[:6]}"
            with open(os.path.join(self.workdir, name + ".py"), "w") as f:
                f.write(source)
            self.addCleanup(sys.modules.pop, name, None)
            with self.subTest(module=stem):
                result = self.cli("work", f"{name}:handle", "--max-jobs", "1")
                self.assert_one_line_error(result)
                self.assertIn(f"cannot import handler module {name!r}: {expected}", result.err)
        self.assertFalse(os.path.exists(self.qdir), "nothing was opened for a handler that cannot load")


SLOW_HANDLER = textwrap.dedent(
    """
    import os, time

    def handle(job):
        marks = os.environ["CLI_TEST_MARKS"]
        open(os.path.join(marks, "started"), "w").close()
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(marks, "go")) and time.monotonic() < deadline:
            time.sleep(0.02)
        return "finished"
    """
)


class ProcessTests(CliTestCase):
    """Real processes: exit codes as a shell sees them, and Ctrl-C on `work`."""

    def run_process(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "nobroker", *args],
            capture_output=True, text=True, env=subprocess_env(**env), timeout=PROCESS_TIMEOUT, cwd=self.dir,
        )

    def test_exit_codes(self) -> None:
        version = self.run_process("--version")
        self.assertEqual(version.returncode, 0)
        self.assertEqual(version.stdout.strip(), f"nobroker {nobroker.__version__}")
        enqueued = self.run_process("--dir", self.qdir, "--json", "enqueue", '{"a": 1}')
        self.assertEqual(enqueued.returncode, 0, enqueued.stderr)
        self.assertEqual(json.loads(enqueued.stdout)["payload"], {"a": 1})
        missing = self.run_process("--dir", self.qdir, "get", "no-such-job")
        self.assertEqual(missing.returncode, 1)
        self.assertTrue(missing.stderr.startswith("nobroker: error: "), missing.stderr)
        self.assertNotIn("Traceback", missing.stderr)
        usage = self.run_process("--dir", self.qdir, "list", "--state", "bogus")
        self.assertEqual(usage.returncode, 2)
        self.assertIn("usage:", usage.stderr)

    def start_slow_worker(self) -> tuple[subprocess.Popen[str], str, str]:
        marks = os.path.join(self.dir, "marks")
        os.mkdir(marks)
        with open(os.path.join(self.dir, "slow_cli_handler.py"), "w") as f:
            f.write(SLOW_HANDLER)
        job_id = self.enqueue("slow")["id"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "nobroker", "--dir", self.qdir, "work", "slow_cli_handler:handle"],
            cwd=self.dir, env=subprocess_env(CLI_TEST_MARKS=marks),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

        def cleanup() -> None:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()

        self.addCleanup(cleanup)
        started = wait_until(lambda: os.path.exists(os.path.join(marks, "started")) or proc.poll() is not None,
                             timeout=PROCESS_TIMEOUT)
        self.assertTrue(started and proc.poll() is None, "the worker never started the job")
        return proc, marks, job_id

    @staticmethod
    def next_stderr_line(proc: subprocess.Popen[str]) -> str:
        """The next line the process writes to stderr that is not blank (blocks until then)."""
        assert proc.stderr is not None
        line = "\n"
        while line and not line.strip():
            line = proc.stderr.readline()
        return line

    def test_ctrl_c_on_work_finishes_the_running_job_and_exits_130(self) -> None:
        proc, marks, job_id = self.start_slow_worker()
        proc.send_signal(signal.SIGINT)
        # Let the handler finish only once the stop was noticed, so this
        # checks that a stopping worker still acks what it was running.
        self.assertIn("stopping", self.next_stderr_line(proc))
        open(os.path.join(marks, "go"), "w").close()
        out, err = proc.communicate(timeout=PROCESS_TIMEOUT)
        self.assertEqual(proc.returncode, 130, err)
        self.assertIn("worker stopped: leased 1, succeeded 1", out)
        self.assertEqual(self.queue().get(job_id).state, JobState.DONE)

    def test_second_ctrl_c_quits_at_once(self) -> None:
        proc, marks, job_id = self.start_slow_worker()
        proc.send_signal(signal.SIGINT)
        self.assertIn("stopping", self.next_stderr_line(proc))
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=PROCESS_TIMEOUT)
        self.assertEqual(proc.returncode, 130, err)
        self.assertNotIn("Traceback", err)
        # Not acked: the lease stays until it expires and the job runs again.
        self.assertEqual(self.queue().get(job_id).state, JobState.LEASED)

    def start_serve(self) -> tuple[subprocess.Popen[str], str, str]:
        """`nobroker serve --port 0` as a real process: (process, its first line, the page's URL)."""
        proc = subprocess.Popen(
            [sys.executable, "-m", "nobroker", "--dir", self.qdir, "serve", "--port", "0"],
            cwd=self.dir, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        line = proc.stdout.readline()  # type: ignore[union-attr]
        self.assertIn("http://127.0.0.1:", line, proc.stderr.read() if not line else "")  # type: ignore[union-attr]
        return proc, line, line.split(" at ")[1].split()[0]

    def test_serve_runs_the_real_dashboard_until_ctrl_c(self) -> None:
        self.enqueue('{"shown": "on the page"}')
        proc, _line, url = self.start_serve()
        with urllib.request.urlopen(url + "api/stats", timeout=PROCESS_TIMEOUT) as response:
            self.assertEqual(response.status, 200)
            self.assertIn(b'"ready"', response.read())
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=PROCESS_TIMEOUT)
        self.assertEqual(proc.returncode, 130, err)
        self.assertNotIn("Traceback", err)

    def test_ctrl_c_on_enqueue_count_prints_the_ids_enqueued_and_exits_130(self) -> None:
        proc = subprocess.Popen(
            [sys.executable, "-m", "nobroker", "--dir", self.qdir, "enqueue", "x", "--count", str(job_commands.MAX_ENQUEUE_COUNT)],
            cwd=self.dir, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        # Interrupt once the first batch is on disk: long before a million jobs are.
        self.assertTrue(wait_until(lambda: os.path.exists(self.log_path()) and records_end(self.log_path()) > 4096,
                                   timeout=PROCESS_TIMEOUT))
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=PROCESS_TIMEOUT)
        self.assertEqual(proc.returncode, 130, err)
        ids = out.split()
        self.assertGreater(len(ids), 0)
        self.assertLess(len(ids), job_commands.MAX_ENQUEUE_COUNT)
        self.assertEqual(len(ids), len(self.queue()), "every job in the queue is reported, and only those")
        self.assertIn(f"interrupted: enqueued {len(ids):,} of {job_commands.MAX_ENQUEUE_COUNT:,} jobs", err)
        self.assertNotIn("Traceback", err)

    def test_serve_on_a_folder_without_a_default_queue_creates_nothing(self) -> None:
        self.ok("--queue", "emails", "enqueue", '{"shown": true}')
        proc, line, url = self.start_serve()
        self.assertIn("dashboard for queue 'emails'", line)
        with urllib.request.urlopen(url + "api/queues", timeout=PROCESS_TIMEOUT) as response:
            self.assertEqual(json.loads(response.read()), {"queues": ["emails"], "default": "emails"})
        with urllib.request.urlopen(url + "api/stats", timeout=PROCESS_TIMEOUT) as response:
            self.assertEqual(json.loads(response.read())["stats"]["total"], 1)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=PROCESS_TIMEOUT)
        self.assertEqual(maintenance.list_queues(self.qdir), ["emails"])

    def test_serve_on_a_public_address_without_a_token_is_refused(self) -> None:
        self.enqueue("a")
        refused = self.run_process("--dir", self.qdir, "serve", "--host", "0.0.0.0")
        self.assertEqual(refused.returncode, 1)
        self.assertTrue(refused.stderr.startswith("nobroker: error: "), refused.stderr)
        self.assertIn("token", refused.stderr)

    def test_sigterm_on_work_stops_gracefully_with_0(self) -> None:
        proc, marks, job_id = self.start_slow_worker()
        proc.send_signal(signal.SIGTERM)
        self.assertIn("stopping", self.next_stderr_line(proc))
        open(os.path.join(marks, "go"), "w").close()
        out, err = proc.communicate(timeout=PROCESS_TIMEOUT)
        self.assertEqual(proc.returncode, 0, err)
        self.assertEqual(self.queue().get(job_id).state, JobState.DONE)


# ---------------------------------------------------------------- optional parts, by their wiring
@contextlib.contextmanager
def stand_in_module(name: str, **attributes: object):  # type: ignore[no-untyped-def]
    """Put a fake module at ``name`` in sys.modules (None makes the import fail)."""
    if attributes.get("_missing"):
        with mock.patch.dict(sys.modules, {name: None}):
            yield None
        return
    module = types.ModuleType(name)
    for key, value in attributes.items():
        setattr(module, key, value)
    with mock.patch.dict(sys.modules, {name: module}):
        yield module


class OptionalPartsTests(CliTestCase):
    def test_serve_calls_the_dashboard_with_the_queue(self) -> None:
        seen: dict[str, object] = {}

        def fake_serve(queue, *, host, port, token, on_ready, **picker):  # type: ignore[no-untyped-def]
            seen.update(name=queue.name, stats=queue.stats().to_dict(), host=host, port=port, token=token)
            on_ready(types.SimpleNamespace(url=f"http://{host}:{port}/"))

        self.enqueue("a")
        with stand_in_module("nobroker.dashboard", serve=fake_serve):
            result = self.cli("--queue", "default", "serve", "--port", "9999", "--token", "t0k")
        self.assertEqual(result.code, 0, result.err)
        self.assertEqual(seen["host"], "127.0.0.1")
        self.assertEqual(seen["port"], 9999)
        self.assertEqual(seen["token"], "t0k")
        self.assertEqual(seen["name"], "default")
        self.assertEqual(seen["stats"]["total"], 1)  # type: ignore[index]
        self.assertIn("at http://127.0.0.1:9999/", result.out)

    def test_serve_on_a_folder_without_a_default_queue_shows_the_queues_there(self) -> None:
        self.ok("--queue", "sms", "enqueue", "a")
        self.ok("--queue", "emails", "enqueue", "b")
        seen: dict[str, object] = {}

        def fake_serve(queue, *, on_ready, list_queues, open_queue, **rest):  # type: ignore[no-untyped-def]
            seen.update(first=queue.name, listed=list_queues())
            other = open_queue("sms")
            seen.update(other=(other.name, len(other)))
            other.close()
            with self.assertRaises(nobroker.QueueNotFoundError):
                open_queue("default")
            on_ready(types.SimpleNamespace(url="http://127.0.0.1:1/"))

        with stand_in_module("nobroker.dashboard", serve=fake_serve):
            result = self.cli("serve")
        self.assertEqual(result.code, 0, result.err)
        self.assertEqual(seen, {"first": "emails", "listed": ["emails", "sms"], "other": ("sms", 1)})
        self.assertIn("dashboard for queue 'emails', 1 more in the page's picker at", result.out)
        self.assertEqual(maintenance.list_queues(self.qdir), ["emails", "sms"], "no default queue was created")
        with stand_in_module("nobroker.dashboard", serve=fake_serve):
            refused = self.cli("--queue", "default", "serve")  # asked for by name: it must be there
        self.assert_one_line_error(refused)
        self.assertIn("no queue named 'default'", refused.err)
        self.assertEqual(maintenance.list_queues(self.qdir), ["emails", "sms"])

    def test_serve_token_from_the_environment_and_defaults(self) -> None:
        serve = mock.Mock(return_value=None)
        self.enqueue("a")
        os.environ["NOBROKER_TOKEN"] = "from-env"
        with stand_in_module("nobroker.dashboard", serve=serve):
            self.ok("serve", "--host", "0.0.0.0")
        _, kwargs = serve.call_args
        self.assertEqual(
            {k: kwargs[k] for k in ("host", "port", "token")}, {"host": "0.0.0.0", "port": 8765, "token": "from-env"}
        )

    def test_serve_ctrl_c_exits_130(self) -> None:
        self.enqueue("a")
        with stand_in_module("nobroker.dashboard", serve=mock.Mock(side_effect=KeyboardInterrupt)):
            result = self.cli("serve")
        self.assertEqual(result.code, 130)

    def test_serve_on_a_busy_port_names_the_port(self) -> None:
        import socket

        self.enqueue("a")
        taken = socket.socket()
        self.addCleanup(taken.close)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = self.cli("serve", "--port", str(port))  # the real dashboard
        self.assert_one_line_error(result)
        self.assertIn(f"127.0.0.1:{port}", result.err)
        self.assertIn("--port", result.err)

    def test_serve_refusal_from_the_dashboard_is_one_line(self) -> None:
        self.enqueue("a")
        refuse = mock.Mock(side_effect=nobroker.NobrokerError("binding 0.0.0.0 without --token is refused"))
        with stand_in_module("nobroker.dashboard", serve=refuse):
            self.assert_one_line_error(self.cli("serve", "--host", "0.0.0.0"))

    def test_bench_is_a_quick_figure_for_this_disk(self) -> None:
        where = os.path.join(self.dir, "disk")
        os.mkdir(where)
        result = run_main(["--json", "bench", "--in", where, "--seconds", "0.05"])
        self.assertEqual(result.code, 0, result.err)
        report = result.json()
        names = [figure["name"] for figure in report["figures"]]  # type: ignore[index]
        self.assertEqual(names, ["enqueue, 1 thread", "lease_one + ack, 1 thread"])
        for figure in report["figures"]:  # type: ignore[index]
            self.assertGreater(figure["per_second"], 0)
            self.assertGreater(figure["disk_per_second"], 0)
            self.assertAlmostEqual(figure["ratio"], figure["per_second"] / figure["disk_per_second"], places=2)
        self.assertEqual(os.listdir(where), [], "the scratch queue is removed")
        text = run_main(["bench", "--in", where, "--seconds", "0.05"]).out
        self.assertIn("x this disk's append+fsync rate", text)
        self.assertFalse(os.path.exists(self.qdir), "bench never touches the queue folder")

    def test_bench_refuses_what_it_cannot_use(self) -> None:
        self.assertEqual(self.cli("bench").code, 2)  # --dir: bench uses --in
        self.assertEqual(run_main(["bench", "--seconds", "0"]).code, 2)
        self.assert_one_line_error(run_main(["bench", "--in", os.path.join(self.dir, "nope")]), code=2)

    def test_pg_migrate_with_dsn_and_schema(self) -> None:
        migrate = mock.Mock(return_value=None)
        with stand_in_module("nobroker.postgres", migrate=migrate):
            result = run_main(["pg", "migrate", "--dsn", "postgresql://db/app", "--schema", "jobs", "--worker-role", "w"])
        self.assertEqual(result.code, 0, result.err)
        migrate.assert_called_once_with("postgresql://db/app", schema="jobs", worker_role="w")
        self.assertIn("already up to date", result.out)
        migrate.return_value = ["001_init.sql"]
        with stand_in_module("nobroker.postgres", migrate=migrate):
            again = run_main(["--schema", "jobs", "pg", "migrate", "--dsn", "postgresql://db/app"])
        self.assertIn("applied 1 migration(s): 001_init.sql", again.out)
        self.assertEqual(migrate.call_args.kwargs, {"schema": "jobs"})

    def test_pg_migrate_dsn_from_the_environment(self) -> None:
        migrate = mock.Mock(return_value=["0001_init"])
        os.environ["NOBROKER_DSN"] = "postgres://env/app"
        with stand_in_module("nobroker.postgres", migrate=migrate):
            result = run_main(["--json", "pg", "migrate"])
        self.assertEqual(result.code, 0, result.err)
        migrate.assert_called_once_with("postgres://env/app")
        self.assertEqual(result.json(), {"migrated": True, "applied": ["0001_init"]})

    def test_pg_migrate_without_a_dsn_is_a_clear_usage_error(self) -> None:
        migrate = mock.Mock()
        with stand_in_module("nobroker.postgres", migrate=migrate):
            result = run_main(["pg", "migrate"])
        self.assertEqual(result.code, 2)
        self.assertIn("needs a PostgreSQL DSN", result.err)
        self.assertIn("NOBROKER_DSN", result.err)
        migrate.assert_not_called()

    def test_pg_without_a_subcommand_shows_help(self) -> None:
        result = run_main(["pg"])
        self.assertEqual(result.code, 2)
        self.assertIn("migrate", result.err)

    def test_a_missing_optional_part_is_named_by_its_package_folder(self) -> None:
        self.enqueue("a")
        with stand_in_module("nobroker.dashboard", _missing=True):
            serve = self.cli("serve")
        self.assert_one_line_error(serve)
        self.assertIn("no dashboard (nobroker/dashboard/ is missing)", serve.err)
        with stand_in_module("nobroker.postgres", _missing=True):
            migrate = run_main(["pg", "migrate", "--dsn", "postgresql://db/app"])
        self.assert_one_line_error(migrate)
        self.assertIn("no PostgreSQL storage (nobroker/postgres/ is missing)", migrate.err)

    def test_pg_migrate_missing_module_or_driver(self) -> None:
        with stand_in_module("nobroker.postgres", _missing=True):
            result = run_main(["pg", "migrate", "--dsn", "postgresql://db/app"])
        self.assert_one_line_error(result)
        self.assertIn("no PostgreSQL storage", result.err)


# ---------------------------------------------------------------- output plumbing
class OutputTests(CliTestCase):
    def test_progress_draws_only_on_a_terminal(self) -> None:
        class Terminal(io.StringIO):
            def isatty(self) -> bool:
                return True

        plain, terminal = io.StringIO(), Terminal()
        for stream in (plain, terminal):
            progress = output.Progress("reading", stream)
            progress.start()
            progress.update(10)
            progress.done()
        self.assertEqual(plain.getvalue(), "")
        self.assertIn("reading", terminal.getvalue())

    def test_verbose_logs_to_stderr_and_debug_shows_tracebacks(self) -> None:
        self.enqueue("a")
        quiet = self.cli("get", "missing")
        self.assertNotIn("Traceback", quiet.err)
        loud = self.cli("-vv", "get", "missing")
        self.assertEqual(loud.code, 1)
        self.assertIn("Traceback", loud.err)
        self.assertIn("DEBUG", loud.err)

    def test_logging_handler_is_removed_after_main(self) -> None:
        before = list(logging.getLogger("nobroker").handlers)
        self.cli("-v", "--json", "stats")
        self.assertEqual(logging.getLogger("nobroker").handlers, before)

    def test_json_output_is_one_ascii_document(self) -> None:
        self.enqueue('{"s": "caf\\u00e9 \\ud800"}')
        out = self.ok("--json", "list").out
        self.assertTrue(out.isascii())
        self.assertEqual(json.loads(out)[0]["payload"], {"s": "café \ud800"})


if __name__ == "__main__":
    unittest.main()
