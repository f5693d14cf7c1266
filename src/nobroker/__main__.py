"""``python -m nobroker``: the command line (see nobroker.cli).

Owns: nothing but the hand-off. Imports: cli (as ``nobroker.cli``: an
absolute import works as ``python -m nobroker`` and inside the zipapp).
"""

import sys

from nobroker.cli import main

if __name__ == "__main__":
    sys.exit(main())
