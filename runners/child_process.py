"""Child processes: output to a log file (with a progress bar while following it); stopping a process group."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
from pathlib import Path


def run_logged(cmd: list[str], log_path: Path) -> int:
    """Run ``cmd`` to completion with its stdout and stderr in ``log_path``; return its exit status."""
    with log_path.open("w") as log:
        return subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False).returncode


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
