"""A child process for the control tests: a Worker on one queue until SIGTERM.

Run as ``python -m tests.controlchild LOCATION NAME [SCHEMA]``. It prints
``ready`` once its queue is open, then runs a Worker (every kind, the result
is the payload) until a SIGTERM stops it, and exits 0.
"""

from __future__ import annotations

import sys

from nobroker import Queue, Worker


def main() -> None:
    location, name = sys.argv[1], sys.argv[2]
    options = {"schema": sys.argv[3]} if len(sys.argv) > 3 else {}
    with Queue(location, name=name, **options) as q:
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        Worker(q, lambda job: job.payload, poll_interval=0.05).run()


if __name__ == "__main__":
    main()
