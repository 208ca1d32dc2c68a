"""Configs that used to pass silently, driven through the launcher (``runners/launch.py``) as a user types them.

* an impossible ``results_root`` (``/proc/nope``: root passes the permission check there) is a config
  error: exit status 2, one line, nothing written;
* ``backend.threads`` above the machine's cores is warned about on the console and in ``run.log``,
  naming the key (a warning, not an error: ``runners.embedded.parallel.threads_warning`` says why).

(``method.top_k`` above the vocabulary is a row of ``tests/test_config_schema.py``'s table.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf

from runners.embedded.parallel import threads_warning, usable_cores

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = [sys.executable, str(ROOT / "runners" / "launch.py")]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def launch(args: list[str], timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*LAUNCH, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=ENV)


def test_impossible_results_root_is_a_one_line_config_error():
    out = launch(["results_root=/proc/nope"], timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.splitlines() == [out.stderr.strip()], out.stderr  # one line
    assert out.stderr.startswith("config error: results_root: cannot create the run folder /proc/nope/")
    assert "no folder can be made in /proc" in out.stderr
    assert not Path("/proc/nope").exists()


def test_threads_above_the_cores_are_warned_about_on_the_console_and_in_run_log(tmp_path):
    threads = usable_cores() + 1
    out = launch([f"results_root={tmp_path}", "trainer.total_steps=1", "trainer.prompts_per_step=4", "trainer.n=2",
                  "backend.micro_batch_size=8", "eval.n=1", f"backend.threads={threads}"])
    assert out.returncode == 0, out.stderr[-3000:]
    wanted = f"backend.threads={threads} is more than the {usable_cores()} cores"
    assert wanted in out.stdout + out.stderr
    assert wanted in (tmp_path / "embedded_default" / "pg-seed42" / "run.log").read_text()


def test_threads_warning_only_above_the_cores():
    def cfg(threads: int):
        return OmegaConf.create({"backend": {"threads": threads}})

    assert threads_warning(cfg(2), cores=2) is None
    assert threads_warning(cfg(3), cores=2).startswith("backend.threads=3 is more than the 2 cores")
