"""The docs site, web/index.html: offline, and every API name and signature it shows agrees with the code.

Owns: the static checks (no browser: the page and the playground refer to
nothing outside themselves, every name marked ``data-api`` exists in the
nobroker package, the public API is documented, the documented signatures
and constructors take what the code takes, the promised sections and
diagrams are there) and the docs page rendered from disk in headless
Chromium without errors or requests. Imports: the standard library,
nobroker, tests.pagesupport.
"""

from __future__ import annotations

import dataclasses
import html.parser
import inspect
import pathlib
import re
import unittest
from typing import Any

import nobroker
from nobroker.filestore import admin as maintenance
from tests.pagesupport import INDEX, PLAYGROUND, _PageTest

#: Sections the docs page promises in its navigation.
DOC_SECTIONS = ("start", "install", "thirty-seconds", "guide", "delivery", "postgres", "api", "design", "format",
                "beats", "recovery", "compaction", "limits", "faq")
#: Anything that would make a page reach the network.
EXTERNAL_REF = re.compile(r"""(?:https?:|wss?:|ftp:)//|(?:src|href)\s*=\s*["']//|@import|url\(\s*["']?(?:https?:)?//""", re.I)


class _ApiNames(html.parser.HTMLParser):
    """Collects data-api values and the text of each <dt> in a <dl class="api">."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []
        self.signatures: list[str] = []
        self._dt_depth = 0
        self._dt_text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("data-api"):
            self.names.append(values["data-api"] or "")
        if tag == "dt":
            self._dt_depth += 1
            self._dt_text = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "dt" and self._dt_depth:
            self._dt_depth -= 1
            self.signatures.append("".join(self._dt_text))

    def handle_data(self, data: str) -> None:
        if self._dt_depth:
            self._dt_text.append(data)


def resolve_api_name(name: str) -> bool:
    """Does ``name`` ("Queue.enqueue", "Job.id", "maintenance.verify", "__version__") exist in nobroker?"""
    parts = name.split(".")
    obj: Any = nobroker
    for i, part in enumerate(parts):
        if hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        if i == 0 and part == "maintenance":
            obj = maintenance
            continue
        # A dataclass field without a default is not a class attribute.
        if i == len(parts) - 1 and dataclasses.is_dataclass(obj):
            return part in {f.name for f in dataclasses.fields(obj)}
        return False
    return True


def split_params(text: str) -> tuple[list[str], list[str]]:
    """Parameter names of a signature as the docs show it: (positional, keyword-only)."""
    positional: list[str] = []
    keywords: list[str] = []
    target = positional
    for part in text.split(","):
        name = part.split("=")[0].split(":")[0].strip()
        if name == "*":
            target = keywords
        elif name:
            target.append(name)
    return positional, keywords


def read(path: pathlib.Path) -> str:
    return path.read_text(encoding="utf-8")


class DocsPageStaticTest(unittest.TestCase):
    """web/index.html read as text: offline by construction, and every name it shows exists."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.text = read(INDEX)
        cls.parsed = _ApiNames()
        cls.parsed.feed(cls.text)

    def test_pages_reference_nothing_outside_themselves(self) -> None:
        for path in (INDEX, PLAYGROUND):
            with self.subTest(page=path.name):
                found = EXTERNAL_REF.findall(read(path))
                self.assertEqual(found, [], f"{path.name} refers to the network")
                for link in re.findall(r"""(?:href|src)\s*=\s*["']([^"'#]+)""", read(path)):
                    self.assertTrue((path.parent / link).exists(), f"{path.name} links to missing {link}")

    def test_every_marked_api_name_exists(self) -> None:
        names = self.parsed.names
        self.assertGreater(len(names), 50)
        missing = [n for n in names if not resolve_api_name(n)]
        self.assertEqual(missing, [], "the docs show names the package does not have")

    def test_the_public_api_of_the_brief_is_documented(self) -> None:
        documented = set(self.parsed.names)
        expected = {
            "Queue", "Worker", "WorkerStats", "Job", "JobState", "QueueStats", "BackoffPolicy", "RecoveryReport",
            "CompactionResult", "NobrokerError", "NotLeasedError", "JobNotFoundError", "LockTimeoutError",
            "CorruptLogError", "CompactionError", "QueueClosedError", "SerializationError", "StorageError",
            "UnsafeQueueError", "PermanentError", "__version__", "maintenance.inspect_log", "maintenance.verify",
            "maintenance.repair", "maintenance.list_queues",
        }  # fmt: skip
        expected |= {f"Queue.{m}" for m in (
            "enqueue", "enqueue_many", "lease", "lease_one", "ack", "nack", "extend", "set_stage", "get", "stats",
            "list_jobs", "dlq", "requeue_dead", "purge", "compact", "wait_for_jobs", "close", "path", "name",
            "recovery", "durable")}  # fmt: skip
        expected |= {f"Job.{f}" for f in (
            "id", "payload", "priority", "state", "attempts", "max_attempts", "available_at", "enqueued_at",
            "lease_deadline", "lease_token", "last_error", "seq", "kind", "dedupe_key", "stage", "result")}  # fmt: skip
        self.assertEqual(sorted(expected - documented), [])

    def test_documented_signatures_accept_what_the_code_accepts(self) -> None:
        """Each `.method(params)` line names exactly the parameters of the real method."""
        checked = 0
        for sig in self.parsed.signatures:
            m = re.match(r"\s*\.(\w+)\((.*?)\)\s*(?:->|$)", sig)
            if not m:
                continue
            method = getattr(nobroker.Queue, m.group(1), None) or getattr(nobroker.Worker, m.group(1), None)
            self.assertIsNotNone(method, sig)
            shown = split_params(m.group(2))
            real = list(inspect.signature(method).parameters.values())[1:]
            with self.subTest(method=m.group(1)):
                self.assert_same_params(shown, real)
            checked += 1
        self.assertGreaterEqual(checked, 18)

    def test_constructor_signatures_match_the_code(self) -> None:
        queue_sig = re.search(r"Queue\((path, name=.*?)\)</code>", self.text, re.S)
        worker_sig = re.search(r"Worker\((queue, handler, .*?)\)</code>", self.text, re.S)
        for cls, found in ((nobroker.Queue, queue_sig), (nobroker.Worker, worker_sig)):
            with self.subTest(cls=cls.__name__):
                self.assertIsNotNone(found)
                assert found is not None
                real = [p for p in inspect.signature(cls).parameters.values() if not p.name.startswith("_")]
                self.assert_same_params(split_params(found.group(1)), real)

    def assert_same_params(self, shown: tuple[list[str], list[str]], real: list[inspect.Parameter]) -> None:
        """Keyword-only names must match exactly; positional ones by count (callers pass them by position)."""
        positional, keywords = shown
        kinds = inspect.Parameter
        real_positional = [p.name for p in real if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)]
        real_keywords = [p.name for p in real if p.kind is kinds.KEYWORD_ONLY]
        self.assertEqual(len(positional), len(real_positional), (positional, real_positional))
        self.assertEqual(keywords, real_keywords)

    def test_sections_and_diagrams(self) -> None:
        for section in DOC_SECTIONS:
            self.assertIn(f'id="{section}"', self.text)
        self.assertGreaterEqual(self.text.count("<svg"), 4)
        self.assertIn("prefers-color-scheme: dark", self.text)
        self.assertIn("python make.py demo", self.text)
        self.assertIn("python make.py test", self.text)
        self.assertIn(f'version {nobroker.__version__}', self.text)


class DocsPageBrowserTest(_PageTest):
    def test_renders_from_disk_without_errors_or_requests(self) -> None:
        self.open(INDEX)
        self.assertIn("nobroker", self.js("document.title"))
        self.assertGreaterEqual(self.js("document.querySelectorAll('figure svg').length"), 4)
        # The diagrams really render (an SVG with a zero box would be invisible).
        sizes = self.js("[...document.querySelectorAll('figure svg')].map(s => s.getBoundingClientRect().height)")
        self.assertTrue(all(h > 100 for h in sizes), sizes)
        self.assertGreater(self.js("document.querySelectorAll('[data-api]').length"), 50)
        self.assert_clean()


if __name__ == "__main__":
    unittest.main()
