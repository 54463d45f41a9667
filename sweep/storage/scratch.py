"""Directories private to one process: a pack's working copies and its checkpoints on their way to Tune (copies.py,
in the temp dir), and a driver's local copy of a bucket's place (out_dir.py, under HEADSWEEP_CACHE).

Each is named for its process and host, `headsweep-<pid>-<host tag>-...`: no other process touches it while its owner
lives, and one whose owner is gone can be told from the name alone (a process killed by SIGKILL, or by the OOM killer,
never removes its own). Such a leftover is renamed to a name of the process that found it before that process removes
or reuses it: a rename happens once, so of two processes that find it at once only one acts on it, and neither acts
on a directory the other has just taken.
"""
from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import socket
import tempfile
from pathlib import Path

SCRATCH = "headsweep"  # the name of every private directory starts with this, then its pid and host (prefix)
# The host too: containers may share a temp dir without seeing each other's pids, and a pid this one cannot see must
# not read as a process that is gone. A hash: fixed width, so no host's name is a prefix of another's.
HOST_TAG = hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]


def prefix(kind: str = "") -> str:
    """The name prefix of this process's private directories: headsweep-<pid>-<host tag>-<kind>."""
    return f"{SCRATCH}-{os.getpid()}-{HOST_TAG}-{kind}"


def new_dir(parent: Path | None = None) -> Path:
    """A new private directory of this process in `parent` (default: the temp dir)."""
    return Path(tempfile.mkdtemp(prefix=prefix(), dir=parent))


def take_over(parent: Path) -> Path | None:
    """A private directory that a process of this host that is gone left in `parent`, renamed this process's with all
    it holds (None: none left, or others took each first)."""
    for path in _left_by_processes_gone(parent):
        if (taken := _claim(path)) is not None:
            return taken
    return None


def remove_leftovers(parent: Path | None = None) -> None:
    """Remove the private directories that this host's processes that are gone left in `parent` (default: the temp
    dir). A live process's are never removed; one whose pid a new process has taken since stays until that one ends
    too (a leak, never a loss)."""
    for path in _left_by_processes_gone(Path(parent or tempfile.gettempdir())):
        if (taken := _claim(path)) is not None:
            shutil.rmtree(taken, ignore_errors=True)


def _left_by_processes_gone(parent: Path) -> list[Path]:
    owned = re.compile(rf"{SCRATCH}-(\d+)-{HOST_TAG}-")
    return [path for path in (parent.iterdir() if parent.is_dir() else [])
            if (match := owned.match(path.name)) and not process_alive(int(match[1]))
            and path.is_dir() and not path.is_symlink()]  # a symlink is never followed, taken or removed


def _claim(path: Path) -> Path | None:
    """`path`, renamed to a new name of this process's beside it (None: another process renamed or removed it first,
    or it is not ours to rename: another user's, in a shared temp dir)."""
    try:
        return path.rename(path.with_name(prefix() + secrets.token_hex(4)))
    except OSError:
        return None


def process_alive(pid: int) -> bool:
    """Whether a process of this pid exists on this host (another user's too)."""
    try:
        os.kill(pid, 0)  # signal 0: sends nothing, only checks that the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    return True
