"""The ``<name>.current`` pointer: which generation of the log is the truth.

Owns: reading it (a generation number, or None before the first
compaction; ``current_generation``: 0 then), and replacing it in two steps a compactor can split: a durable
temp file, then one atomic rename (durable after the caller's folder fsync);
and giving it a new signature that names the same generation (``renew_signature``).
Imports: errors, layout, fs.
"""

from __future__ import annotations

import errno as errno_mod
import os

from ..errors import CorruptLogError, UnsafeQueueError
from .fs import OS_FILESYSTEM, FileSystem, storage_error, write_fully
from .layout import MAX_GENERATION, pointer_path, temp_path


def read_pointer(fs: FileSystem, directory: str, name: str) -> int | None:
    """The authoritative generation, or None when no compaction has happened yet."""
    path = pointer_path(directory, name)
    try:
        fd = fs.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno_mod.ELOOP:
            raise UnsafeQueueError(f"{path} is a symlink; nobroker refuses symlinked queue files") from None
        raise storage_error(exc, "reading", path) from None
    try:
        data = fs.pread(fd, 64, 0)
    except OSError as exc:
        raise storage_error(exc, "reading", path) from None
    finally:
        fs.close(fd)
    text = data.decode("ascii", "replace").strip()
    if not text.isdigit() or int(text) > MAX_GENERATION:
        raise CorruptLogError(
            f"{path} should hold one generation number (0-{MAX_GENERATION}) but holds {text[:40]!r}. "
            "Run `nobroker verify` to see which generation files exist, then `nobroker repair`.",
            path=path,
        )
    return int(text)


def current_generation(directory: str, name: str, fs: FileSystem = OS_FILESYSTEM) -> int:
    """The authoritative generation: the pointer's, or 0 before the first compaction."""
    pointer = read_pointer(fs, directory, name)
    return 0 if pointer is None else pointer


def write_pointer(fs: FileSystem, directory: str, name: str, generation: int, *, sync: bool, folder: bool = True) -> None:
    """Atomically replace the pointer: temp file (O_EXCL), fsync, rename, fsync directory (unless not ``folder``).

    Without ``folder`` the rename may not survive a power cut: only for a
    pointer naming the generation the old one names (a new one for peers to see).
    """
    tmp = prepare_pointer(fs, directory, name, generation, sync=sync)
    install_pointer(fs, directory, name, tmp)
    if sync and folder:
        try:
            fs.fsync_dir(directory)
        except OSError as exc:
            raise storage_error(exc, "writing the generation pointer", pointer_path(directory, name)) from None


def prepare_pointer(fs: FileSystem, directory: str, name: str, generation: int, *, sync: bool) -> str:
    """The first half of replacing the pointer: a durable temp file naming ``generation``; returns its path.

    Nothing reads the temp file; ``install_pointer`` renames it over the pointer.
    """
    path = pointer_path(directory, name)
    tmp = temp_path(path)
    try:
        if fs.exists(tmp):
            fs.unlink(tmp)
        fd = fs.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            data = f"{generation}\n".encode("ascii")
            write_fully(fs, fd, data, 0)
            if sync:
                fs.fsync(fd)
        finally:
            fs.close(fd)
    except OSError as exc:
        raise storage_error(exc, "writing the generation pointer", path) from None
    return tmp


def install_pointer(fs: FileSystem, directory: str, name: str, tmp: str) -> None:
    """The second half: rename the prepared temp file over the pointer (atomic; durable after a folder fsync)."""
    path = pointer_path(directory, name)
    try:
        fs.replace(tmp, path)
    except OSError as exc:
        raise storage_error(exc, "writing the generation pointer", path) from None


def renew_signature(fs: FileSystem, directory: str, name: str, generation: int) -> None:
    """Under the exclusive lock, before a writer cuts records it rolls back: a new pointer signature, the same generation.

    A peer that read the records must not read on from where they ended
    once others write over the place they held (the middle of someone
    else's record: false damage, or an acknowledged record cut as a torn
    tail). A new signature naming the same generation makes it replay the
    log instead (commit.Committer._catch_up). OSError or NobrokerError if
    the disk fails.
    """
    path = pointer_path(directory, name)
    if fs.exists(path):
        fs.touch(path)  # no data written: nothing a power cut could spoil
    else:  # no compaction yet: a pointer naming this generation, durable before its rename
        write_pointer(fs, directory, name, generation, sync=True, folder=False)
