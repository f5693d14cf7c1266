"""``python -m tools.bench [--pg] ...``: the benchmark suites (what ``python make.py bench`` runs). Imports: file."""

from __future__ import annotations

import sys

from tools.bench.file import main

if __name__ == "__main__":
    sys.exit(main())
