"""The two regimes of the round-5 study (issue 32, ``docs/drift_study.md``), each a scenario.

* **Regime A** (``kv<b>_sync``): quantization mismatch alone. Every level is synchronous (staleness 0 at
  every step), differs from the others only in the KV-cache width, and the mismatch grows down the
  ladder 8 -> 6 -> 5 -> 4 -> 3 -> 2 bits (exact full-vocabulary KL(q || p)).
* **Regime B** (``refresh<N>``): staleness alone. On a real ``EmbeddedRun`` (real sampler, TIS arm) the
  sampler's weights at every step are exactly the trainer's weights of the last refresh step
  (N x floor(t / N)), every trained group has staleness t mod N, and the TIS clip fraction is logged
  at every step; a stand-in sampler checks the staleness pattern over many periods cheaply.
"""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_dir

from runners.config import config_checks
from runners.embedded.backend import EmbeddedRun
from runners.embedded.replay_buffer import Group
from runners.embedded.sampler import Sampler
from runners.embedded.trainer import response_logits
from runners.run.provenance import config_sha256
from runners.tiny.arithmetic_task import ArithmeticTask, prompt_token_ids
from runners.tiny.model import build_model
from runners.tiny.tokenizer import build_tokenizer

LADDER = (8, 6, 5, 4, 3, 2)


def composed(overrides: list[str]):
    with initialize_config_dir(config_dir=str(config_checks.CONF_DIR), version_base=None):
        return compose(config_name="config", overrides=overrides)


def stand_in_schedule(tmp_path, overrides: list[str], steps: int) -> list[list[int]]:
    """Staleness of every trained group per step, from ``EmbeddedRun.next_batch`` with a sampler stand-in that
    tags groups with the version the real sampler would hold (the last step the backend synced it at)."""
    cfg = composed([*overrides, f"results_root={tmp_path}", "backend.threads=1"])
    run = EmbeddedRun(cfg, tmp_path / "schedule", config_sha256(str(overrides)))
    n, sync, held = cfg.trainer.n, cfg.rollout.parameter_sync_step, [0]
    run.produce = lambda count: [Group(problem=None, version=held[0], rollout=None, scores=[0.0] * n, accs=[0] * n)
                                 for _ in range(count)]
    seen = []
    for _ in range(steps):
        groups, evicted = run.next_batch()
        assert len(groups) == cfg.trainer.prompts_per_step and evicted == 0
        seen.append(sorted({run.step - g.version for g in groups}))
        run.step += 1
        if run.step % sync == 0:
            held[0] = run.step
    return seen


@pytest.mark.parametrize("bits", LADDER)
def test_regime_a_is_synchronous_and_differs_only_in_the_kv_cache(tmp_path, bits):
    cfg, sync_control = composed([f"scenario=kv{bits}_sync"]), composed(["scenario=fp8_sync"])
    assert cfg.rollout == sync_control.rollout  # parameter_sync_step 1, the default max_staleness
    changed = {k for k in cfg.backend.sampler if cfg.backend.sampler[k] != composed([]).backend.sampler[k]}
    assert changed == {"kv_cache_bits", "speed", "run_ahead_batches"}, changed
    assert cfg.backend.sampler.kv_cache_bits == bits and cfg.backend.sampler.weight_dtype == "bfloat16"
    assert stand_in_schedule(tmp_path, [f"scenario=kv{bits}_sync"], 60) == [[0]] * 60


def test_regime_a_ladder_grows_the_mismatch():
    tok = build_tokenizer()
    cfg = composed(["+model.initializer_range=0.2"])
    torch.manual_seed(0)
    model = build_model(cfg.model, tok).eval()
    prompts = [prompt_token_ids(tok, p) for p in ArithmeticTask(cfg.data).sample_train(torch.Generator().manual_seed(0), 16)]
    kl = {}
    for bits in LADDER:
        sampler = Sampler(model, tok, composed([f"scenario=kv{bits}_sync"]).backend.sampler, cfg.method.top_k)
        sampler.sync(model, 0, torch.Generator().manual_seed(0))
        rollout = sampler.generate(prompts, 4, 12, 1.0, torch.Generator().manual_seed(1))
        with torch.no_grad():
            log_q = torch.log_softmax(response_logits(sampler.model, rollout, tok.pad_token_id, 1.0), -1)
            log_p = torch.log_softmax(response_logits(model, rollout, tok.pad_token_id, 1.0), -1)
        mask = rollout.response_mask.bool()
        kl[bits] = float((log_q.exp() * (log_q - log_p)).sum(-1)[mask].mean())
    assert all(kl[a] < kl[b] for a, b in zip(LADDER, LADDER[1:], strict=False)), kl
    assert kl[2] > 100 * kl[8], kl


@pytest.mark.parametrize("period", [8, 16, 32, 64])
def test_regime_b_scenarios_refresh_every_n_steps(tmp_path, period):
    cfg = composed([f"scenario=refresh{period}"])
    assert cfg.rollout.parameter_sync_step == period and cfg.rollout.max_staleness == period - 1
    assert cfg.backend.sampler.weight_dtype == "float32" and cfg.backend.sampler.run_ahead_batches == 0
    assert cfg.backend.sampler.kv_cache_bits == 0 and cfg.backend.sampler.compute_dtype == "float32"
    seen = stand_in_schedule(tmp_path, [f"scenario=refresh{period}"], 3 * period + 5)
    assert seen == [[t % period] for t in range(3 * period + 5)]


def test_regime_b_sampler_holds_the_weights_of_the_last_refresh(tmp_path):
    period, steps = 3, 8
    overrides = ["scenario=refresh8", f"rollout.parameter_sync_step={period}", f"rollout.max_staleness={period - 1}",
                 "method=tis", "trainer.prompts_per_step=4", "backend.micro_batch_size=20", "eval.n=1",
                 f"results_root={tmp_path}", "backend.threads=1"]
    run = EmbeddedRun(composed(overrides), tmp_path / "refresh", config_sha256("refresh"))
    run.restore()
    trainer_states = {0: {k: v.clone() for k, v in run.trainer.model.state_dict().items()}}
    for step in range(steps):
        refresh = period * (step // period)
        # the batch of this step is drawn by the weights of the last refresh step, exactly (fp32, no mismatch)
        assert run.sampler.version == refresh
        held = run.sampler.model.state_dict()
        assert all(torch.equal(held[k], trainer_states[refresh][k]) for k in held)
        if refresh != step:
            assert not all(torch.equal(held[k], trainer_states[step][k]) for k in held)  # it is really behind
        row = run.train_step()
        trainer_states[run.step] = {k: v.clone() for k, v in run.trainer.model.state_dict().items()}
        assert row["training/off_policy/trajectory_staleness/mean"] == step % period
        assert row["training/off_policy/trajectory_staleness/max"] == step % period
        assert 0.0 <= row["actor/tis_clip_fraction"] <= 1.0  # TIS's truncation, logged at every step
        assert row["actor/ppo_kl"] == pytest.approx(0.0, abs=1e-6) or step % period != 0
