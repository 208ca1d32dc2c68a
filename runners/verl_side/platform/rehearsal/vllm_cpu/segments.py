"""Shared-memory segments on a CPU: vLLM's, found through the processes that map them and unlinked once
mapped; verl's weight-sync segments a killed process group left, unlinked once no live process maps them."""

from __future__ import annotations

import os
from collections.abc import Iterable

SHM_PREFIX = "/dev/shm/psm_"


def mapped_files(pids: Iterable[int], prefix: str) -> set[str]:
    """The files under ``prefix`` (not unlinked) that the processes ``pids`` map, of those /proc lets this
    process read (a process gone or another user's is passed over)."""
    paths: set[str] = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as maps:
                for line in maps:
                    fields = line.split(maxsplit=5)
                    if len(fields) == 6 and fields[5].startswith(prefix) and "(deleted)" not in fields[5]:
                        paths.add(fields[5].strip())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return paths


def mapped_segments(pid: int) -> set[str]:
    """The POSIX shared-memory segments (``/dev/shm/psm_*``, Python's ``SharedMemory``) that process ``pid``
    and its descendants have mapped."""
    import psutil

    root = psutil.Process(pid)
    return mapped_files((p.pid for p in (root, *root.children(recursive=True))), SHM_PREFIX)


def unlink_engine_segments(pid: int) -> list[str]:
    """Unlink the shared-memory segments vLLM's processes under ``pid`` have mapped, once the engine is up.

    vLLM's engine core and workers talk through ``SharedMemory`` message queues (168 MB and 252 MB on the
    rehearsal's engine) that only a graceful shutdown unlinks; Ray ends the server actor without one, so
    every run left them in ``/dev/shm``. Once every process has mapped them, their names are not needed:
    unlinked, the memory stays valid for the mappings and is freed when the last process exits, however
    it ends (vLLM's own unlink at a graceful shutdown then finds nothing, which it ignores).
    """
    return _unlink(mapped_segments(pid))


def unlink_orphans(prefix: str, since: float) -> list[str]:
    """Unlink the files under ``prefix`` made at or after ``since`` (a ``time.time()``) that no live process maps:
    what a killed process group left in /dev/shm. Another run's segment in use is mapped, so it is kept."""
    import glob

    made_since = set()
    for path in glob.glob(f"{glob.escape(prefix)}*"):
        try:
            if os.stat(path).st_mtime >= since:
                made_since.add(path)
        except FileNotFoundError:
            continue
    return _unlink(made_since - mapped_files(live_pids(), prefix)) if made_since else []


def live_pids() -> list[int]:
    """Every process id /proc lists now."""
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _unlink(paths: Iterable[str]) -> list[str]:
    """Unlink ``paths`` (sorted), passing over those already gone; the ones this call removed."""
    removed = []
    for path in sorted(paths):
        try:
            os.unlink(path)
            removed.append(path)
        except FileNotFoundError:
            pass
    return removed
