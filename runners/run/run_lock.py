"""One process at a time per run folder: an exclusive ``fcntl.flock`` on ``<sweep>/.<run>.lock``.

Contract:

- :func:`hold` takes the lock of ``run_dir`` without waiting, before anything of the run is
  written, and keeps it until the ``with`` block ends. A second holder (another process, on this
  or another host sharing the file system) gets :class:`RunFolderBusy` at once; its message names
  the holder: pid, host, start time and command, as the holder wrote them into the lock file.
- The lock is the kernel's, so it dies with its process: a killed run never leaves a stale lock.
  The file itself stays (deleting a lock file races with a process opening it); its content only
  describes the current holder.
- The lock file sits beside the run folder, not inside it, so it exists before the folder and a
  run folder removed while its run is alive is still protected.
- Re-entrant within a process: a ``hold`` of a folder this process already holds is a no-op, so
  the launcher can take the locks of a whole sweep up front and the backends (the verl launch)
  can take "the same lock" again for each attempt.
- :meth:`HeldLock.fileno` is the locked descriptor, for a child process that must keep the lock
  for as long as it lives (``subprocess.Popen(pass_fds=...)``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from runners.run.run_record import utc_now

#: This process's held locks: lock path -> (open descriptor, nesting depth).
_HELD: dict[Path, list[int]] = {}
#: Tries of a non-blocking lock, 50 ms apart, before the folder counts as busy (outlasts a probe).
_TRIES = 6


class RunLockError(RuntimeError):
    """The run folder's lock cannot be taken (e.g. a file system without ``flock``)."""


class RunFolderBusy(RunLockError):
    """The run folder is locked by another process; the message names the holder."""


def lock_path(run_dir: Path) -> Path:
    """The lock file of ``run_dir``: ``<parent>/.<name>.lock``."""
    run_dir = Path(run_dir).resolve()
    return run_dir.parent / f".{run_dir.name}.lock"


def _holder_text(path: Path) -> str:
    """The holder as written in the lock file, e.g. ``pid 12 on host h since <ISO> (python ...)``."""
    for _ in range(20):  # the holder writes its details right after locking
        try:
            raw = path.read_text()
        except OSError:
            raw = ""
        if raw.strip():
            break
        time.sleep(0.05)
    try:
        info = json.loads(raw)
    except ValueError:
        return "another process (it wrote no details into the lock file)"
    text = f"pid {info.get('pid')} on host {info.get('host')} since {info.get('started')}"
    if info.get("host") == socket.gethostname() and isinstance(info.get("pid"), int):
        try:
            os.kill(info["pid"], 0)
        except ProcessLookupError:
            text += " (that process has exited; a child it started, e.g. verl, still holds the lock)"
        except PermissionError:
            pass
    if info.get("command"):
        text += f", command: {info['command']}"
    return text


def _busy(run_dir: Path, path: Path) -> RunFolderBusy:
    return RunFolderBusy(
        f"run folder {run_dir} is in use by {_holder_text(path)}; lock file {path}. Wait for that run to "
        "end or stop it, then run the command again; nothing was changed."
    )


def holder(run_dir: Path) -> str | None:
    """Who holds ``run_dir``'s lock (another process), or None when nobody does. Writes nothing."""
    path = lock_path(run_dir)
    if path in _HELD or not path.exists():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # shared: probes never block each other
    except BlockingIOError:
        return _holder_text(path)
    finally:
        os.close(fd)  # closing releases a probe's lock
    return None


def check_free(run_dir: Path) -> None:
    """Raise :class:`RunFolderBusy` when another process holds ``run_dir``. Writes nothing."""
    if holder(run_dir) is not None:
        raise _busy(Path(run_dir), lock_path(run_dir))


class HeldLock:
    """A lock held by this process (see :func:`hold`)."""

    def __init__(self, path: Path):
        self.path = path

    def fileno(self) -> int:
        return _HELD[self.path][0]


@contextlib.contextmanager
def hold(run_dir: Path) -> Iterator[HeldLock]:
    """Hold ``run_dir``'s lock for the ``with`` block; :class:`RunFolderBusy` if another process has it."""
    run_dir = Path(run_dir).resolve()
    path = lock_path(run_dir)
    if path in _HELD:
        _HELD[path][1] += 1
        try:
            yield HeldLock(path)
        finally:
            _HELD[path][1] -= 1
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    for attempt in range(_TRIES):  # a probe (:func:`holder`) holds the lock for microseconds
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError as err:
            if err.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES) and attempt < _TRIES - 1:
                time.sleep(0.05)
                continue
            os.close(fd)
            if err.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
                raise _busy(run_dir, path) from None
            raise RunLockError(
                f"cannot lock {path}: {err.strerror}; results_root must be on a file system that supports flock"
            ) from err
    info = {"pid": os.getpid(), "host": socket.gethostname(), "started": utc_now(),
            "command": " ".join(sys.argv)}
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
    _HELD[path] = [fd, 1]
    try:
        yield HeldLock(path)
    finally:
        del _HELD[path]
        try:
            os.ftruncate(fd, 0)  # no stale details once released
        finally:
            os.close(fd)  # releases the lock
