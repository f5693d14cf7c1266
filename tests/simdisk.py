"""A simulated disk behind nobroker's FileSystem seam: power cuts, I/O faults, removable fsyncs.

Owns: SimDisk (an in-memory, single-process FileSystem), its power-cut
model, its fault injection and the test-only switch that turns the fsync
calls of one nobroker call site into no-ops. Imports: the standard library,
nobroker.fs and tests.fsync_sites (what a call site is).

The model of a disk, stated so each test knows what it proves:
  * Every inode (file or folder) has a *durable* copy and a *visible* copy.
    Reads see the visible copy. Every change (write, truncate, a name added,
    removed or renamed in a folder) is also appended to one ordered list of
    *pending* operations.
  * fsync(fd) folds that file's pending data operations into its durable
    copy; fsync_dir(path) does the same for the folder's name operations.
    Nothing else makes anything durable.
  * A failed fsync (an injected EIO/ENOSPC) drops that file's pending data
    operations: they stay visible but will never reach the disk, as Linux
    does when it marks the dirty pages clean after a writeback error. A
    later fsync that succeeds does not bring them back, so code that
    retries a failed fsync and believes it is fooled here too. As with
    Linux's errseq_t, every other descriptor of the file that was open at
    the time gets EIO from its next fsync; descriptors opened later do not.
  * power_cut(mode, rng) builds a new disk from the durable state plus
      "drop"     nothing pending,
      "prefix"   a random prefix of the pending operations, in order, the
                 next write sometimes landing as a prefix of its bytes,
      "garbage"  a prefix, then the next write landing as random bytes
                 (a torn sector), or random bytes appended to a file,
      "reorder"  for each file its own random prefix (files reach the disk
                 independently) and for each folder a random subset of its
                 name operations, kept in order.
"""

from __future__ import annotations

import errno as errno_mod
import os
import random
import stat
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nobroker.filestore.fs import FileSystem
from tests.fsync_sites import Site, call_site

#: Operations that change the disk; the crash sweeps cut before each of them.
MUTATING = ("pwrite", "truncate", "fsync", "replace", "unlink", "fsync_dir", "mkdir", "create")
#: Operations fault injection can fail (the four of the issue; "read" is an extra one).
FAULTABLE = ("write", "fsync", "rename", "fsync_dir")
FAULT_OPS = FAULTABLE + ("read",)
POWER_CUT_MODES = ("drop", "prefix", "garbage", "reorder")


class _Node:
    __slots__ = ("ino", "is_dir", "data", "entries", "mtime", "wb_err")

    def __init__(self, ino: int, is_dir: bool) -> None:
        self.ino = ino
        self.wb_err = 0  # writeback errors so far (Linux's errseq_t)
        self.is_dir = is_dir
        self.data = bytearray()
        self.entries: dict[str, int] = {}
        self.mtime = 0


@dataclass
class Fault:
    """Fail the ``nth`` call (1-based) of ``op`` with ``errno``; every later one too if ``persistent``."""

    op: str
    nth: int
    errno: int = errno_mod.EIO
    persistent: bool = False
    fired: int = 0


@dataclass
class SiteSwitch:
    """Make fsync and fsync_dir no-ops when called from ``site`` (see tests.fsync_sites)."""

    site: Site
    hits: int = 0


class SimDisk(FileSystem):
    """An in-memory disk that remembers what is durable. One process; lock() always succeeds.

    ``root`` is a folder that exists (durably) from the start; put queues
    under it. It defaults to the real temp folder's path so nobroker's
    ``os.makedirs(parent, exist_ok=True)`` finds a real folder and writes nothing.
    """

    def __init__(self, root: str | None = None) -> None:
        self.root = os.path.abspath(root or tempfile.gettempdir())
        self._nodes: dict[int, _Node] = {}
        self._durable_data: dict[int, bytes] = {}
        self._durable_entries: dict[int, dict[str, int]] = {}
        self._pending: list[tuple[Any, ...]] = []
        self._fds: dict[int, tuple[int, int]] = {}  # fd -> (ino, flags)
        self._fd_seen_err: dict[int, int] = {}  # fd -> the writeback error count it has been told about
        self._next_ino = 2
        self._next_fd = 1000
        self._tick = 0
        self._mutex = threading.RLock()
        #: Calls so far: mutating operations by name, and faultable ones (as "fault:<op>").
        self.counts: dict[str, int] = {op: 0 for op in MUTATING}
        self.fault_counts: dict[str, int] = {op: 0 for op in FAULT_OPS}
        self.faults: list[Fault] = []
        self.switches: list[SiteSwitch] = []
        self.short_writes: random.Random | None = None
        #: Called as hook(disk, op) before every mutating operation (the crash sweeps cut there).
        self.before_mutation: Callable[[SimDisk, str], None] | None = None
        #: Every site that called fsync or fsync_dir, for the teeth test.
        self.sites_seen: set[Site] = set()
        self.record_sites = False
        root_node = self._new_node(is_dir=True)
        self._root_ino = root_node.ino
        self._durable_entries[root_node.ino] = {}

    # ------------------------------------------------------------ internals
    def _new_node(self, *, is_dir: bool) -> _Node:
        node = _Node(self._next_ino, is_dir)
        self._next_ino += 1
        self._nodes[node.ino] = node
        if is_dir:
            self._durable_entries.setdefault(node.ino, {})
        else:
            self._durable_data.setdefault(node.ino, b"")
        return node

    def _split(self, path: str) -> tuple[list[str], str]:
        path = os.path.abspath(os.fspath(path))
        if path == self.root:
            return [], ""
        if not path.startswith(self.root + os.sep):
            raise PermissionError(errno_mod.EACCES, f"simulated disk holds only {self.root}", path)
        parts = path[len(self.root) + 1 :].split(os.sep)
        return parts[:-1], parts[-1]

    def _dir_of(self, path: str) -> tuple[_Node, str]:
        parents, leaf = self._split(path)
        node = self._nodes[self._root_ino]
        for part in parents:
            ino = node.entries.get(part)
            if ino is None:
                raise FileNotFoundError(errno_mod.ENOENT, "No such file or directory", path)
            node = self._nodes[ino]
            if not node.is_dir:
                raise NotADirectoryError(errno_mod.ENOTDIR, "Not a directory", path)
        return node, leaf

    def _lookup(self, path: str) -> _Node:
        parent, leaf = self._dir_of(path)
        if leaf == "":
            return parent
        ino = parent.entries.get(leaf)
        if ino is None:
            raise FileNotFoundError(errno_mod.ENOENT, "No such file or directory", path)
        return self._nodes[ino]

    def _mutating(self, op: str) -> None:
        self.counts[op] += 1
        self._tick += 1
        if self.before_mutation is not None:
            hook, self.before_mutation = self.before_mutation, None
            try:
                hook(self, op)
            finally:
                self.before_mutation = hook

    def _maybe_fail(self, op: str, path: str | None = None) -> None:
        self.fault_counts[op] += 1
        n = self.fault_counts[op]
        for fault in self.faults:
            if fault.op == op and (n == fault.nth or (fault.persistent and n >= fault.nth)):
                fault.fired += 1
                raise OSError(fault.errno, os.strerror(fault.errno), path)

    def _switched_off(self) -> bool:
        if not self.switches and not self.record_sites:
            return False
        site = call_site()
        if self.record_sites:
            self.sites_seen.add(site)
        for switch in self.switches:
            if switch.site == site:
                switch.hits += 1
                return True
        return False

    def _node_of_fd(self, fd: int) -> tuple[_Node, int]:
        try:
            ino, flags = self._fds[fd]
        except KeyError:
            raise OSError(errno_mod.EBADF, "Bad file descriptor") from None
        return self._nodes[ino], flags

    # ------------------------------------------------------------ the seam
    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        with self._mutex:
            parent, leaf = self._dir_of(path)
            ino = parent.entries.get(leaf)
            if ino is not None and flags & os.O_CREAT and flags & os.O_EXCL:
                raise FileExistsError(errno_mod.EEXIST, "File exists", path)
            if ino is None:
                if not flags & os.O_CREAT:
                    raise FileNotFoundError(errno_mod.ENOENT, "No such file or directory", path)
                self._mutating("create")
                node = self._new_node(is_dir=False)
                parent.entries[leaf] = node.ino
                parent.mtime = self._tick
                self._pending.append(("link", parent.ino, leaf, node.ino))
                ino = node.ino
            elif self._nodes[ino].is_dir:
                raise IsADirectoryError(errno_mod.EISDIR, "Is a directory", path)
            if flags & os.O_TRUNC and self._nodes[ino].data:
                self.truncate_ino(ino, 0)
            fd = self._next_fd
            self._next_fd += 1
            self._fds[fd] = (ino, flags)
            self._fd_seen_err[fd] = self._nodes[ino].wb_err
            return fd

    def close(self, fd: int) -> None:
        with self._mutex:
            self._fd_seen_err.pop(fd, None)
            if self._fds.pop(fd, None) is None:
                raise OSError(errno_mod.EBADF, "Bad file descriptor")

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        with self._mutex:
            node, _ = self._node_of_fd(fd)
            self._maybe_fail("read")
            return bytes(node.data[offset : offset + size])

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        with self._mutex:
            node, flags = self._node_of_fd(fd)
            if flags & (os.O_WRONLY | os.O_RDWR) == 0:
                raise OSError(errno_mod.EBADF, "Bad file descriptor")
            self._mutating("pwrite")
            self._maybe_fail("write")
            data = bytes(data)
            if self.short_writes is not None and len(data) > 1 and self.short_writes.random() < 0.5:
                data = data[: self.short_writes.randrange(1, len(data))]
            self._apply_write(node, offset, data)
            self._pending.append(("write", node.ino, offset, data))
            return len(data)

    @staticmethod
    def _apply_write(node: _Node, offset: int, data: bytes) -> None:
        if offset > len(node.data):
            node.data.extend(b"\0" * (offset - len(node.data)))
        node.data[offset : offset + len(data)] = data

    def truncate(self, fd: int, size: int) -> None:
        with self._mutex:
            node, _ = self._node_of_fd(fd)
            self.truncate_ino(node.ino, size)

    def allocate(self, fd: int, offset: int, length: int) -> None:
        with self._mutex:
            node, _ = self._node_of_fd(fd)
            self._maybe_fail("write")  # a full disk refuses the room as it refuses a write
            if offset + length > len(node.data):
                self.truncate_ino(node.ino, offset + length)

    def truncate_ino(self, ino: int, size: int) -> None:
        self._mutating("truncate")
        node = self._nodes[ino]
        if size < len(node.data):
            del node.data[size:]
        else:
            node.data.extend(b"\0" * (size - len(node.data)))
        self._pending.append(("trunc", ino, size))

    def fsync(self, fd: int) -> None:
        with self._mutex:
            node, _ = self._node_of_fd(fd)
            self._mutating("fsync")
            if self._switched_off():
                return
            try:
                self._maybe_fail("fsync")
            except OSError:
                # The kernel marks the dirty pages clean after a failed writeback:
                # they are never written, even if a later fsync succeeds.
                self._pending = [p for p in self._pending if not (p[0] in ("write", "trunc") and p[1] == node.ino)]
                node.wb_err += 1
                self._fd_seen_err[fd] = node.wb_err
                raise
            self._settle(lambda p: p[0] in ("write", "trunc") and p[1] == node.ino)
            if self._fd_seen_err.get(fd, 0) < node.wb_err:
                # Every descriptor open when the error happened hears of it once (errseq_t).
                self._fd_seen_err[fd] = node.wb_err
                raise OSError(errno_mod.EIO, os.strerror(errno_mod.EIO))

    def fsync_dir(self, path: str) -> None:
        with self._mutex:
            node = self._lookup(path)
            self._mutating("fsync_dir")
            if self._switched_off():
                return
            self._maybe_fail("fsync_dir", path)
            self._settle(lambda p: p[0] in ("link", "unlink", "rename") and p[1] == node.ino)

    def _settle(self, mine: Callable[[tuple[Any, ...]], bool]) -> None:
        keep = []
        for p in self._pending:
            if mine(p):
                self._apply_durable(p, self._durable_data, self._durable_entries)
            else:
                keep.append(p)
        self._pending = keep

    @staticmethod
    def _apply_durable(p: tuple[Any, ...], data: dict[int, bytes], entries: dict[int, dict[str, int]]) -> None:
        kind = p[0]
        if kind == "write":
            _, ino, offset, chunk = p
            buf = bytearray(data.get(ino, b""))
            if offset > len(buf):
                buf.extend(b"\0" * (offset - len(buf)))
            buf[offset : offset + len(chunk)] = chunk
            data[ino] = bytes(buf)
        elif kind == "trunc":
            _, ino, size = p
            buf = bytearray(data.get(ino, b""))
            if size < len(buf):
                del buf[size:]
            else:
                buf.extend(b"\0" * (size - len(buf)))
            data[ino] = bytes(buf)
        elif kind == "link":
            _, dino, name, ino = p
            entries.setdefault(dino, {})[name] = ino
        elif kind == "unlink":
            _, dino, name = p
            entries.setdefault(dino, {}).pop(name, None)
        elif kind == "rename":
            _, dino, src, dst, ino = p
            names = entries.setdefault(dino, {})
            names.pop(src, None)
            names[dst] = ino

    def replace(self, src: str, dst: str) -> None:
        with self._mutex:
            sparent, sleaf = self._dir_of(src)
            dparent, dleaf = self._dir_of(dst)
            if sparent is not dparent:
                raise OSError(errno_mod.EXDEV, "simulated disk renames within one folder only", src)
            ino = sparent.entries.get(sleaf)
            if ino is None:
                raise FileNotFoundError(errno_mod.ENOENT, "No such file or directory", src)
            self._mutating("replace")
            self._maybe_fail("rename", src)
            del sparent.entries[sleaf]
            sparent.entries[dleaf] = ino
            sparent.mtime = self._tick
            self._nodes[ino].mtime = self._tick
            self._pending.append(("rename", sparent.ino, sleaf, dleaf, ino))

    def unlink(self, path: str) -> None:
        with self._mutex:
            parent, leaf = self._dir_of(path)
            ino = parent.entries.get(leaf)
            if ino is None:
                raise FileNotFoundError(errno_mod.ENOENT, "No such file or directory", path)
            if self._nodes[ino].is_dir:
                raise IsADirectoryError(errno_mod.EISDIR, "Is a directory", path)
            self._mutating("unlink")
            del parent.entries[leaf]
            parent.mtime = self._tick
            self._pending.append(("unlink", parent.ino, leaf))

    def mkdir(self, path: str, mode: int = 0o700) -> None:
        with self._mutex:
            parent, leaf = self._dir_of(path)
            if leaf in parent.entries or leaf == "":
                raise FileExistsError(errno_mod.EEXIST, "File exists", path)
            self._mutating("mkdir")
            node = self._new_node(is_dir=True)
            parent.entries[leaf] = node.ino
            self._pending.append(("link", parent.ino, leaf, node.ino))

    def listdir(self, path: str) -> list[str]:
        with self._mutex:
            node = self._lookup(path)
            if not node.is_dir:
                raise NotADirectoryError(errno_mod.ENOTDIR, "Not a directory", path)
            return sorted(node.entries)

    def lstat(self, path: str) -> os.stat_result:
        with self._mutex:
            node = self._lookup(path)
            uid = os.geteuid() if hasattr(os, "geteuid") else 0
            mode = (stat.S_IFDIR | 0o700) if node.is_dir else (stat.S_IFREG | 0o600)
            size = len(node.data)
            return os.stat_result(
                (mode, node.ino, 1, 1, uid, 0, size, node.mtime, node.mtime, node.mtime),
                {"st_mtime_ns": node.mtime, "st_atime_ns": node.mtime, "st_ctime_ns": node.mtime},
            )

    def chmod(self, path: str, mode: int) -> None:
        with self._mutex:
            self._lookup(path)

    def touch(self, path: str) -> None:
        with self._mutex:
            node = self._lookup(path)
            self._tick += 1
            node.mtime = self._tick

    def size(self, fd: int) -> int:
        with self._mutex:
            node, _ = self._node_of_fd(fd)
            return len(node.data)

    def lock(self, fd: int, *, exclusive: bool, blocking: bool) -> bool:
        self._node_of_fd(fd)
        return True

    def unlock(self, fd: int) -> None:
        self._node_of_fd(fd)

    # ------------------------------------------------------------ power
    @property
    def pending(self) -> int:
        """How many operations are visible but not yet durable."""
        return len(self._pending)

    def power_cut(self, mode: str = "drop", rng: random.Random | None = None) -> SimDisk:
        """A new disk: what survives a power cut now (see the module docstring for the modes)."""
        rng = rng or random.Random(0)
        with self._mutex:
            data = dict(self._durable_data)
            entries = {k: dict(v) for k, v in self._durable_entries.items()}
            pending = list(self._pending)
            if mode == "drop":
                kept: list[tuple[Any, ...]] = []
            elif mode in ("prefix", "garbage"):
                kept = pending[: rng.randint(0, len(pending))]
            elif mode == "reorder":
                cut_at: dict[tuple[str, int], int] = {}
                streams: dict[tuple[str, int], int] = {}
                for p in pending:
                    key = ("data" if p[0] in ("write", "trunc") else "dir", p[1])
                    streams[key] = streams.get(key, 0) + 1
                for key, n in streams.items():
                    cut_at[key] = rng.randint(0, n)
                seen: dict[tuple[str, int], int] = {}
                kept = []
                for p in pending:
                    key = ("data" if p[0] in ("write", "trunc") else "dir", p[1])
                    seen[key] = seen.get(key, 0) + 1
                    if key[0] == "data":
                        if seen[key] <= cut_at[key]:
                            kept.append(p)
                    elif rng.random() < 0.5:
                        kept.append(p)
            else:
                raise ValueError(f"unknown power-cut mode {mode!r}; use one of {POWER_CUT_MODES}")
            for p in kept:
                self._apply_durable(p, data, entries)
            rest = pending[len(kept) :]
            if mode == "prefix" and rest and rest[0][0] == "write" and rng.random() < 0.5:
                # Assumption 1 of fs.py: an interrupted write leaves a prefix of its bytes.
                _, ino, offset, chunk = rest[0]
                self._apply_durable(("write", ino, offset, chunk[: rng.randint(0, len(chunk))]), data, entries)
            if mode == "garbage":
                writes = [p for p in rest if p[0] == "write"]
                if rest and rest[0][0] == "write":
                    _, ino, offset, chunk = rest[0]
                    junk = rng.randbytes(rng.randint(1, len(chunk)))
                    self._apply_durable(("write", ino, offset, junk), data, entries)
                elif writes:
                    ino = writes[0][1]
                    junk = rng.randbytes(rng.randint(1, 64))
                    self._apply_durable(("write", ino, len(data.get(ino, b"")), junk), data, entries)
            return self._rebuilt(data, entries)

    def _rebuilt(self, data: dict[int, bytes], entries: dict[int, dict[str, int]]) -> SimDisk:
        new = SimDisk(self.root)
        new._nodes.clear()
        new._durable_data.clear()
        new._durable_entries.clear()
        new._root_ino = self._root_ino
        for ino, node in self._nodes.items():
            copy = _Node(ino, node.is_dir)
            copy.mtime = node.mtime
            if node.is_dir:
                copy.entries = dict(entries.get(ino, {}))
                new._durable_entries[ino] = dict(copy.entries)
            else:
                copy.data = bytearray(data.get(ino, b""))
                new._durable_data[ino] = bytes(copy.data)
            new._nodes[ino] = copy
        new._next_ino = self._next_ino
        new._tick = self._tick + 1
        return new

    def clone(self) -> SimDisk:
        """An exact copy of what is visible now, all of it durable (a clean shutdown)."""
        with self._mutex:
            data = {ino: bytes(n.data) for ino, n in self._nodes.items() if not n.is_dir}
            entries = {ino: dict(n.entries) for ino, n in self._nodes.items() if n.is_dir}
            return self._rebuilt(data, entries)

    # ------------------------------------------------------------ test helpers
    def read_file(self, path: str) -> bytes:
        with self._mutex:
            return bytes(self._lookup(path).data)

    def write_file(self, path: str, data: bytes) -> None:
        """Put ``data`` at ``path`` durably (for building hostile files)."""
        with self._mutex:
            parent, leaf = self._dir_of(path)
            ino = parent.entries.get(leaf)
            if ino is None:
                node = self._new_node(is_dir=False)
                parent.entries[leaf] = node.ino
                self._durable_entries[parent.ino][leaf] = node.ino
            else:
                node = self._nodes[ino]
            node.data = bytearray(data)
            self._durable_data[node.ino] = bytes(data)

    def makedirs(self, path: str) -> None:
        """Create ``path`` (and parents) durably."""
        with self._mutex:
            parents, leaf = self._split(path)
            node = self._nodes[self._root_ino]
            for part in parents + ([leaf] if leaf else []):
                ino = node.entries.get(part)
                if ino is None:
                    child = self._new_node(is_dir=True)
                    node.entries[part] = child.ino
                    self._durable_entries[node.ino][part] = child.ino
                    node = child
                else:
                    node = self._nodes[ino]

    def files(self, path: str) -> dict[str, bytes]:
        """Name -> visible bytes of every file in the folder ``path``."""
        with self._mutex:
            folder = self._lookup(path)
            return {n: bytes(self._nodes[i].data) for n, i in folder.entries.items() if not self._nodes[i].is_dir}

    def unsynced_files(self, path: str) -> set[str]:
        """Names in the folder ``path`` whose data has writes no fsync has covered yet."""
        with self._mutex:
            folder = self._lookup(path)
            dirty = {p[1] for p in self._pending if p[0] in ("write", "trunc")}
            return {name for name, ino in folder.entries.items() if ino in dirty}

    def reset_counts(self) -> None:
        self.counts = {op: 0 for op in MUTATING}
        self.fault_counts = {op: 0 for op in FAULT_OPS}


def fresh_queue_path(disk: SimDisk, rng: random.Random | None = None) -> str:
    """A queue folder path under the disk's root that does not exist yet."""
    tag = (rng or random.Random()).getrandbits(48)
    return os.path.join(disk.root, f"simq-{tag:012x}")


__all__ = ["SimDisk", "Fault", "SiteSwitch", "call_site", "fresh_queue_path", "MUTATING", "FAULTABLE", "FAULT_OPS", "POWER_CUT_MODES"]
