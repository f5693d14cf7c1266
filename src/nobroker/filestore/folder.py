"""The queue folder: made private if missing, refused if unsafe; who is alive.

Owns: prepare_directory (make the folder 0700, refuse one that is not a
folder, another user's, writable by every user, or on a network
filesystem), network_filesystem (Linux's /proc/self/mountinfo) and pid_alive
(is a temp file's writer still running?). Imports: errors, fs.
"""

from __future__ import annotations

import os
import stat
import sys

from ..errors import UnsafeQueueError
from .fs import FileSystem, storage_error

#: Filesystem types whose locking or rename semantics a queue cannot trust.
NETWORK_FILESYSTEMS = frozenset(
    {"nfs", "nfs4", "cifs", "smb", "smb3", "smbfs", "9p", "fuse.sshfs", "afs", "ceph", "glusterfs", "lustre", "davfs", "fuse.davfs2"}
)



def prepare_directory(fs: FileSystem, path: str) -> None:
    """Make the queue folder (0700) if it is missing; refuse one that is unsafe to keep jobs in."""
    try:
        st = fs.lstat(path)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            fs.mkdir(path, 0o700)
            fs.chmod(path, 0o700)  # exactly 0700, whatever the umask
            # The new folder's name becomes durable when QueueFiles._open fsyncs
            # the parent, before anything is acknowledged in it.
        except FileExistsError:
            pass
        except OSError as exc:
            raise storage_error(exc, "creating the queue folder", path) from None
        st = fs.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        st = os.stat(path)  # a symlinked folder is the user's choice; its files may not be links
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeQueueError(f"{path} is not a folder; a queue needs a folder of its own")
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        raise UnsafeQueueError(
            f"{path} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()}): "
            "another user could change your jobs. Use a folder you own."
        )
    network = network_filesystem(path)
    if network:
        raise UnsafeQueueError(
            f"{path} is on a network filesystem ({network}). nobroker's file lock and atomic renames are "
            "not reliable there: keep the queue on a local disk, or use the PostgreSQL storage for many hosts."
        )
    if sys.platform != "win32" and st.st_mode & stat.S_IWOTH:
        raise UnsafeQueueError(
            f"{path} is writable by every user (mode {stat.S_IMODE(st.st_mode):o}): anyone could plant or "
            f"remove queue files. Run `chmod 700 {path}` or use a private folder."
        )


def network_filesystem(path: str) -> str | None:
    """The filesystem type of ``path`` if it is a network one (Linux only: /proc/self/mountinfo)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
    except OSError:
        return None
    real = os.path.realpath(path)
    best, best_type = "", ""
    for line in lines:
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) < 5 or not right:
            continue
        mount_point = fields[4].replace("\\040", " ")
        if (real == mount_point or real.startswith(mount_point.rstrip("/") + "/")) and len(mount_point) >= len(best):
            best, best_type = mount_point, right.split()[0]
    return best_type if best_type in NETWORK_FILESYSTEMS else None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True
