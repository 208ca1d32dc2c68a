"""The config schema (runners/config/schema.py) and the one validation module (runners/validate.py).

Every bad config is composed through Hydra from the overrides a user would type, by the launcher's
prevalidation (``runners.launch.prevalidate``), and must be rejected there, before any compute (nothing
is written under ``results_root``), with a message naming the key and the allowed values.
"""

from __future__ import annotations

import re

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from runners import launch
from runners.config import config_checks, config_error, schema

EXPERIMENT = "+experiment=qwen3_4b_sc_repro"

# (overrides, what the message must contain: the key and the allowed values, as regexes)
BAD_CONFIGS = [
    # types, checked by composition against the schema
    (["trainer.n=abc"], [r"trainer\.n='abc'", r"must be an integer"]),
    (["trainer.lr=fast"], [r"trainer\.lr='fast'", r"must be a number"]),
    (["backend.sampler.int8_weights=maybe"], [r"backend\.sampler\.int8_weights='maybe'", r"true or false"]),
    # ranges and allowed values (schema field metadata)
    (["trainer.n=1"], [r"trainer\.n=1", r"an integer >= 2"]),
    (["trainer.total_steps=0"], [r"trainer\.total_steps=0", r"an integer >= 1"]),
    (["trainer.lr=0"], [r"trainer\.lr=0\.0", r"a number > 0"]),
    (["trainer.weight_decay=-0.1"], [r"trainer\.weight_decay=-0\.1", r">= 0"]),
    (["trainer.loss_agg_mode=seq-mean-token-sum"], [r"trainer\.loss_agg_mode='seq-mean-token-sum'",
                                                    r"allowed: token-mean"]),
    (["trainer.resume=maybe"], [r"trainer\.resume='maybe'", r"allowed: auto, disable"]),
    (["seed=-1"], [r"seed=-1", r"an integer >= 0"]),
    (["rollout.top_p=1.5"], [r"rollout\.top_p=1\.5", r"a number > 0 and <= 1"]),
    (["rollout.top_k=0"], [r"rollout\.top_k=0", r"an integer >= 1 or -1"]),
    (["rollout.temperature=-1"], [r"rollout\.temperature=-1\.0", r"a number > 0"]),
    (["rollout.max_staleness=0"], [r"rollout\.max_staleness=0", r"an integer >= 1"]),
    (["eval.n=0"], [r"eval\.n=0", r"an integer >= 1"]),
    (["eval.repeats=0"], [r"eval\.repeats=0", r"an integer >= 1"]),
    (["eval.numerics=fp8"], [r"eval\.numerics='fp8'", r"allowed: clean, scenario$"]),
    (["scenario=refresh8", "rollout.max_staleness=3"], [r"rollout\.max_staleness=3",
                                                        r"allowed: rollout\.max_staleness >= 7"]),
    (["method.top_k=0"], [r"method\.top_k=0", r"an integer >= 1"]),
    (["method=sc", "method.top_k=100"], [r"method\.top_k=100 is larger than the vocabulary of model=tiny_qwen3",
                                         r"allowed: 1 <= method\.top_k <= 38"]),
    (["method=tis", "method.tis_cap=-1"], [r"method\.tis_cap=-1\.0", r"a number > 0 or null"]),
    (["backend.device=tpu"], [r"backend\.device='tpu'", r"allowed: cpu, cuda"]),
    (["backend.threads=0"], [r"backend\.threads=0", r"an integer >= 1"]),
    (["backend.micro_batch_size=0"], [r"backend\.micro_batch_size=0", r"an integer >= 1"]),
    (["backend.sampler.weight_dtype=int4"], [r"backend\.sampler\.weight_dtype='int4'",
                                             r"allowed: float32, bfloat16, float16, float8_e4m3fn"]),
    (["backend.sampler.compute_dtype=float64"], [r"backend\.sampler\.compute_dtype='float64'",
                                                 r"allowed: float32, bfloat16, float16$"]),
    (["backend.sampler.logits_dtype=int8"], [r"backend\.sampler\.logits_dtype='int8'",
                                             r"allowed: float32, bfloat16, float16$"]),
    (["backend.sampler.kv_cache_bits=1"], [r"backend\.sampler\.kv_cache_bits=1", r"allowed: 0, 2, 3, 4, 5, 6, 7, 8$"]),
    (["backend.sampler.key_cache_bits=9"], [r"backend\.sampler\.key_cache_bits=9",
                                            r"allowed: 0, 2, 3, 4, 5, 6, 7, 8 or null$"]),
    (["backend.sampler.speed=0.5"], [r"backend\.sampler\.speed=0\.5", r">= 1"]),
    (["backend.sampler.speed_jitter=11"], [r"backend\.sampler\.speed_jitter=11\.0", r">= 0 and <= 10"]),
    (["backend.sampler.run_ahead_batches=-1"], [r"backend\.sampler\.run_ahead_batches=-1", r"an integer >= 0"]),
    (["model.attn_implementation=flash"], [r"model\.attn_implementation='flash'", r"allowed: sdpa, eager"]),
    (["model.hidden_size=0"], [r"model\.hidden_size=0", r"an integer >= 1"]),
    (["model.warmstart.min_lr_ratio=2"], [r"model\.warmstart\.min_lr_ratio=2\.0", r">= 0 and <= 1"]),
    (["data.operation=div"], [r"data\.operation='div'", r"allowed: add, sub, mul"]),
    (["data.digits=0"], [r"data\.digits=0", r"an integer >= 1"]),
    (["data.eval_sets.0.size=0"], [r"data\.eval_sets\.0\.size=0", r"an integer >= 1"]),
    # the arm: what its declaration reads
    (["method.loss_mode=ablation_nope"], [r"method\.loss_mode='ablation_nope' is not arm pg's loss",
                                          r"allowed: method\.loss_mode=ablation_pg"]),
    (["method=tis", "method.tis_cap=null"], [r"method\.tis_cap is null", r"applies TIS; allowed: a number > 0"]),
    (["method=pg", "method.tis_cap=2.0"], [r"method\.tis_cap=2\.0", r"applies no TIS; allowed: null"]),
    (["method=sc", "method.score_centering=false"], [r"method\.score_centering=False",
                                                     r"allowed: method\.score_centering=true"]),
    # cross-field rules
    (["method=sc", "rollout.top_p=0.9"], [r"rollout\.top_p=0\.9", r"allowed: rollout\.top_p=1\.0 and rollout\.top_k=-1"]),
    (["method=pg", "rollout.top_k=20"], [r"rollout\.top_k=20", r"allowed: rollout\.top_p=1\.0 and rollout\.top_k=-1"]),
    (["eval.top_p=0.5"], [r"eval\.top_p=0\.5", r"only eval\.top_p=1\.0"]),
    (["backend.micro_batch_size=7"], [r"backend\.micro_batch_size=7", r"must divide .* = 160"]),
    (["backend.name=remote"], [r"backend\.name='remote'", r"allowed: embedded, verl"]),
    # the verl backend (the reference experiment, dry run)
    ([EXPERIMENT, "scenario=fp8"], [r"scenario=fp8", r"allowed with backend=verl: scenario=default"]),
    ([EXPERIMENT, "scenario=stale8", "method=pg"], [r"scenario=stale8", r"scenario=default"]),
    ([EXPERIMENT, "method=sc", "rollout.top_k=50"], [r"rollout\.top_k=50", r"allowed: rollout\.top_p=1\.0"]),
    ([EXPERIMENT, "backend.trainer_mode=sync"], [r"backend\.trainer_mode='sync'", r"allowed: separate_async"]),
    ([EXPERIMENT, "backend.off_policy_strategy=keep"], [r"backend\.off_policy_strategy='keep'",
                                                        r"allowed: drop, wait"]),
    ([EXPERIMENT, "backend.placement.nnodes=0"], [r"backend\.placement\.nnodes=0", r"an integer >= 1"]),
    ([EXPERIMENT, "backend.rollout_engine.gpu_memory_utilization=1.5"],
     [r"backend\.rollout_engine\.gpu_memory_utilization=1\.5", r"> 0 and <= 1"]),
    ([EXPERIMENT, "model.enable_thinking=maybe"], [r"model\.enable_thinking='maybe'", r"true or false"]),
    ([EXPERIMENT, "data.eval_sets.1.size=0"], [r"data\.eval_sets\.1\.size=0", r"an integer >= 1"]),
]


def _id(case) -> str:
    return " ".join(o.replace(EXPERIMENT, "exp") for o in case[0])


def test_the_table_is_large_and_distinct():
    assert len(BAD_CONFIGS) >= 25
    assert len({tuple(o) for o, _ in BAD_CONFIGS}) == len(BAD_CONFIGS)


@pytest.mark.parametrize(("overrides", "wanted"), BAD_CONFIGS, ids=[_id(c) for c in BAD_CONFIGS])
def test_bad_config_is_rejected_before_any_compute(tmp_path, overrides, wanted):
    results = tmp_path / "results"
    argv = [*overrides, f"results_root={results}", *(["backend.dry_run=true"] if EXPERIMENT in overrides else [])]
    with pytest.raises(config_error.ConfigError) as err:
        launch.prevalidate(argv)
    message = str(err.value)
    for pattern in wanted:
        assert re.search(pattern, message, re.MULTILINE), f"{pattern!r} not in {message!r}"
    assert not results.exists()  # nothing written


@pytest.mark.parametrize("overrides", [[], ["method=sc_tis", "scenario=kv4"], [EXPERIMENT, "method=sc_tis",
                                                                              "backend.dry_run=true"]])
def test_good_configs_pass_the_same_path(tmp_path, overrides):
    """The controls: without the bad override the same command validates (the table tests the override)."""
    assert launch.prevalidate([*overrides, f"results_root={tmp_path / 'r'}"])


def test_head_size_is_set_once_per_setup():
    """An arm's declaration has no head size; it comes from the setup (config.yaml / the experiment)."""
    from ablations.arms import all_arms

    assert all("top_k" not in arm.method_node() for arm in all_arms().values())
    with initialize_config_dir(config_dir=str(config_checks.CONF_DIR), version_base=None):
        assert {compose("config", overrides=[f"method={m}"]).method.top_k for m in config_checks.known_methods()} == {8}
        assert {compose("config", overrides=[EXPERIMENT, f"method={m}"]).method.top_k
                for m in config_checks.known_methods()} == {128}


def test_every_group_yaml_names_its_schema():
    names = {(g, n) for g, n, _ in schema.STORED}
    for group, option in (("backend", "embedded"), ("backend", "verl"), ("model", "tiny_qwen3"),
                          ("data", "synthetic_arith")):
        defaults = OmegaConf.load(config_checks.CONF_DIR / group / f"{option}.yaml").defaults
        assert defaults[0] in {n for g, n in names if g == group} and defaults[-1] == "_self_", (group, option)
    assert "base_config" in OmegaConf.load(config_checks.CONF_DIR / "config.yaml").defaults
