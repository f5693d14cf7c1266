"""A model check: random operation sequences against a plain reference model of the semantics.

Owns: the random step generator, the shrinker that reduces a failing
sequence by deleting steps, and the checks (one handle, two handles on one
queue, and the check's own teeth). The reference model, RefModel (DESIGN.md
section 3 written down as a dict of jobs, with no code from nobroker's
replay), is in tests/refmodel.py; the runner that drives a real Queue on a
simulated disk and the model side by side is in tests/modelrunner.py.
Imports: the standard library, nobroker (the teeth check patches its file
storage), tests.modelrunner and tests.support.

After every step the full state of every job is compared (every Job field;
``seq`` by the order it gives, since a compaction may renumber the next
job). Reopening and simulated power cuts are steps too. Every completed
operation was fsynced except leases, whose records become durable with the
next fsync of the log: a cut may take back leases (and the reclaims written
with them) made since the last other write, so after a cut each job must be
as the model has it now or as it was before one of those leases, and the
model carries on from what survived.

A failure prints the seed and the shortest failing sequence found; re-run
one seed with NOBROKER_MODEL_SEED=<seed>.
"""

from __future__ import annotations

import os
import random
import unittest
from typing import Any

from tests.modelrunner import Runner
from tests.support import LONG

SEQUENCES = 3000 if LONG else 300
STEPS = 60 if LONG else 40


# ====================================================================== steps
OPS = (
    "enqueue", "enqueue", "enqueue", "enqueue_many", "lease", "lease", "ack", "ack", "ack_by_id", "ack_stale",
    "nack", "nack", "extend", "extend_many", "set_stage", "requeue_dead", "purge", "compact", "tick", "tick", "tick",
    "reopen", "power_cut", "ack_unknown", "schedule", "enqueue_due", "enqueue_due", "cancel", "cancel", "limit",
    "snooze", "pause", "run_now", "delete",
)  # fmt: skip


def random_steps(rng: random.Random, n: int) -> list[tuple[Any, ...]]:
    steps: list[tuple[Any, ...]] = []
    for _ in range(n):
        op = rng.choice(OPS)
        if op == "purge" and rng.random() < 0.7:
            op = "tick"  # a purge wipes the state; keep it rare so sequences build history
        steps.append((op, rng.getrandbits(32)))
    return steps


def failure_of(seed: int, steps: list[tuple[Any, ...]], handles: int = 1) -> str | None:
    try:
        Runner(seed, handles).run(steps)
    except Exception as exc:  # a mismatch, or any exception the real queue should not raise
        return f"{type(exc).__name__}: {exc}"
    return None


def shrink(seed: int, steps: list[tuple[Any, ...]], handles: int = 1) -> list[tuple[Any, ...]]:
    """Delete chunks of steps (halving the chunk size) while the sequence still fails."""
    chunk = max(len(steps) // 2, 1)
    while chunk >= 1:
        i = 0
        while i < len(steps):
            candidate = steps[:i] + steps[i + chunk :]
            if candidate and failure_of(seed, candidate, handles) is not None:
                steps = candidate
            else:
                i += chunk
        chunk //= 2
    return steps


class ModelCheck(unittest.TestCase):
    sequences_checked = 0

    def check_sequences(self, seeds: list[int], handles: int) -> int:
        steps_total = 0
        for seed in seeds:
            steps = random_steps(random.Random(seed), STEPS)
            runner = Runner(seed, handles)
            try:
                runner.run(steps)
            except Exception as exc:
                smallest = shrink(seed, steps, handles)
                lines = "\n".join(f"  {op} {arg}" for op, arg in smallest)
                self.fail(
                    f"seed {seed} ({handles} handle(s)) fails: {type(exc).__name__}: {exc}\n"
                    f"shortest failing sequence ({len(smallest)} of {len(steps)} steps), "
                    f"now failing with: {failure_of(seed, smallest, handles)}\n{lines}\n"
                    f"re-run: NOBROKER_MODEL_SEED={seed} NOBROKER_MODEL_HANDLES={handles} "
                    "python make.py test tests.test_model_check"
                )
            steps_total += runner.steps_run
        return steps_total

    def test_random_sequences_match_the_reference_model(self) -> None:
        only = os.environ.get("NOBROKER_MODEL_SEED")
        handles = int(os.environ.get("NOBROKER_MODEL_HANDLES", "1"))
        seeds = [int(only)] if only else [1_000 + i for i in range(SEQUENCES)]
        steps_total = self.check_sequences(seeds, handles)
        print(f"\nmodel check: {len(seeds)} sequences, {steps_total} steps, every job compared after each step")

    def test_two_handles_on_one_queue_match_the_model(self) -> None:
        """Each step acts through one of two Queue objects; both must show the model's state."""
        if os.environ.get("NOBROKER_MODEL_SEED"):
            self.skipTest("one seed requested")
        seeds = [50_000 + i for i in range(SEQUENCES // 3)]
        steps_total = self.check_sequences(seeds, 2)
        print(f"\nmodel check, two handles: {len(seeds)} sequences, {steps_total} steps")

    def test_the_model_check_has_teeth(self) -> None:
        """A queue that forgets a nack's error text must be caught, with a shrunk sequence."""
        from nobroker.filestore import storage as filestore

        original = filestore.FileStorage.nack

        def forgetful(self: Any, job_id: str, token: Any, error: Any, delay: Any, permanent: bool) -> Any:
            return original(self, job_id, token, None, delay, permanent)

        filestore.FileStorage.nack = forgetful  # type: ignore[method-assign]
        try:
            found = None
            for seed in range(5_000, 5_200):
                steps = random_steps(random.Random(seed), STEPS)
                if failure_of(seed, steps) is not None:
                    found = (seed, shrink(seed, steps))
                    break
        finally:
            filestore.FileStorage.nack = original  # type: ignore[method-assign]
        self.assertIsNotNone(found, "a queue that drops nack errors passed 200 sequences")
        assert found is not None
        self.assertLessEqual(len(found[1]), 8, f"shrinking left {found[1]}")


if __name__ == "__main__":
    unittest.main()
