"""The SLURM path, run for real on one machine: the embedded default through ``hydra/launcher=slurm_8gpu``.

The launch composes ``conf/hydra/launcher/slurm_8gpu.yaml`` (hydra-submitit-launcher, in the test
extra) as a cluster launch does; only the executor differs: submitit's local executor
(``tests/slurm_local/hydra_plugins/slurm_on_local_executor.py``), one real subprocess per job, so each job runs
``runners/launch.py``'s Hydra main in its own process, locks its own run folder and writes it. A tiny
two-arm, two-step run; the run folders must pass the run contract. hydra-submitit-launcher is in the
test extra, so a missing install fails here instead of skipping.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from runners.run.contract_check import check_run_dir

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_PATH = Path(__file__).resolve().parent / "slurm_local"  # holds hydra_plugins/slurm_on_local_executor.py


LAUNCHER = "hydra_plugins.slurm_on_local_executor.SlurmLauncherOnLocalExecutor"


def test_embedded_default_runs_through_the_slurm_launcher_config(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(PLUGIN_PATH), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    args = ["-m", "method=pg,sc", "seed=7", f"results_root={tmp_path}", "trainer.total_steps=2",
            "trainer.prompts_per_step=4", "trainer.n=2", "backend.micro_batch_size=8", "eval.n=1",
            "trainer.test_freq=2", "trainer.save_freq=2", "backend.threads=1",
            "hydra/launcher=slurm_8gpu", f"hydra.launcher._target_={LAUNCHER}",
            "hydra.launcher.timeout_min=10"]
    out = subprocess.run([sys.executable, str(ROOT / "runners" / "launch.py"), *args], capture_output=True,
                         text=True, timeout=300, cwd=ROOT, env=env)
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-3000:])
    sweep = tmp_path / "embedded_default"
    assert "Submitit 'local' sweep output dir" in out.stdout + out.stderr
    submitit = sweep / ".submitit"
    job_logs = sorted(submitit.glob("*/*_log.out"))
    assert len(job_logs) == 2, sorted(p.name for p in submitit.rglob("*"))  # one job (process) per arm
    for method in ("pg", "sc"):
        run_dir = sweep / f"{method}-seed7"
        assert check_run_dir(run_dir) == [], method
        record = json.loads((run_dir / "metrics.json").read_text())
        assert record["run"]["status"] == "finished" and [r["step"] for r in record["train"]] == [1, 2]
        assert (run_dir / ".hydra" / "config.yaml").is_file()
        assert f"run {method}-seed7 (embedded backend)" in (run_dir / "run.log").read_text()
