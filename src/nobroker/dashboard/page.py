"""The dashboard's one page: page.html, page.css and its scripts, shipped as package data files.

Owns: reading the files (once, with importlib.resources, so they load
from a source tree, a wheel or the single-file zipapp alike) and rendering
the page for one answer. Imports: nothing from nobroker.

page.html names its holes ``{{NAME}}``: ``STYLE`` and ``SCRIPT`` take
page.css and the scripts, inlined, so the page needs no second request and no
network; page-format.js, page-panels.js, page-control.js and page.js go into the one
script, in that order (the first makes elements and formats times, the second draws
the chart and the workers' table, the third a job's page, its attempts and reasons,
and the schedules and limits panels, the last runs the page with them). ``NONCE`` (drawn
afresh for each answer) sits on the one ``<style>``
and the one ``<script>``, the only ones the Content-Security-Policy lets run;
``CSRF`` is the server's token, which the script sends back with every POST.
The page holds no queue data at all: everything arrives as JSON and goes
into the DOM through textContent.
"""

from __future__ import annotations

import functools
import importlib.resources
import re

#: How page.html marks a hole.
_HOLE = re.compile(r"\{\{([A-Z]+)\}\}")
#: The holes page.html must have; render() fills every one.
HOLES = frozenset({"STYLE", "SCRIPT", "NONCE", "CSRF"})
#: What a server-made value may hold: the characters of hex and base64url, none
#: of which can end an attribute or start markup.
_TOKEN = re.compile(r"[A-Za-z0-9_-]+")
#: The files, in this package, that make the page (the scripts in the order they run).
HTML_FILE, STYLE_FILE = "page.html", "page.css"
SCRIPT_FILES = ("page-format.js", "page-panels.js", "page-control.js", "page.js")


class Page:
    """page.html cut at its holes, with page.css and the script ready to inline."""

    def __init__(self, html: str, style: str, script: str) -> None:
        pieces = _HOLE.split(html)  # text, hole, text, hole, ..., text
        self._texts, self._holes = pieces[0::2], pieces[1::2]
        assert set(self._holes) == HOLES, f"{HTML_FILE} has holes {sorted(self._holes)}, not {sorted(HOLES)}"
        # Inlined, a stray closing tag would end the element early and turn the rest into markup.
        assert "</style" not in style.lower(), f"{STYLE_FILE} must not close its <style> element"
        assert "</script" not in script.lower(), f"{', '.join(SCRIPT_FILES)} must not close their <script> element"
        self._fixed = {"STYLE": style, "SCRIPT": script}

    def render(self, *, nonce: str, csrf: str) -> bytes:
        """The page for one answer, its style and script under ``nonce``, ``csrf`` in its meta tag."""
        assert _TOKEN.fullmatch(nonce) and _TOKEN.fullmatch(csrf), "only server-made tokens go into the page"
        values = {**self._fixed, "NONCE": nonce, "CSRF": csrf}
        parts = [self._texts[0]]
        for hole, text in zip(self._holes, self._texts[1:]):
            parts += [values[hole], text]
        return "".join(parts).encode("utf-8")


@functools.cache
def load_page() -> Page:
    """The page, read from this package's data files on first use (they never change while serving)."""
    files = importlib.resources.files(__package__ or __name__)
    html, style, *scripts = (files.joinpath(name).read_text(encoding="utf-8") for name in (HTML_FILE, STYLE_FILE, *SCRIPT_FILES))
    return Page(html, style, "\n".join(scripts))


__all__ = ["Page", "load_page", "HOLES"]
