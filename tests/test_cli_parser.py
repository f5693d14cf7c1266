"""The command line's parser, payload values and output plumbing: what ``nobroker`` reads and how it writes.

Owns: --version, --help with an example for every command, usage errors
(exit 2), global options before or after the command, --dir, --dsn,
NOBROKER_DSN, --queue and --schema reaching the Queue (a stand-in Queue),
payload parsing (nobroker.cli.values), and the output plumbing (progress
drawn only on a terminal, -v logging removed after main, one ASCII JSON
document). Imports: the standard library, nobroker and tests.clisupport.
"""

from __future__ import annotations

import io
import json
import logging
import os
import unittest
from unittest import mock

import nobroker
from nobroker import Queue
from nobroker.cli import output, values
from tests.clisupport import CliTestCase, fake_queue, run_main


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
