"""The rehearsal end to end: verl's whole V1 separate_async trainer on a CPU, through the launcher.

One sweep of PG and TIS (``python runners/launch.py -m +experiment=rehearsal method=pg,tis``) for 3
steps with a checkpoint, then the same command with ``trainer.total_steps=5``: each run continues
from its newest checkpoint as a second attempt. Asserted are properties, not values (the async
schedule is not deterministic): the run contract, two finished attempts, the arm's registered loss
metrics at every step, staleness tags within ``rollout.max_staleness``, the sampler's weight
version following the trainer's after every sync (the CPU rollout's sync log), and no Ray process
left behind. The same run passes through verl 0.9.1's trainer init on the reference experiment's
``actor_rollout_ref.hybrid_engine=False`` path, which died with ``TypeError`` before the launcher
set ``VERL_LOGGING_LEVEL`` (``revisions.LOGGER_FLUSH``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analysis import contract
from runners import verl_cpu

REPO = Path(__file__).resolve().parents[2]
ARMS = ("pg", "tis")
MAX_STALENESS = 4  # conf/config.yaml rollout.max_staleness, which the rehearsal keeps


def ray_processes() -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout.splitlines()
    return [line for line in out if any(w in line for w in ("raylet", "gcs_server", "ray::"))]


def launch(results: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [sys.executable, str(REPO / "runners" / "launch.py"), "-m", "+experiment=rehearsal",
           f"method={','.join(ARMS)}", "seed=42", f"results_root={results}", *extra]
    return subprocess.run(cmd, cwd=results.parent, env=env, capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    if ray_processes():
        pytest.skip("a Ray cluster is already running on this machine; the test counts Ray processes")
    root = tmp_path_factory.mktemp("rehearsal")
    results = root / "results"
    for steps in (3, 5):
        proc = launch(results, f"trainer.total_steps={steps}")
        assert proc.returncode == 0, f"rehearsal to step {steps} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return results / "rehearsal"


@pytest.mark.parametrize("arm", ARMS)
def test_run_contract_and_two_attempts(sweep, arm):
    run = sweep / f"{arm}-seed42"
    problems = contract.check_run_dir(run)
    assert not problems, problems
    record = json.loads((run / "metrics.json").read_text())
    attempts = record["run"]["attempts"]
    assert [(a["start_step"], a["end_step"], a["status"]) for a in attempts] == [(0, 3, "finished"), (3, 5, "finished")]
    assert record["run"]["status"] == "finished"
    assert [r["step"] for r in record["val"]] == [0, 3, 4, 5]  # before training, every 4 steps, at each end


@pytest.mark.parametrize("arm", ARMS)
def test_every_step_has_the_arms_loss_metrics_and_staleness_tags(sweep, arm):
    run = sweep / f"{arm}-seed42"
    rows = json.loads((run / "metrics.json").read_text())["train"]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    required = contract.required_train_metrics(contract.run_traits(run))
    if arm == "tis":
        assert "actor/tis_clip_fraction" in required
    for row in rows:
        assert not [m for m in required if m not in row], f"step {row['step']} lacks {required}"
        low = row["training/off_policy/trajectory_staleness/min"]
        high = row["training/off_policy/trajectory_staleness/max"]
        assert 0 <= low <= high <= MAX_STALENESS, (row["step"], low, high)


@pytest.mark.parametrize("arm", ARMS)
def test_sampler_weight_version_follows_the_trainer(sweep, arm):
    """Each attempt syncs the trainer's weights to the sampler at start and after every step: the
    sampler's version runs start, start+1, ..., end, and the weights change at every sync; the
    second attempt starts from the weights the first one synced last (its checkpoint)."""
    run = sweep / f"{arm}-seed42"
    logs = []
    for attempt, (start, end) in ((1, (0, 3)), (2, (3, 5))):
        path = run / "verl" / f"attempt-{attempt:03d}" / "cpu" / verl_cpu.SYNC_LOG
        syncs = [json.loads(line) for line in path.read_text().splitlines()]
        assert [s["global_steps"] for s in syncs] == list(range(start, end + 1)), syncs
        digests = [s["weights"] for s in syncs]
        assert len(set(digests)) == len(digests), f"weights did not change at some sync: {digests}"
        logs.append(syncs)
    assert logs[1][0]["weights"] == logs[0][-1]["weights"]
    assert not list((run / "verl" / "attempt-001" / "cpu").glob("weights-*")), "weight files left behind"


def test_no_ray_process_survives(sweep):
    assert ray_processes() == []
