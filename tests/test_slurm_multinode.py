"""The multi-node SLURM path, run for real on one machine: a rehearsal arm through ``hydra/launcher=slurm_multinode``.

As tests/test_slurm_launcher.py, the launcher config is composed as a cluster launch composes it and only the
executor differs: submitit's local executor (``tests/slurm_local``). The job has two tasks (``tasks_per_node=2``
on this one machine, where a cluster gives one task to each of two nodes): each runs ``runners/launch.py``'s
Hydra job, task 0 starts the Ray head and the arm, task 1 reads the head's file in the job's folder and joins as
a Ray worker node (runners/verl_side/cluster/slurm_ray.py). The arm is the CPU rehearsal with the trainer on two nodes
(``backend.placement.nnodes=2``; the HF stand-in as its rollout, to keep it short). Asserted: the run finishes
and passes the run contract (task 0 launched only once all nodes had joined), the head's address file (it holds
the token) is gone, the done file written, and no process or temporary folder of either Ray node is left.

What has not run: sbatch, srun across hosts, a requeue by SLURM (the requeue's resume is the single-node
path's: tests/integration/test_rehearsal.py kills and resumes an arm), the head's address on a real network.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from runners.run.contract_check import check_run_dir
from runners.verl_side.cluster import slurm_ray

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_PATH = Path(__file__).resolve().parent / "slurm_local"
LAUNCHER = "hydra_plugins.slurm_on_local_executor.SlurmLauncherOnLocalExecutor"


def test_a_rehearsal_arm_runs_on_the_ray_cluster_of_a_two_task_job(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(PLUGIN_PATH), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("RAY_ADDRESS", None)
    args = ["-m", "+experiment=rehearsal", "method=pg", "seed=42", f"results_root={tmp_path}",
            "trainer.total_steps=2", "backend.placement.nnodes=2", "backend.rehearsal_rollout=standin",
            "hydra/launcher=slurm_multinode", f"hydra.launcher._target_={LAUNCHER}", "hydra.launcher.nodes=1",
            "hydra.launcher.tasks_per_node=2", "hydra.launcher.timeout_min=40"]
    out = subprocess.run([sys.executable, str(ROOT / "runners" / "launch.py"), *args], capture_output=True, text=True,
                         timeout=2400, cwd=ROOT, env=env)
    submitit = tmp_path / "rehearsal" / ".submitit"
    logs = "\n".join(p.read_text()[-3000:] for p in sorted(submitit.rglob("*_log.*")))
    assert out.returncode == 0, (out.stderr[-3000:], logs)
    run_dir = tmp_path / "rehearsal" / "pg-seed42"
    assert check_run_dir(run_dir) == []
    record = json.loads((run_dir / "metrics.json").read_text())
    assert record["run"]["status"] == "finished" and [r["step"] for r in record["train"]] == [1, 2]
    (job,) = [p for p in submitit.iterdir() if (p / f"{p.name}_0_log.out").exists()]  # the job's folder (%j)
    assert (job / slurm_ray.DONE_FILE.format(job=job.name)).exists(), sorted(p.name for p in job.iterdir())
    assert not list(job.glob("*_ray_head.json*")), "the head's address file (with its token) was left"
    left = slurm_ray.node_pids(Path(f"/tmp/sc-ray-{job.name}-"))
    assert not left, f"processes of the job's Ray nodes are left: {sorted(left)}"
    assert not list(Path("/tmp").glob(f"sc-ray-{job.name}-*")), "the nodes' temporary folder (sessions, sockets) was left"
