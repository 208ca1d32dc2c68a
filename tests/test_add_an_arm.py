"""An arm added in one file (docs/arms.md) runs through every entry point with no other edit.

The file is ``<dir>/ablations/arms/halfcap.py`` of a temporary folder put on ``PYTHONPATH`` (the package
path of ``ablations.arms`` is extended over every such folder): SC+TIS at cap 1.5 under a loss name of its
own, whose function lives in the same file. Through the launcher, as a user runs them: the embedded
default (2 steps, beside PG), the contract check, the report, the reference's verl dry run (whose verl
process registers the file's loss through the ``verl.plugins`` entry point) and the capacity plan.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = [sys.executable, str(ROOT / "runners" / "launch.py")]

ARM_FILE = '''"""A test-only arm: SC+TIS at cap 1.5, with its loss under a name of its own."""

from ablations.arms import Arm

HALFCAP = Arm(name="halfcap", loss_mode="ablation_test_halfcap", loss="ablations.arms.halfcap:policy_loss_halfcap",
              tis_cap=1.5, score_centering=True, summary="SC+TIS at cap 1.5 (a test's arm)")


def policy_loss_halfcap(*args, **kwargs):
    """SC+TIS's loss, registered under this arm's own name."""
    from ablations.losses import policy_loss_sc_tis

    return policy_loss_sc_tis(*args, **kwargs)
'''


@pytest.fixture(scope="module")
def arm_env(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("user_arms")
    (folder / "ablations" / "arms").mkdir(parents=True)
    (folder / "ablations" / "arms" / "halfcap.py").write_text(ARM_FILE)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run(args: list[str], env: dict[str, str], timeout: int = 600) -> subprocess.CompletedProcess:
    out = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, (args, out.stdout[-3000:], out.stderr[-3000:])
    return out


def test_an_arm_in_one_file_runs_through_every_entry_point(arm_env, tmp_path):
    results, cache = tmp_path / "r", tmp_path / "cache"
    small = [f"results_root={results}", f"backend.cache_dir={cache}", "trainer.total_steps=2",
             "trainer.prompts_per_step=8", "trainer.n=4", "backend.micro_batch_size=16", "trainer.test_freq=2",
             "trainer.save_freq=2", "eval.n=2", "sweep=plugin", "backend.threads=1"]
    run([*LAUNCH, "-m", "method=pg,halfcap", "seed=1", *small], arm_env)
    sweep = results / "plugin"
    config = (sweep / "halfcap-seed1" / "config.yaml").read_text()
    assert "loss_mode: ablation_test_halfcap" in config and "tis_cap: 1.5" in config

    run([sys.executable, "-m", "runners.run.contract_check", str(sweep / "halfcap-seed1")], arm_env)
    run([sys.executable, "-m", "analysis", str(sweep)], arm_env)
    comparison = (sweep / "report" / "comparison.md").read_text()
    assert "halfcap" in comparison and "pg" in comparison

    dry = run([*LAUNCH, "+experiment=qwen3_4b_sc_repro", "method=halfcap", "backend.dry_run=true",
               f"results_root={tmp_path / 'dry'}"], arm_env)
    launch_sh = next((tmp_path / "dry").rglob("launch.sh")).read_text()
    assert "actor_rollout_ref.actor.policy_loss.loss_mode=ablation_test_halfcap" in launch_sh
    assert "rollout_is_threshold=1.5" in launch_sh
    assert "passed" in (dry.stdout + dry.stderr)

    plan = run([sys.executable, "-m", "runners.capacity", "+experiment=qwen3_4b_sc_repro", "method=halfcap"], arm_env)
    pg = run([sys.executable, "-m", "runners.capacity", "+experiment=qwen3_4b_sc_repro", "method=pg"], arm_env)
    assert "halfcap" in plan.stdout
    assert plan.stdout != pg.stdout  # the head an SC arm carries is in its plan


def test_an_unknown_arm_names_the_declared_ones(arm_env, tmp_path):
    out = subprocess.run([*LAUNCH, "method=halfcup", f"results_root={tmp_path}"], cwd=ROOT, env=arm_env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "halfcap" in out.stderr and "pg" in out.stderr and "Traceback" not in out.stderr
    assert not any(tmp_path.iterdir())
