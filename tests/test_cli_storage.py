"""Which storage --dir, --dsn and NOBROKER_DSN choose, and never creating a queue by mistake.

Owns: the refusal in one line of what is neither a folder nor a PostgreSQL
DSN (before anything is opened or created, the password never shown), that
only `enqueue` and `work` create a queue (every other command refuses a
mistyped --dir or --queue), and the CLI against the real PostgreSQL server
(keyword DSNs, no schema made by mistake, an unreachable server).
Imports: the standard library, nobroker, tests.pgsupport and
tests.clisupport; psycopg only inside keyword_form.
"""

from __future__ import annotations

import os
import unittest
from unittest import mock

import nobroker
from nobroker import Queue
from nobroker.filestore import admin as maintenance
from tests.clisupport import CliTestCase, Result, fake_queue, run_main, stand_in_module
from tests.pgsupport import connect as pg_connect
from tests.pgsupport import drop_schema, fresh_name, require_postgres


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


if __name__ == "__main__":
    unittest.main()
