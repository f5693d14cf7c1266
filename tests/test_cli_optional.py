"""`serve`, `bench` and `pg migrate`: the optional parts, by their wiring.

Owns: what the CLI passes to the dashboard's serve and to
nobroker.postgres.migrate (stand-in modules in ``sys.modules``), their
refusals in one line, a missing optional part named by its package folder,
a busy port, and `bench`'s quick figure for a disk.
Imports: the standard library, nobroker and tests.clisupport.
"""

from __future__ import annotations

import os
import types
import unittest
from unittest import mock

import nobroker
from nobroker.filestore import admin as maintenance
from tests.clisupport import CliTestCase, run_main, stand_in_module


# ---------------------------------------------------------------- optional parts, by their wiring


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


if __name__ == "__main__":
    unittest.main()
