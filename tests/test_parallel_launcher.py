"""`hydra/launcher=parallel`: Hydra's joblib launcher, jobs side by side, never oversubscribing the cores.

* the launcher config composes to Hydra's joblib launcher with 2 jobs;
* a job of that launcher with n_jobs x backend.threads above the cores is refused, naming the key
  (and outside a Hydra job the check is inert);
* a 2-job parallel sweep at backend.threads=1 gives the same run folders, number for number, as
  the same jobs run serially at 1 thread (parallelism changes nothing but the wall time).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from runners.config import config_checks
from runners.embedded.parallel import check_parallel_threads, joblib_n_jobs

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = [sys.executable, str(ROOT / "runners" / "launch.py")]
TINY = ["trainer.prompts_per_step=8", "trainer.n=4", "backend.micro_batch_size=16", "trainer.test_freq=2",
        "trainer.save_freq=2", "eval.n=2", "trainer.total_steps=3", "backend.sampler.run_ahead_batches=2"]


def composed(overrides: list[str], hydra: bool = False):
    with initialize_config_dir(config_dir=str(config_checks.CONF_DIR), version_base=None):
        return compose(config_name="config", overrides=overrides, return_hydra_config=hydra)


def test_parallel_launcher_config_is_hydras_joblib_launcher():
    cfg = composed(["hydra/launcher=parallel"], hydra=True)
    assert cfg.hydra.launcher._target_ == "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
    assert cfg.hydra.launcher.n_jobs == 2
    default = composed([], hydra=True)
    assert default.hydra.launcher._target_.endswith("BasicLauncher")  # serial stays the default


def test_oversubscribing_threads_are_refused_naming_the_key():
    cfg = composed([])
    assert cfg.backend.threads == 2
    with pytest.raises(ValueError, match=r"backend\.threads=2 x hydra\.launcher\.n_jobs=2 .* 2 cores.*backend\.threads=1"):
        check_parallel_threads(cfg, cores=2, n_jobs=2)
    check_parallel_threads(composed(["backend.threads=1"]), cores=2, n_jobs=2)
    check_parallel_threads(cfg, cores=4, n_jobs=2)
    assert joblib_n_jobs() is None  # not inside a Hydra job: nothing to check
    check_parallel_threads(cfg)


def read_train(run_dir: Path) -> list[dict]:
    rows = json.loads((run_dir / "metrics.json").read_text())["train"]
    return [{k: v for k, v in r.items() if not k.startswith("timing_s/")} for r in rows]


def test_parallel_sweep_equals_the_serial_one_at_the_same_thread_count(tmp_path):
    common = ["-m", "method=pg,sc_tis", "seed=5", "backend.threads=1", f"backend.cache_dir={tmp_path / 'cache'}",
              *TINY]
    refused = subprocess.run([*LAUNCH, "-m", "method=pg,tis", "hydra/launcher=parallel", f"results_root={tmp_path}",
                              "sweep=refused", *TINY], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert refused.returncode != 0 and "oversubscribes" in refused.stderr, refused.stderr[-2000:]
    for sweep, launcher in (("serial", []), ("parallel", ["hydra/launcher=parallel"])):
        out = subprocess.run([*LAUNCH, *common, *launcher, f"results_root={tmp_path}", f"sweep={sweep}"],
                             capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert out.returncode == 0, out.stderr[-3000:]
    for run in ("pg-seed5", "sc_tis-seed5"):
        serial, parallel = tmp_path / "serial" / run, tmp_path / "parallel" / run
        assert len(read_train(serial)) == 3
        assert "seed 5: a single seed" in (serial / "run.log").read_text()  # the run says it is one seed
        assert read_train(parallel) == read_train(serial), run
        assert (parallel / "val" / "step_000000.jsonl").read_bytes() == (serial / "val" / "step_000000.jsonl").read_bytes()
