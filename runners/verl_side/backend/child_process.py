"""Child processes: following one's output into a log file with a progress bar; stopping a process group."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path


class OutputFollower(threading.Thread):
    """Appends every line of ``stream`` to ``log_path`` and moves a progress bar of ``total_steps``
    to the largest step ``step_re`` (group 1) finds in a line; ``last_step`` is that step."""

    def __init__(self, stream, log_path: Path, total_steps: int, desc: str, step_re: re.Pattern[str]):
        super().__init__(daemon=True)
        self.stream, self.log_path, self.step_re = stream, log_path, step_re
        self.total_steps, self.desc = total_steps, desc
        self.last_step = 0

    def run(self) -> None:
        from tqdm import tqdm

        with (open(self.log_path, "a", buffering=1) as out,
              tqdm(total=self.total_steps, desc=self.desc, unit="step", dynamic_ncols=True) as bar):
            for line in iter(self.stream.readline, ""):
                out.write(line)
                match = self.step_re.search(line)
                if match:
                    step = int(match.group(1))
                    if step > bar.n:
                        bar.update(min(step, self.total_steps) - bar.n)
                    self.last_step = max(self.last_step, step)


def stop_group(proc: subprocess.Popen, grace_s: float = 60.0) -> None:
    """SIGTERM the process group of ``proc`` (started with ``start_new_session``), then SIGKILL
    what is left after ``grace_s``."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


class GroupReaper:
    """Stops a child's process group if this process dies without doing it (SIGKILL included).

    A watchdog process (``python -m runners.verl_side.backend.child_process reap PGID``, in a session of its own)
    blocks on a pipe whose only write end this process holds; the kernel closes that end when this
    process dies, however it dies, and the watchdog then SIGTERMs the group, and SIGKILLs what is left
    after ``grace_s``. :meth:`close` (the child ended, or :func:`stop_group` ran) releases it: the
    watchdog then only stops what the group left behind (verl's Ray agents outlive a killed driver).
    Once the group is gone it removes the ``leftovers`` (folders the group's processes wrote outside the
    run folder, e.g. vLLM's socket files) and unlinks the files under each of ``segment_prefixes`` that appeared
    since it started and no live process maps (shared-memory segments of a group killed mid-use,
    :func:`runners.verl_side.platform.rehearsal.vllm_cpu.segments.unlink_orphans`).
    """

    def __init__(self, pgid: int, grace_s: float = 10.0, leftovers: tuple[Path, ...] = (),
                 segment_prefixes: tuple[str, ...] = ()):
        read_end, self._write_end = os.pipe()
        try:
            self.watchdog = subprocess.Popen([sys.executable, "-m", "runners.verl_side.backend.child_process", "reap", str(pgid),
                                              str(grace_s), f"{time.time():.3f}", *map(str, leftovers),
                                              *(f"{p}{_PREFIX_MARK}" for p in segment_prefixes)],
                                             stdin=read_end, start_new_session=True,
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        finally:
            os.close(read_end)

    def close(self) -> None:
        if self._write_end is not None:
            os.close(self._write_end)
            self._write_end = None


_PREFIX_MARK = "*"  # on the watchdog's command line, a leftover ending in it is a prefix of segments


def _reap(pgid: int, grace_s: float, since: float, leftovers: list[str]) -> None:
    """The watchdog: wait for end of file on stdin, stop process group ``pgid``, remove ``leftovers`` (a folder,
    or ``PREFIX*``: the unmapped segments under PREFIX made since ``since``)."""
    import shutil

    from runners.verl_side.platform.rehearsal.vllm_cpu.segments import unlink_orphans

    while sys.stdin.buffer.read(1 << 16):
        pass
    _stop(pgid, grace_s)
    for leftover in leftovers:
        if leftover.endswith(_PREFIX_MARK):
            unlink_orphans(leftover.removesuffix(_PREFIX_MARK), since)
        else:
            shutil.rmtree(leftover, ignore_errors=True)


def _stop(pgid: int, grace_s: float) -> None:
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        time.sleep(0.2)
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


if __name__ == "__main__":
    if sys.argv[1:2] == ["reap"]:
        _reap(int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5:])
