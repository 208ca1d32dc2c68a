"""``eval.numerics`` (issue 32): the evaluation samples with a clean sampler unless asked otherwise.

* the config default is ``clean``, the value lands in the resolved config a run records, and only
  ``clean`` and ``scenario`` are allowed (the schema table of ``tests/test_config_schema.py`` has the
  refusal);
* a clean sampler is the trainer's policy: whatever the scenario's numerics, its log-probs equal a
  trainer recomputation, and its draws are those of the on-policy sampler;
* every knob of ``backend.sampler`` is either a numerics knob with an identity value or a schedule key,
  so a knob added later cannot leak into a "clean" evaluation unnoticed;
* end to end, on a real ``EmbeddedRun`` at step 0 (one base model): under ``clean`` a ``kv4`` run and an
  on-policy run write the same evaluation file byte for byte; under ``scenario`` the ``kv4`` one differs;
* the training trajectory does not depend on ``eval.numerics`` (the evaluation has its own sampler
  and streams).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from runners.config import config_checks, schema
from runners.embedded.backend import EmbeddedRun
from runners.embedded.evaluate import eval_sampler_config, val_file
from runners.embedded.sampler import CLEAN_NUMERICS, SCHEDULE_KEYS, Sampler, clean_sampler_config
from runners.embedded.trainer import response_logits
from runners.run.provenance import config_sha256
from runners.tiny.arithmetic_task import ArithmeticTask, prompt_token_ids
from runners.tiny.model import build_model
from runners.tiny.tokenizer import build_tokenizer


def composed(overrides: list[str]):
    with initialize_config_dir(config_dir=str(config_checks.CONF_DIR), version_base=None):
        return compose(config_name="config", overrides=overrides)


def test_clean_is_the_default_and_is_in_the_recorded_config():
    for overrides in ([], ["+experiment=scratchpad", "scenario=kv4"], ["+experiment=qwen3_4b_sc_repro"]):
        cfg = composed(overrides)
        assert cfg.eval.numerics == "clean", overrides
        # the launcher writes this text as the run's config.yaml, whose sha256 metrics.json records
        assert OmegaConf.create(OmegaConf.to_yaml(cfg, resolve=True)).eval.numerics == "clean"
    assert composed(["eval.numerics=scenario"]).eval.numerics == "scenario"


def test_every_sampler_knob_is_numerics_or_schedule():
    fields = {f.name for f in dataclasses.fields(schema.EmbeddedSamplerConfig)}
    assert fields == set(CLEAN_NUMERICS) | SCHEDULE_KEYS
    assert not set(CLEAN_NUMERICS) & SCHEDULE_KEYS
    cfg = composed(["scenario=kv4"]).backend.sampler
    clean = clean_sampler_config(cfg)
    assert {k: clean[k] for k in CLEAN_NUMERICS} == CLEAN_NUMERICS
    assert all(clean[k] == cfg[k] for k in SCHEDULE_KEYS)
    assert cfg.kv_cache_bits == 4  # the scenario's own config is untouched
    with pytest.raises(ValueError, match=r"backend\.sampler\.new_knob: no identity value"):
        clean_sampler_config(OmegaConf.create({**OmegaConf.to_container(cfg), "new_knob": 1}))


def test_eval_sampler_config_follows_eval_numerics():
    clean = composed(["scenario=kv3_sync"])
    assert eval_sampler_config(clean).kv_cache_bits == 0 and eval_sampler_config(clean).weight_dtype == "float32"
    scenario = composed(["scenario=kv3_sync", "eval.numerics=scenario"])
    assert eval_sampler_config(scenario) == scenario.backend.sampler


@pytest.mark.parametrize("scenario", ["kv4", "fp8", "int8", "bf16_compute", "logits_bf16", "noise_large"])
def test_a_clean_sampler_is_the_trainers_policy(scenario):
    tok = build_tokenizer()
    cfg = composed([f"scenario={scenario}", "+model.initializer_range=0.2"])
    torch.manual_seed(0)
    model = build_model(cfg.model, tok).eval()
    prompts = [prompt_token_ids(tok, p) for p in ArithmeticTask(cfg.data).sample_train(torch.Generator().manual_seed(0), 8)]

    def draw(sampler_cfg):
        sampler = Sampler(model, tok, sampler_cfg, cfg.method.top_k)
        sampler.sync(model, 0, torch.Generator().manual_seed(0))
        return sampler.generate(prompts, 4, 12, 1.0, torch.Generator().manual_seed(1))

    clean = draw(eval_sampler_config(cfg))
    on_policy = draw(composed(["scenario=on_policy"]).backend.sampler)
    assert torch.equal(clean.response_ids, on_policy.response_ids) and torch.equal(clean.log_probs, on_policy.log_probs)
    mask = clean.response_mask.bool()
    with torch.no_grad():
        log_p = torch.log_softmax(response_logits(model, clean, tok.pad_token_id, 1.0), -1)
    recomputed = log_p.gather(-1, clean.response_ids[..., None]).squeeze(-1)
    torch.testing.assert_close(recomputed[mask], clean.log_probs[mask], atol=1e-5, rtol=0)
    # the control: the scenario's own sampler does not draw the trainer's policy
    assert not torch.equal(draw(cfg.backend.sampler).log_probs, clean.log_probs)


def _step0_eval(tmp_path, scenario: str, numerics: str) -> bytes:
    overrides = [f"scenario={scenario}", f"eval.numerics={numerics}", "eval.n=2", "seed=3",
                 f"results_root={tmp_path}", "backend.threads=1"]
    run_dir = tmp_path / f"{scenario}-{numerics}"
    run = EmbeddedRun(composed(overrides), run_dir, config_sha256(str(overrides)))
    run.evaluate()
    return val_file(run_dir, 0).read_bytes()


def test_clean_evaluation_scores_every_scenario_alike(tmp_path):
    on_policy = _step0_eval(tmp_path, "on_policy", "clean")
    assert _step0_eval(tmp_path, "kv4", "clean") == on_policy
    assert _step0_eval(tmp_path, "on_policy", "scenario") == on_policy  # on-policy, the two coincide
    assert _step0_eval(tmp_path, "kv4", "scenario") != on_policy  # the 4-bit cache changes the draws


def test_training_does_not_depend_on_eval_numerics(tmp_path):
    rows = {}
    for numerics in ("clean", "scenario"):
        overrides = ["scenario=kv4", f"eval.numerics={numerics}", "eval.n=2", "trainer.prompts_per_step=8",
                     "backend.micro_batch_size=40", f"results_root={tmp_path}", "backend.threads=1"]
        run = EmbeddedRun(composed(overrides), tmp_path / numerics, config_sha256(numerics))
        run.restore()
        steps = []
        for _ in range(3):
            run.evaluate()
            row = run.train_step()
            steps.append({k: v for k, v in row.items() if not k.startswith("timing_s/")})
        rows[numerics] = (steps, {k: v.clone() for k, v in run.trainer.model.state_dict().items()})
    assert rows["clean"][0] == rows["scenario"][0]
    assert all(torch.equal(rows["clean"][1][k], rows["scenario"][1][k]) for k in rows["clean"][1])


def _recorded_run(root, method: str, seed: int, overrides: list[str]):
    """A finished synthetic run whose record's config.yaml is the resolved config of ``overrides``."""
    import yaml

    from analysis.synthetic import counts_to_acc, write_run
    from runners.run.run_record import record_config_sha256

    config = OmegaConf.to_container(composed([f"method={method}", f"seed={seed}", *overrides]), resolve=True)
    run_dir = write_run(root / f"{method}-seed{seed}", method=method, seed=seed, total_steps=0,
                        evals={0: {"a": counts_to_acc([2, 1, 3, 0], 4)}}, method_cfg=config["method"])
    text = yaml.safe_dump(config, sort_keys=False)
    record_config_sha256(run_dir, config_sha256(text))
    (run_dir / "config.yaml").write_text(text)


def test_the_report_does_not_pool_runs_scored_differently(tmp_path):
    """Two runs that differ only in eval.numerics are not pooled as seeds of one arm (analysis.peers)."""
    from analysis.load import SweepError, load_sweep
    from runners.run.peer_keys import is_pooling_key

    assert is_pooling_key("eval.numerics")
    root = tmp_path / "sweep"
    for method in ("pg", "sc"):
        for seed in (1, 2):
            _recorded_run(root, method, seed, ["scenario=kv4"])
    _recorded_run(root, "sc", 3, ["scenario=kv4", "eval.numerics=scenario"])
    sweep = load_sweep(root)
    assert list(sweep.apart) == ["sc-seed3"] and set(sweep.apart["sc-seed3"]) == {"eval.numerics"}
    assert sweep.runs.at["sc-seed3", "method"] == "sc [eval.numerics=scenario]"
    with pytest.raises(SweepError, match="eval.numerics"):
        load_sweep(root, strict=True)
