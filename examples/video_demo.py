#!/usr/bin/env python3
"""The tour of demo.py, paced for a screen recording: one scene per screen, typed code, pauses.

Owns: the pacing only; the scenes themselves are demo.py's, so the video can
never show something the demo (and its test) does not check. Imports: the
standard library and examples/demo.py.

    python make.py video-demo                 # all scenes, about two minutes
    python make.py video-demo --scenes 4      # just the crash
    python make.py video-demo --scenes 2,5    # or a few
    python make.py video-demo --scenes 3-6    # or a range
    python make.py video-demo --list          # what the scenes are
    python make.py video-demo --fast          # no pauses (tests use this)
"""

from __future__ import annotations

import argparse
import sys
import time

try:
    from examples import demo  # run as a module, or with the repo root on sys.path
except ImportError:  # run as a script: its own folder is on sys.path
    import demo  # type: ignore[no-redef]

#: Seconds per typed character of code: slow enough to read along, fast enough to watch.
TYPING_DELAY = 0.025
#: The pause after each scene, so a viewer can read the result before the screen clears.
SCENE_END_PAUSE = 2.5
#: Clears the terminal between scenes (only when writing to a terminal).
CLEAR_SCREEN = "\033[2J\033[H"


class PacedNarrator(demo.Narrator):
    """Types code out, holds on results, and gives each scene a screen of its own."""

    def __init__(self, *, fast: bool, clear: bool) -> None:
        super().__init__()
        self.fast = fast
        self.clear = clear
        self.scenes_shown = 0

    def title(self, number: int, text: str) -> None:
        if self.scenes_shown:
            self.pause(SCENE_END_PAUSE)
            if self.clear:
                print(CLEAR_SCREEN, end="")
        self.scenes_shown += 1
        bar = "=" * (len(text) + 10)
        print(f"\n{bar}\n   {number}. {text}\n{bar}", flush=True)
        self.pause(1.2)

    def say(self, text: str) -> None:
        super().say(text)
        sys.stdout.flush()
        self.pause(0.3 + len(text) / 60)  # time to read it

    def code(self, text: str) -> None:
        for line in text.splitlines():
            prefix = "   >>> "
            if self.fast:
                print(prefix + line)
                continue
            print(prefix, end="", flush=True)
            for ch in line:
                print(ch, end="", flush=True)
                time.sleep(TYPING_DELAY)
            print(flush=True)
            self.pause(0.4)

    def show(self, text: str) -> None:
        super().show(text)
        sys.stdout.flush()
        self.pause(0.5)

    def pause(self, seconds: float = 1.0) -> None:
        if not self.fast:
            time.sleep(seconds)


def parse_scenes(spec: str, count: int) -> list[int]:
    """ "4", "2,5" or "3-6" -> scene numbers, checked against the tour."""
    numbers: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        low, _, high = part.partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a scene number or range: {part!r}") from None
        if not 1 <= first <= last <= count:
            raise argparse.ArgumentTypeError(f"scenes run from 1 to {count}, got {part!r}")
        numbers += [n for n in range(first, last + 1) if n not in numbers]
    if not numbers:
        raise argparse.ArgumentTypeError("no scene chosen")
    return numbers


def main(argv: list[str] | None = None) -> int:
    count = len(demo.SCENES)
    parser = argparse.ArgumentParser(description="The nobroker tour, paced for a screen recording.")
    parser.add_argument("--scenes", type=lambda s: parse_scenes(s, count), help=f"which scenes: 4, 2,5 or 3-6 (1..{count})")
    parser.add_argument("--fast", action="store_true", help="no pauses and no typing (for tests)")
    parser.add_argument("--dir", help="keep the queue in this folder (default: a temp folder, removed at the end)")
    parser.add_argument("--list", action="store_true", help="list the scenes and exit")
    opts = parser.parse_args(argv)
    if opts.list:
        for number, scene in enumerate(demo.SCENES, 1):
            print(f"{number:>2}. {demo.scene_title(scene)}")
        return 0
    out = PacedNarrator(fast=opts.fast, clear=sys.stdout.isatty() and not opts.fast)
    if out.clear:
        print(CLEAR_SCREEN, end="")
    print(f"nobroker {demo.nobroker_version()}: a durable job queue, with nobody in the middle")
    out.pause(1.5)
    code = demo.run_tour(opts.dir, out, opts.scenes)
    out.pause(SCENE_END_PAUSE)
    return code


if __name__ == "__main__":
    sys.exit(main())
