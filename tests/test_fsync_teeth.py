"""The teeth test: every fsync in nobroker is found by reading the source, and none can go unnoticed.

Owns: the rule every fsync of src/nobroker obeys, now and later (checkpoints,
cross-process group commit, anything): it must be reached by a test that
fails when that one statement does nothing. This module checks the rule:

  1. reads src/nobroker with ``ast`` for every statement that calls fsync,
     fdatasync or a folder fsync, directly or through the FileSystem seam
     (tests/fsync_sites.py);
  2. runs every probe below once as it is, recording the sites its calls
     come from: each probe must pass, every site found in the source must be
     reached by some probe, and every site reached must be one found;
  3. switches each site off in turn (the simulated disk's SiteSwitch, or
     OsSyncCalls for the operating system's own calls) and runs the probes
     that reach it until one fails. A site no probe catches fails the test.

So a new fsync without a test that needs it fails `python make.py test`:
add a workload to one of the probes that reaches the new site and loses an
acknowledged write (or resurrects one) without it, or do not add the fsync.
docs/GUARANTEES.md lists every site, why it is there, and the tests that fail without it.
Imports: the standard library, nobroker, and the sweeps of tests.power_loss_sweep,
tests.test_power_loss_offpath, tests.ioerrorsupport and tests.test_real_seam.
"""

from __future__ import annotations

import errno
import unittest
from collections.abc import Callable
from dataclasses import dataclass

from tests.fsync_sites import Site, source_sites
from tests.ioerrorsupport import FaultRun
from tests.power_loss_sweep import Sweep
from tests.simdisk import Fault, SimDisk, SiteSwitch
from tests.support import IN_CI
from tests.test_power_loss_offpath import repair_sweeps, roster_sweep, snapshot_sweep
from tests.test_real_seam import CHECKS, strace_unusable

#: Power-loss workloads a switched-off site is tried against: (seed, process kill rate), first failure wins.
SWEEP_PLAN = [(seed, 0.0) for seed in range(4)] + [(seed, 0.05) for seed in range(12)]
#: Handle counts the fsync-failure runs use (two: the rollback of one writer beside another).
FAULT_HANDLES = (1, 2)

Outcome = tuple[str | None, set[Site]]  # (what went wrong, or None; the sites its calls came from)


@dataclass(frozen=True)
class Probe:
    """A test that can run with one site switched off (``None``: as it is)."""

    name: str
    run: Callable[[Site | None], Outcome]


class DiskSetup:
    """Applied to every simulated disk a probe writes on: the switch, and recording where fsyncs come from."""

    def __init__(self, site: Site | None) -> None:
        self.site = site
        self.disks: list[SimDisk] = []

    def __call__(self, disk: SimDisk) -> None:
        disk.record_sites = True
        if self.site is not None:
            disk.switches.append(SiteSwitch(self.site))
        self.disks.append(disk)

    def sites(self) -> set[Site]:
        return set().union(*(d.sites_seen for d in self.disks))


def power_loss(site: Site | None) -> Outcome:
    seen: set[Site] = set()
    for seed, kill_rate in SWEEP_PLAN:
        sweep = Sweep(seed, switch=SiteSwitch(site) if site else None, stop_at_first=True, record_sites=True,
                      kill_rate=kill_rate)  # fmt: skip
        violations = sweep.run()
        seen |= sweep.disk.sites_seen
        if violations.total():
            return f"power-loss sweep, seed {seed}, kill rate {kill_rate}: {violations.summary()}", seen
    return None, seen


def repair(site: Site | None) -> Outcome:
    setup = DiskSetup(site)
    problems = repair_sweeps(setup, stop_at_first=True)
    return (problems[0] if problems else None), setup.sites()


def snapshots(site: Site | None) -> Outcome:
    setup = DiskSetup(site)
    problems, _ignored = snapshot_sweep(setup)
    return (problems[0] if problems else None), setup.sites()


def announcements(site: Site | None) -> Outcome:
    setup = DiskSetup(site)
    problems = roster_sweep(setup)
    return (problems[0] if problems else None), setup.sites()


def failed_fsyncs(site: Site | None) -> Outcome:
    """EIO from every Nth fsync (once and for good), one handle and two: the rollback paths."""
    setup = DiskSetup(site)
    plain = SimDisk()
    FaultRun(unittest.TestCase(), None, disk=plain).run()
    for handles in FAULT_HANDLES:
        for persistent in (False, True):
            for nth in range(1, plain.fault_counts["fsync"] + 1):
                disk = SimDisk()
                setup(disk)
                fault = Fault("fsync", nth, errno.EIO, persistent)
                try:
                    FaultRun(unittest.TestCase(), fault, disk=disk, handles=handles).run()
                except Exception as exc:  # noqa: BLE001 - a failed check, or a queue that no longer opens
                    what = f"fault run ({handles} handles, {fault}): {type(exc).__name__}: {str(exc)[:300]}"
                    return what, setup.sites()
    return None, setup.sites()


def real(name: str) -> Callable[[Site | None], Outcome]:
    def run(site: Site | None) -> Outcome:
        result = CHECKS[name](frozenset({site}) if site else frozenset())
        return result.violation(), result.sites

    return run


def probes() -> list[Probe]:
    """Cheapest first: each switched-off site is tried against the probes that reach it, in this order."""
    found = [Probe(name, real(name)) for name in CHECKS if name != "real seam, under strace"]
    found += [Probe("announcement sweep", announcements), Probe("snapshot sweep", snapshots), Probe("repair sweep", repair),
              Probe("failed fsyncs", failed_fsyncs),
              Probe("power-loss sweep", power_loss)]  # fmt: skip
    if strace_unusable() is None:
        found.append(Probe("real seam, under strace", real("real seam, under strace")))
    return found


class Teeth(unittest.TestCase):
    def test_every_fsync_site_is_found_reached_and_needed(self) -> None:
        sites = {s.site: s for s in source_sites()}
        self.assertGreaterEqual(len(sites), 10, f"the inventory looks broken: {sorted(sites)}")
        why = strace_unusable()
        if why is not None and IN_CI:
            self.fail(f"{why}: in CI the real seam's sites must also be checked by the kernel's count")
        reached: dict[Site, list[Probe]] = {}
        for probe in probes():
            problem, seen = probe.run(None)
            self.assertIsNone(problem, f"{probe.name} fails with every fsync in place")
            for site in seen:
                reached.setdefault(site, []).append(probe)
        unknown = sorted(set(reached) - set(sites))
        self.assertEqual(unknown, [], "these sites call fsync at run time but reading the source missed them: "
                         "teach tests/fsync_sites.py to see them")  # fmt: skip
        unreached = [sites[s].label() for s in sorted(set(sites) - set(reached))]
        self.assertEqual(unreached, [], "no test reaches these fsyncs: every fsync needs a test that fails without it")
        report, survived = [], []
        for site, source in sorted(sites.items()):
            caught = None
            for probe in reached[site]:
                problem, _seen = probe.run(site)
                if problem is not None:
                    caught = f"{probe.name}: {problem[:160]}"
                    break
            report.append(f"  {source.label()}\n      {'caught by ' + caught if caught else 'NOT CAUGHT'}")
            if caught is None:
                survived.append(source.label())
        print(f"\nteeth ({len(sites)} fsync sites, each switched off in turn):\n" + "\n".join(report))
        self.assertEqual(survived, [], "switching these fsyncs off went unnoticed:\n" + "\n".join(report))

    def test_the_inventory_sees_every_way_of_calling_fsync(self) -> None:
        """Through the seam, os.fsync, and fdatasync reached through getattr, as filestore/fs.py and cli/bench.py write it."""
        found = {(s.file, s.function): s.op for s in source_sites()}
        self.assertEqual(found.get(("filestore/fs.py", "RealFileSystem.fsync")), "os")
        self.assertEqual(found.get(("filestore/fs.py", "RealFileSystem.fsync_dir")), "os")
        self.assertEqual(found.get(("filestore/log.py", "LogFile.sync_through")), "fsync")
        self.assertEqual(found.get(("filestore/storage.py", "FileStorage._sync_directory")), "fsync_dir")


if __name__ == "__main__":
    unittest.main()
