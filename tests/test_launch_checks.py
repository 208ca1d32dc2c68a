"""Checks a GPU would otherwise make, and finite ranges, before anything is written (issue 35, items 3-4).

Before the fix: ``gpu.memory_bytes=inf`` passed the schema and raised OverflowError in the dry run's
capacity plan after the previous dry run had been moved to ``.abandoned/``; ``trainer.lr=inf`` failed
inside torch; a 5-head model at tensor parallel 2 "fit"; ``max_logprobs`` below ``method.top_k`` through
``backend.extra_overrides`` was a traceback of the dry run (rc 1).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from runners.config import config_checks
from runners.config.config_error import ConfigError
from runners.verl_side.backend import checks
from runners.verl_side.backend.verl_run import VerlRun

REPO = Path(__file__).resolve().parents[1]
LAUNCH = [sys.executable, str(REPO / "runners" / "launch.py")]
EXPERIMENT = "+experiment=qwen3_4b_sc_repro"


def verl_cfg(tmp_path: Path, *extra: str, method: str = "sc"):
    overrides = [EXPERIMENT, f"method={method}", f"results_root={tmp_path / 'results'}", "backend.dry_run=true", *extra]
    with initialize_config_dir(config_dir=str(config_checks.CONF_DIR), version_base=None):
        cfg = compose("config", overrides=overrides)
    OmegaConf.resolve(cfg)
    return cfg


def model_folder(tmp_path: Path, heads: int, kv_heads: int) -> Path:
    folder = tmp_path / f"model_{heads}_{kv_heads}"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "vocab_size": 1000, "hidden_size": heads * 64, "intermediate_size": 1024, "num_hidden_layers": 2,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": 64, "tie_word_embeddings": True}))
    return folder


@pytest.mark.parametrize("overrides,message", [
    (["trainer.lr=inf"], "trainer.lr=inf: must be a finite number > 0"),
    (["trainer.lr=nan"], "trainer.lr=nan: must be a finite number > 0"),
    (["eval.temperature=inf"], "eval.temperature=inf"),
    (["backend.sampler.weight_noise=inf"], "backend.sampler.weight_noise=inf"),
    (["+model.rms_norm_eps=nan"], "model.rms_norm_eps=nan: must be a finite number"),  # a key without a schema
])
def test_the_schema_refuses_inf_and_nan_naming_the_key(overrides, message):
    with initialize_config_dir(config_dir=str(config_checks.CONF_DIR), version_base=None):
        cfg = compose("config", overrides=overrides)
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("+", r"\+")):
        config_checks.check_schema(cfg)


def test_an_infinite_gpu_memory_is_a_config_error_and_the_earlier_dry_run_stays(tmp_path):
    results = tmp_path / "results"
    run_dir = results / "qwen3_4b_sc_repro" / "pg-seed42"
    (run_dir / "verl" / "dry_run").mkdir(parents=True)
    (run_dir / "config.yaml").write_text("an: earlier dry run\n")
    (run_dir / "verl" / "dry_run" / "report.json").write_text("{}\n")
    before = sorted(p.relative_to(run_dir) for p in run_dir.rglob("*"))
    proc = subprocess.run([*LAUNCH, EXPERIMENT, "method=pg", "backend.dry_run=true", f"results_root={results}",
                           "gpu.memory_bytes=inf"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == "config error: gpu.memory_bytes=inf: must be a finite number > 0"
    assert sorted(p.relative_to(run_dir) for p in run_dir.rglob("*")) == before  # nothing moved to .abandoned/


def test_a_capacity_plan_that_cannot_be_computed_is_a_config_error(tmp_path, monkeypatch):
    from runners.capacity import plan as capacity

    def overflow(cfg):
        raise OverflowError("cannot convert float infinity to integer")

    monkeypatch.setattr(capacity, "plan", overflow)
    with pytest.raises(ConfigError, match="the capacity plan cannot be computed from this config"):
        capacity.check_fits(verl_cfg(tmp_path, method="pg"))


def test_a_model_of_unknown_shape_is_refused_unless_the_plan_is_not_enforced(tmp_path, monkeypatch):
    """Before verl downloads a hub model there is no config.json to plan from: refused, naming the way out
    (backend.capacity.enforce=false), and launched with a warning when that is set."""
    from runners.capacity import plan as capacity

    shape_unknown = ("model.path=example-org/not-downloaded", "backend.dry_run=false")
    with pytest.raises(ConfigError, match="backend.capacity.enforce=false"):
        capacity.check_fits(verl_cfg(tmp_path, *shape_unknown, method="pg"))
    capacity.check_fits(verl_cfg(tmp_path, *shape_unknown, "backend.capacity.enforce=false", method="pg"))


@pytest.mark.parametrize("heads,kv,tp,gpus,ok", [
    (5, 5, 2, 4, False),     # the probe: 5 heads at TP 2
    (32, 8, 2, 4, True),     # Qwen3-4B at the reference TP 2
    (32, 8, 16, 16, True),   # KV heads replicated: 16 % 8 == 0
    (32, 6, 4, 4, False),    # 6 KV heads: neither 6 % 4 nor 4 % 6
    (12, 4, 3, 3, False),    # 12 heads split by 3, 4 KV heads cannot be
])
def test_tensor_parallel_must_split_the_heads_and_kv_heads(tmp_path, heads, kv, tp, gpus, ok):
    cfg = verl_cfg(tmp_path, f"model.path={model_folder(tmp_path, heads, kv)}",
                   f"backend.placement.rollout_gpus_per_node={gpus}", f"backend.placement.rollout_tensor_parallel={tp}",
                   method="pg")
    if ok:
        checks.check_model_parallelism(cfg, checks.extra_overrides(VerlRun.of(cfg)))
    else:
        with pytest.raises(ConfigError, match=rf"backend\.placement\.rollout_tensor_parallel={tp} is not allowed"):
            checks.check_model_parallelism(cfg, checks.extra_overrides(VerlRun.of(cfg)))


def test_sequence_parallel_and_micro_batches_agree_with_the_model_and_the_batch(tmp_path):
    sp = "actor_rollout_ref.actor.ulysses_sequence_parallel_size"
    micro = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"
    folder = model_folder(tmp_path, 6, 2)

    def check(*extra: str) -> None:
        cfg = verl_cfg(tmp_path, f"model.path={folder}", *extra, method="pg")
        checks.check_model_parallelism(cfg, checks.extra_overrides(VerlRun.of(cfg)))

    check(f"backend.extra_overrides=['+{sp}=2']")  # 6 heads and 2 KV heads split by 2; 4 trainer GPUs
    with pytest.raises(ConfigError, match=r"backend\.extra_overrides=.*ulysses_sequence_parallel_size=4.*6 attention"):
        check(f"backend.extra_overrides=['+{sp}=4']")
    with pytest.raises(ConfigError, match="a divisor of the trainer GPUs"):
        check(f"backend.extra_overrides=['+{sp}=3']")
    with pytest.raises(ConfigError, match=r"backend\.actor\.use_dynamic_bsz=False is not allowed: only with"):
        check("backend.actor.use_dynamic_bsz=false")
    check("backend.actor.use_dynamic_bsz=false", f"backend.extra_overrides=['+{micro}=4']")  # 160 / 4 = 40 per rank
    with pytest.raises(ConfigError, match="split evenly into micro-batches of 7"):
        check("backend.actor.use_dynamic_bsz=false", f"backend.extra_overrides=['+{micro}=7']")


def test_max_logprobs_below_top_k_through_extra_overrides_is_a_config_error(tmp_path):

    cfg = verl_cfg(tmp_path, "method.top_k=129",
                   "backend.extra_overrides=['actor_rollout_ref.rollout.engine_kwargs.vllm.max_logprobs=128']")
    if not VerlRun.of(cfg).project_carries_head:
        pytest.fail("verl 0.9.1 carries the SC head on the project's transport")
    with pytest.raises(ConfigError, match=r"^backend\.extra_overrides=.*max_logprobs=128.*method\.top_k \(129\)"):
        checks.extra_overrides(VerlRun.of(cfg))
    with pytest.raises(ConfigError, match=r"backend\.extra_overrides\[0\]"):
        checks.extra_overrides(VerlRun.of(verl_cfg(tmp_path, "backend.extra_overrides=['no equals sign']")))
