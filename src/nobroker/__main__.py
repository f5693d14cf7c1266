"""``python -m nobroker``: the command line (see nobroker.cli).

Owns: nothing but the hand-off. Imports: nobroker.cli, absolutely, so the
same file works as ``python -m nobroker`` and inside the zipapp bundle.
"""

import sys

from nobroker.cli import main

if __name__ == "__main__":
    sys.exit(main())
