"""Helpers shared by the browser tests of the docs site and the playground: the pages, and a browser per class.

Owns: ROOT, INDEX and PLAYGROUND (the repo and its two pages, web/index.html
and web/playground.html) and ``_PageTest`` (one headless Chromium per test
class; ``open`` a page from file://, ``js`` evaluates an expression in it,
``assert_clean``: no console errors and no request outside file:, data: and
about:). Imports: the standard library, tests.browser and tests.support.
"""

from __future__ import annotations

import pathlib
from typing import Any

from tests.browser import file_url, require_browser
from tests.support import TempDirTestCase

ROOT = pathlib.Path(__file__).resolve().parent.parent
INDEX = ROOT / "web" / "index.html"
PLAYGROUND = ROOT / "web" / "playground.html"


class _PageTest(TempDirTestCase):
    browser: Any

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.browser = require_browser(cls)

    def open(self, page: pathlib.Path) -> None:
        self.browser.clear()
        self.browser.open(file_url(page))

    def js(self, expression: str) -> Any:
        return self.browser.evaluate(expression)

    def assert_clean(self) -> None:
        self.assertEqual(self.browser.errors, [], "console errors or exceptions in the page")
        outside = [u for u in self.browser.requests if not u.startswith(("file:", "data:", "about:"))]
        self.assertEqual(outside, [], "the page asked the network for something")
