"""The rehearsal end to end: verl's whole V1 separate_async trainer on a CPU, through the launcher.

One sweep of the four arms (``python runners/launch.py -m +experiment=rehearsal method=pg,tis,sc,sc_tis``)
for 3 steps with a checkpoint, then the same command with ``trainer.total_steps=5``: each run continues
from its newest checkpoint as a second attempt. The SC arms run on the installed verl (0.9.1: the
project's head transport, runners/verl_head). Asserted are properties, not values (the async
schedule is not deterministic): the run contract, two finished attempts, the arm's registered loss
metrics at every step, staleness tags within ``rollout.max_staleness``, the sampler's weight
version following the trainer's after every sync (the CPU rollout's sync log), for the SC arms that
the sampler's head really arrived (its mass below 1 and varying, the correction not constant), and no
Ray process left behind. The same run passes through verl 0.9.1's trainer init on the reference experiment's
``actor_rollout_ref.hybrid_engine=False`` path, which died with ``TypeError`` before the launcher
set ``VERL_LOGGING_LEVEL`` (``revisions.LOGGER_FLUSH``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from analysis import contract
from runners import verl_cpu
from runners.verl_backend import layout, resume_point

REPO = Path(__file__).resolve().parents[2]
ARMS = ("pg", "tis", "sc", "sc_tis")
SC_ARMS = ("sc", "sc_tis")
MAX_STALENESS = 4  # conf/config.yaml rollout.max_staleness, which the rehearsal keeps


#: The results root of this module's launches: every process of theirs has it in its environment
#: (VERL_FILE_LOGGER_PATH, which Ray's processes inherit from the verl driver or its runtime_env).
RESULTS: list[Path] = []


RAY_WORDS = ("raylet", "gcs_server", "ray::", "verl.trainer.main_ppo")


def _environ(pid: int) -> bytes | None:
    """The process's environment; b"" when it is gone, None when it cannot be read."""
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except (FileNotFoundError, ProcessLookupError):  # gone since ps listed it
        return b""
    except OSError:  # not readable
        return None


def is_survivor(args: str, stat: str, uid: int, environ: bytes | None, roots: list[Path], own_uid: int) -> bool:
    """A live verl driver or Ray process of this module's launches: ours unless shown otherwise. Shown
    otherwise by a readable environment without any of ``roots``, or by another user (the launches run
    as ``own_uid``); an unreadable environment is no proof, so such a process counts."""
    if stat[:1] == "Z" or not any(w in args for w in RAY_WORDS):  # zombies are already dead
        return False
    if uid != own_uid:
        return False
    return environ is None or any(str(root).encode() in environ for root in roots)


def ray_processes() -> list[str]:
    """Live verl drivers and Ray processes of this module's launches (:func:`is_survivor`)."""
    out = subprocess.run(["ps", "-eo", "pid,uid,stat,args"], capture_output=True, text=True).stdout.splitlines()[1:]
    rows = (line.split(None, 3) for line in out)
    return [args for pid, uid, stat, args in rows
            if is_survivor(args, stat, int(uid), _environ(int(pid)), RESULTS, os.getuid())]


def test_a_process_is_a_survivor_unless_shown_otherwise(tmp_path):
    ours, elsewhere = tmp_path / "results", tmp_path / "other"
    env = f"PATH=/bin\0VERL_FILE_LOGGER_PATH={ours}/x/metrics.jsonl\0".encode()
    raylet = "/venv/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet --node_ip_address=127.0.0.1"
    assert is_survivor(raylet, "Sl", 1000, env, [ours], 1000)
    assert is_survivor("ray::WorkerDict.actor_rollout_init_model", "R", 1000, None, [ours], 1000)  # unreadable
    assert not is_survivor(raylet, "Sl", 1000, env, [elsewhere], 1000)  # another launch's
    assert not is_survivor(raylet, "Sl", 1000, b"", [ours], 1000)  # gone
    assert not is_survivor(raylet, "Z", 1000, None, [ours], 1000)  # a zombie
    assert not is_survivor(raylet, "Sl", 0, None, [ours], 1000)  # another user's
    assert not is_survivor("python -m pytest", "S", 1000, env, [ours], 1000)  # not verl or Ray


def launch(results: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [sys.executable, str(REPO / "runners" / "launch.py"), "-m", "+experiment=rehearsal",
           f"method={','.join(ARMS)}", "seed=42", f"results_root={results}", *extra]
    return subprocess.run(cmd, cwd=results.parent, env=env, capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("rehearsal")
    results = root / "results"
    RESULTS.append(results)
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


@pytest.mark.parametrize("arm", SC_ARMS)
def test_the_samplers_head_arrives_at_the_trainer(sweep, arm):
    """k = 8 of the tiny model's 38 tokens: the sampler's head mass is below 1 at every step and varies
    from step to step, as does the trainer's; SC's correction is computed from them (not a constant).
    (SC+TIS's correction is exactly 0 wherever no head ratio p/q exceeds the cap and rho >= 1/2, as it
    mostly is at this learning rate: docs/score_centering.md, property 5; so only its masses are checked.)"""
    rows = json.loads((sweep / f"{arm}-seed42" / "metrics.json").read_text())["train"]
    sampler = [r["actor/sc_sampler_head_mass"] for r in rows]
    trainer = [r["actor/sc_train_head_mass"] for r in rows]
    correction = [r["actor/sc_correction"] for r in rows]
    assert all(0.5 < q < 1 - 1e-6 for q in sampler + trainer), (sampler, trainer)
    assert len(set(sampler)) == len(sampler) and len(set(trainer)) == len(trainer), (sampler, trainer)
    assert all(c == c for c in correction)  # finite, not nan
    if arm == "sc":
        assert len(set(correction)) > 1, correction


def test_no_ray_process_survives(sweep):
    assert ray_processes() == []


def _syncs(run: Path, attempt: int) -> int:
    path = run / "verl" / f"attempt-{attempt:03d}" / "cpu" / verl_cpu.SYNC_LOG
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_kill_9_of_the_launcher_mid_run_then_the_same_command_resumes(sweep):
    """PG extended to 15 steps (room to be killed mid-run): a second launch on the busy folder stops at once; SIGKILL of the
    launcher as soon as step 8's checkpoint is written (verl validates and logs step 8 only after it: a kill
    there used to leave the run with step 8 in no log) leaves no Ray process; the same command then finishes
    the run, with the killed attempt recorded as killed and every step logged."""
    run = sweep / "pg-seed42"
    results = sweep.parent
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [sys.executable, str(REPO / "runners" / "launch.py"), "+experiment=rehearsal", "method=pg", "seed=42",
           f"results_root={results}", "trainer.total_steps=15"]
    first = subprocess.Popen(cmd, cwd=results.parent, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 900
    while _syncs(run, 3) < 1:  # attempt 3 is up: Ray, the workers and the rollout
        assert first.poll() is None and time.monotonic() < deadline, first.stderr.read().decode()[-3000:]
        time.sleep(1)
    busy = subprocess.run(cmd, cwd=results.parent, env=env, capture_output=True, text=True, timeout=300)
    assert busy.returncode == 3 and busy.stderr.startswith("run folder busy:"), busy.stderr[-2000:]
    while (layout.resume_step(layout.checkpoints_dir(run)) or 0) < 8:
        assert first.poll() is None and time.monotonic() < deadline, first.stderr.read().decode()[-3000:]
        time.sleep(0.05)
    first.kill()
    first.wait()
    deadline = time.monotonic() + 60
    while ray_processes() and time.monotonic() < deadline:
        time.sleep(1)
    assert ray_processes() == [], "verl or Ray processes outlived the killed launcher"

    again = subprocess.run(cmd, cwd=results.parent, env=env, capture_output=True, text=True, timeout=1800)
    assert again.returncode == 0, again.stderr[-6000:]
    record = json.loads((run / "metrics.json").read_text())
    attempts = record["run"]["attempts"]
    assert [a["status"] for a in attempts] == ["finished", "finished", "killed", "finished"], attempts
    assert record["run"]["status"] == "finished" and record["run"]["last_step"] == 15
    assert [r["step"] for r in record["train"]] == list(range(1, 16))
    assert contract.check_run_dir(run) == []
    assert ray_processes() == []
    superseded = layout.checkpoints_dir(run) / resume_point.SUPERSEDED / "global_step_8-before-attempt-004"
    if superseded.exists():  # killed between step 8's checkpoint and its log: resumed from step 6
        assert attempts[3]["start_step"] == 6 and attempts[2]["end_step"] == 7, attempts
    else:
        assert attempts[3]["start_step"] >= 8, attempts
