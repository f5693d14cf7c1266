"""The screenshot tool: ``python make.py screenshots`` writes a PNG of every page, at its size.

Owns: ``ScreenshotToolTest`` (tools/screenshots.py run as make.py runs it, into
a temp folder: the docs page light, dark and at its design section, the
playground, the dashboard on a desktop and on a phone). Imports: the standard
library, tests.browser, tests.support and tests.pagesupport.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import unittest

from tests.browser import require_browser
from tests.pagesupport import ROOT
from tests.support import TempDirTestCase

#: Seconds the screenshot tool may take (it starts a browser and a dashboard server).
SCREENSHOT_TIMEOUT = 120


class ScreenshotToolTest(TempDirTestCase):
    """tools/screenshots.py, as `python make.py screenshots` runs it, into a temp folder."""

    def test_writes_a_png_of_every_page(self) -> None:
        require_browser(self)  # the tool starts its own; this only skips (or fails in CI) without one
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
        env.pop("NOBROKER_TOKEN", None)
        done = subprocess.run(
            [sys.executable, str(ROOT / "tools" / "screenshots.py"), "--out", self.dir],
            env=env, capture_output=True, text=True, timeout=SCREENSHOT_TIMEOUT,
        )  # fmt: skip
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        sizes = {name: (1280, 900) for name in ("docs.png", "docs-dark.png", "docs-design.png", "playground.png", "playground-disk.png", "dashboard.png")}
        sizes["dashboard-phone.png"] = (375, 812)
        self.assertEqual(set(os.listdir(self.dir)), set(sizes))
        for name, size in sizes.items():
            data = pathlib.Path(self.dir, name).read_bytes()
            self.assertEqual(data[:8], b"\x89PNG\r\n\x1a\n", name)
            width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
            if name == "dashboard.png":  # the whole page, down to the job's attempts: as wide as the viewport, taller
                self.assertEqual(width, size[0], name)
                self.assertGreater(height, size[1], name)
            else:
                self.assertEqual((width, height), size, name)
            self.assertGreater(len(data), 20_000, f"{name} looks blank")


if __name__ == "__main__":
    unittest.main()
