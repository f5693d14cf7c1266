"""The worker announcements of the file storage: one small file per running Worker, beside the queue.

Owns: ``announce`` (write ``<name>.workers/<id>.json`` atomically: a temp
file, fsync, rename; the folder made private, 0700, on first use; old
announcements pruned), ``retire`` (remove one: a clean stop) and ``listed``
(read them all back). Imports: errors, announcements, layout, fs.

Announcements are not jobs: they live outside the log, are never replayed,
and losing one (a power cut before the rename reached the disk) loses only
a heartbeat, which the worker writes again within ANNOUNCE_SECONDS. So the
rename is not followed by a folder fsync. Each file is written whole under a
name of its own: a reader sees the last whole announcement or none, with no
lock shared with the writers of jobs. A file that is not a sound
announcement (not ours, cut short by hand) is skipped, and logged.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import time

from ..announcements import MAX_ANNOUNCE_BYTES, MAX_WORKERS_LISTED, PRUNE_AFTER, WorkerInfo, checked, from_dict
from ..errors import NobrokerError, UnsafeQueueError
from .fs import FileSystem, storage_error, write_fully
from .layout import temp_path, workers_path

logger = logging.getLogger("nobroker.filestore")

SUFFIX = ".json"
#: Seconds between two prunings by one storage object (and at its first announcement).
PRUNE_EVERY = 60.0


def announce(fs: FileSystem, directory: str, name: str, info: WorkerInfo, *, prune: bool) -> None:
    """Write ``info`` as its worker's announcement, replacing the one before; with ``prune``, drop the long-gone ones.

    Pruning reads every announcement, so the storage asks for it now and then
    (PRUNE_EVERY), not at every heartbeat of every worker.
    """
    data = json.dumps(checked(info).to_dict(), ensure_ascii=True, separators=(",", ":")).encode("ascii")
    assert len(data) <= MAX_ANNOUNCE_BYTES, "checked() bounds every field"
    folder = workers_path(directory, name)
    final = os.path.join(folder, info.id + SUFFIX)
    tmp = temp_path(final)
    try:
        _ensure_folder(fs, folder)
        fd = fs.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            write_fully(fs, fd, data, 0)
            fs.fsync(fd)
        finally:
            fs.close(fd)
        fs.replace(tmp, final)
    except OSError as exc:
        raise storage_error(exc, "writing the worker announcement", final) from None
    if prune:
        _prune(fs, folder, time.time())


def _ensure_folder(fs: FileSystem, folder: str) -> None:
    """The announcements' folder, made private (0700, whatever the umask) if missing; a non-folder there is refused."""
    try:
        st = fs.lstat(folder)
    except FileNotFoundError:
        try:
            fs.mkdir(folder, 0o700)
            fs.chmod(folder, 0o700)
        except FileExistsError:
            pass
        st = fs.lstat(folder)
    if not stat.S_ISDIR(st.st_mode):  # a symlink or a file planted at the name: never written through
        raise UnsafeQueueError(f"{folder} is not a folder: move it away so workers can announce themselves")


def retire(fs: FileSystem, directory: str, name: str, worker_id: str) -> None:
    """Remove a worker's announcement (it stopped cleanly); nothing if there is none."""
    path = os.path.join(workers_path(directory, name), worker_id + SUFFIX)
    try:
        fs.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise storage_error(exc, "removing the worker announcement", path) from None


def listed(fs: FileSystem, directory: str, name: str) -> list[WorkerInfo]:
    """Every announcement that reads soundly, oldest start first (at most MAX_WORKERS_LISTED)."""
    return _listed_in(fs, workers_path(directory, name))


def _listed_in(fs: FileSystem, folder: str) -> list[WorkerInfo]:
    try:
        entries = sorted(e for e in fs.listdir(folder) if e.endswith(SUFFIX))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise storage_error(exc, "listing the worker announcements", folder) from None
    out = []
    for entry in entries[:MAX_WORKERS_LISTED]:
        info = _read(fs, os.path.join(folder, entry))
        if info is not None and info.id + SUFFIX == entry:
            out.append(info)
    return sorted(out, key=lambda w: (w.started_at, w.id))


def _read(fs: FileSystem, path: str) -> WorkerInfo | None:
    try:
        fd = fs.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None  # retired meanwhile
    except (OSError, NobrokerError) as exc:
        logger.warning("skipping worker announcement %s: %s", path, exc)
        return None
    try:
        data = fs.pread(fd, MAX_ANNOUNCE_BYTES + 1, 0)
    except OSError as exc:
        logger.warning("skipping worker announcement %s: %s", path, exc)
        return None
    finally:
        fs.close(fd)
    try:
        if len(data) > MAX_ANNOUNCE_BYTES:
            raise ValueError(f"over {MAX_ANNOUNCE_BYTES} bytes")
        return from_dict(json.loads(data))
    except (ValueError, KeyError, TypeError, NobrokerError) as exc:
        logger.warning("skipping worker announcement %s: not one nobroker wrote (%s)", path, exc)
        return None


def _prune(fs: FileSystem, folder: str, now: float) -> None:
    """Remove announcements whose heartbeat is PRUNE_AFTER old (workers killed long ago)."""
    for info in _listed_in(fs, folder):
        if now - info.heartbeat_at >= PRUNE_AFTER:
            try:
                fs.unlink(os.path.join(folder, info.id + SUFFIX))
            except OSError:
                pass  # another worker pruned it first, or will next time

