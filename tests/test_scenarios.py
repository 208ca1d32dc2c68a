"""The mismatch scenarios (conf/scenario/) do what their one-line docs say, measured on the sampler.

* on_policy: the sampler's log-probs equal a trainer recomputation to numerical precision, and
  score centering's correction ``C_t`` is then ~0;
* every numerics knob moves the sampler's distribution away from the trainer's by a measurable
  amount, in the expected direction (more noise / fewer mantissa bits -> larger KL(q||p));
* staleness: the replay buffer really lets groups reach the configured staleness (constant scenarios).

The model is a seeded fresh init of the tiny Qwen3 with a larger init scale (sharper, less
uniform next-token distributions than the default 0.02, so rounding errors show in the logits).
"""

from __future__ import annotations

import copy

import pytest
import torch
from hydra import compose, initialize_config_dir

from ablations.score_centering import centering_term, head_log_probs
from runners.config import config_checks
from runners.embedded.backend import EmbeddedRun
from runners.embedded.replay_buffer import Group
from runners.embedded.sampler import Sampler, clean_sampler_config, fake_quantise, quantise_kv_cache
from runners.embedded.trainer import response_logits
from runners.run.provenance import config_sha256
from runners.tiny.arithmetic_task import ArithmeticTask, prompt_token_ids
from runners.tiny.model import build_model
from runners.tiny.tokenizer import build_tokenizer


def composed(overrides: list[str]):
    with initialize_config_dir(config_dir=str(config_checks.CONF_DIR), version_base=None):
        return compose(config_name="config", overrides=overrides)


@pytest.fixture(scope="module")
def setup():
    tok = build_tokenizer()
    cfg = composed(["+model.initializer_range=0.2"])
    torch.manual_seed(0)
    model = build_model(cfg.model, tok).eval()
    task = ArithmeticTask(cfg.data)
    prompts = [prompt_token_ids(tok, p) for p in task.sample_train(torch.Generator().manual_seed(0), 16)]
    return tok, model, prompts


def sample(setup, overrides: list[str]):
    """Sync a sampler under ``overrides`` and draw 4 responses per prompt; returns what a test compares.

    Returns ``(rollout, log_q, log_p)``: the rollout, and the full-vocabulary log-probs ``(R, T, V)``
    of the sampler's weights and of the trainer's weights at every response position.
    """
    tok, model, prompts = setup
    cfg = composed(overrides)
    sampler = Sampler(model, tok, cfg.backend.sampler, cfg.method.top_k)
    sampler.sync(model, 0, torch.Generator().manual_seed(0))
    rollout = sampler.generate(prompts, 4, cfg.rollout.max_response_length, 1.0, torch.Generator().manual_seed(1))
    with torch.no_grad():
        log_q = torch.log_softmax(response_logits(sampler.model, rollout, tok.pad_token_id, 1.0), -1)
        log_p = torch.log_softmax(response_logits(model, rollout, tok.pad_token_id, 1.0), -1)
    return rollout, log_q, log_p


def kl_q_p(setup, overrides: list[str]) -> float:
    """Mean over response tokens of the exact full-vocabulary KL(q || p) (sampler q, trainer p)."""
    rollout, log_q, log_p = sample(setup, overrides)
    mask = rollout.response_mask.bool()
    # the sampler's returned log-probs are its own distribution (cache vs full forward agree)
    own = log_q.gather(-1, rollout.response_ids[..., None]).squeeze(-1)
    torch.testing.assert_close(own[mask], rollout.log_probs[mask], atol=1e-4, rtol=0)
    kl = (log_q.exp() * (log_q - log_p)).sum(-1)
    return float(kl[mask].mean())


def test_on_policy_sampler_matches_trainer_and_centering_vanishes(setup):
    rollout, _, log_p = sample(setup, ["scenario=on_policy"])
    mask = rollout.response_mask.bool()
    recomputed = log_p.gather(-1, rollout.response_ids[..., None]).squeeze(-1)
    torch.testing.assert_close(recomputed[mask], rollout.log_probs[mask], atol=1e-5, rtol=0)
    # SC's correction with the trainer's log-probs at the sampler's head, as PolicyTrainer computes it
    tok, model, _ = setup
    logits = response_logits(model, rollout, tok.pad_token_id, 1.0)
    train_head = head_log_probs(logits, rollout.head_ids)
    for cap in (None, 2.0):
        correction, q_mass, p_mass = centering_term(train_head, rollout.head_log_probs, is_cap=cap)
        assert correction[mask].abs().max() < 1e-4  # sums of k terms (q - rho p) log p, each ~1e-7 x |log p|
        torch.testing.assert_close(q_mass[mask], p_mass[mask], atol=1e-5, rtol=0)
        # its gradient is ~0 too (the correction is a surrogate: value and gradient both vanish)
        (grad,) = torch.autograd.grad(correction[mask].sum(), logits, retain_graph=True)
        assert grad.abs().max() < 1e-5


def test_default_scenario_is_the_backend_default():
    assert composed([]).scenario == "default"
    base, named = composed([]), composed(["scenario=default"])
    assert base.backend.sampler == named.backend.sampler and base.rollout == named.rollout


@pytest.fixture(scope="module")
def kls(setup) -> dict[str, float]:
    scenarios = ["on_policy", "default", "fp8", "int8", "noise_small", "noise_medium", "noise_large", "fp8_sync",
                 "noise_large_sync"]
    out = {s: kl_q_p(setup, [f"scenario={s}"]) for s in scenarios}
    out["float16"] = kl_q_p(setup, ["scenario=on_policy", "backend.sampler.weight_dtype=float16"])
    return out


def test_numerics_knobs_move_the_sampler_in_the_expected_direction(kls):
    assert abs(kls["on_policy"]) < 1e-7  # identical weights: no mismatch
    # each knob alone is measurable (well above the fp32 recomputation noise of ~1e-9)
    for name in ("default", "float16", "fp8", "int8", "noise_small"):
        assert kls[name] > 1e-7, (name, kls)
    # fewer mantissa bits, larger mismatch: fp16 (10 bits) < bf16 (7) < fp8 e4m3 (3)
    assert kls["float16"] < kls["default"] < kls["fp8"], kls
    # int8 rounding comes on top of the bf16 rounding; so does the weight noise
    assert kls["int8"] > kls["default"], kls
    assert kls["default"] < kls["noise_small"] < kls["noise_medium"] < kls["noise_large"], kls
    # the synchronous variants have the same numerics (only the staleness differs)
    assert kls["fp8_sync"] == pytest.approx(kls["fp8"]) and kls["noise_large_sync"] == pytest.approx(kls["noise_large"])


@pytest.mark.parametrize(("scenario", "staleness"), [("on_policy", 0), ("stale_worst", 4), ("fp8_sync", 0), ("noise_large_sync", 0)])
def test_staleness_reaches_the_configured_bound(tmp_path, scenario, staleness):
    """Constant-staleness scenarios, on a real EmbeddedRun whose sampler is a stand-in that tags groups with
    the current version (parameter_sync_step = 1); the default's spread over 0..4 is tested in test_staleness.py."""
    cfg = composed([f"scenario={scenario}", f"results_root={tmp_path}", "backend.threads=1"])
    run = EmbeddedRun(cfg, tmp_path / scenario, config_sha256(scenario))
    n = cfg.trainer.n
    run.produce = lambda count: [Group(problem=None, version=run.step, rollout=None, scores=[0.0] * n,
                                       accs=[0] * n) for _ in range(count)]
    seen = []
    for _ in range(120):
        groups, _ = run.next_batch()
        assert len(groups) == cfg.trainer.prompts_per_step
        seen.append(max(run.step - g.version for g in groups))
        run.step += 1
    assert max(seen) == staleness and max(seen) <= cfg.rollout.max_staleness
    assert seen[-20:] == [staleness] * 20  # steady state: the sampler stays this far ahead


def test_generate_without_head_samples_the_same_tokens(setup):
    """``return_head=False`` (used only to time the head) leaves sampling unchanged, with a dummy head."""
    tok, model, prompts = setup
    cfg = composed(["scenario=on_policy"])
    sampler = Sampler(model, tok, cfg.backend.sampler, cfg.method.top_k)
    with_head, without = (sampler.generate(prompts[:4], 3, 12, 1.0, torch.Generator().manual_seed(5), return_head=h)
                          for h in (True, False))
    assert torch.equal(with_head.response_ids, without.response_ids)
    assert torch.equal(with_head.log_probs, without.log_probs)
    assert without.head_ids.shape == with_head.head_ids.shape and torch.isinf(without.head_log_probs).all()


def _kl(setup, overrides: list[str], sync_seed: int = 0) -> tuple[float, torch.Tensor]:
    """(exact mean KL(q || p) over response tokens, the sampler's returned log-probs) for a sampler synced
    with ``sync_seed``; same prompts and sampling stream every call. The sampler's full distribution is
    recomputed by its own forward (its dtype and KV quantisation included) and its logits rounding."""
    tok, model, prompts = setup
    cfg = composed(overrides)
    sampler = Sampler(model, tok, cfg.backend.sampler, cfg.method.top_k)
    sampler.sync(model, 0, torch.Generator().manual_seed(sync_seed))
    rollout = sampler.generate(prompts, 4, cfg.rollout.max_response_length, 1.0, torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits_q = response_logits(sampler.model, rollout, tok.pad_token_id, 1.0)
        if sampler.logits_dtype is not None:
            logits_q = logits_q.to(sampler.logits_dtype).float()
        log_q = torch.log_softmax(logits_q, -1)
        log_p = torch.log_softmax(response_logits(model, rollout, tok.pad_token_id, 1.0), -1)
    mask = rollout.response_mask.bool()
    kl = (log_q.exp() * (log_q - log_p)).sum(-1)
    return float(kl[mask].mean()), rollout.log_probs


def test_systematic_knobs_move_the_sampler_and_repeat_at_every_sync(setup):
    on = "scenario=on_policy"
    kl = {name: _kl(setup, [on, *extra])[0] for name, extra in {
        "fp32": [], "bf16_compute": ["backend.sampler.compute_dtype=bfloat16"],
        "kv8": ["backend.sampler.kv_cache_bits=8"], "kv4": ["backend.sampler.kv_cache_bits=4"],
        "logits_bf16": ["backend.sampler.logits_dtype=bfloat16"]}.items()}
    assert abs(kl["fp32"]) < 1e-7, kl
    for name in ("bf16_compute", "kv8", "kv4", "logits_bf16"):
        assert kl[name] > 1e-7, (name, kl)
    assert kl["kv4"] > 10 * kl["kv8"], kl  # 4 bits: 16x coarser steps than 8 bits
    # systematic: a re-sync (another sync stream) reproduces the sampler's log-probs exactly, unlike weight noise
    for knob in ("backend.sampler.compute_dtype=bfloat16", "backend.sampler.kv_cache_bits=4",
                 "backend.sampler.logits_dtype=bfloat16"):
        assert torch.equal(_kl(setup, [on, knob], 0)[1], _kl(setup, [on, knob], 7)[1]), knob
    assert not torch.equal(_kl(setup, ["scenario=noise_small"], 0)[1], _kl(setup, ["scenario=noise_small"], 7)[1])


def _keys_and_values(model, value_bits: int, key_bits: int | None) -> tuple[dict, dict]:
    """(exact, stored): layer 0's keys (``k_norm``'s output) and values (``v_proj``'s) of a copy of ``model`` before
    and after :func:`quantise_kv_cache` with these widths, on one short input."""
    clone = copy.deepcopy(model)
    attention = clone.model.layers[0].self_attn
    exact, stored = {}, {}
    attention.k_norm.register_forward_hook(lambda _m, _i, out: exact.__setitem__("k", out.clone()))
    attention.v_proj.register_forward_hook(lambda _m, _i, out: exact.__setitem__("v", out.clone()))
    quantise_kv_cache(clone, value_bits, key_bits)  # hooks run in order: each sees the one before's output
    attention.k_norm.register_forward_hook(lambda _m, _i, out: stored.__setitem__("k", out))
    attention.v_proj.register_forward_hook(lambda _m, _i, out: stored.__setitem__("v", out))
    with torch.no_grad():
        clone(torch.tensor([[3, 5, 7, 9, 11]]))
    return exact, stored


def test_split_cache_stores_keys_and_values_at_their_own_widths(setup):
    """``key_cache_bits`` quantises the keys at its width and the values at ``kv_cache_bits``; null is
    ``kv_cache_bits`` for both; 0 leaves that half exact."""
    _, model, _ = setup
    head_dim = model.model.layers[0].self_attn.head_dim
    keys = {}
    for key_bits, value_bits in ((2, 3), (None, 3), (0, 3), (2, 0)):
        exact, stored = _keys_and_values(model, value_bits, key_bits)
        k_bits = value_bits if key_bits is None else key_bits
        want_k = fake_quantise(exact["k"], k_bits) if k_bits else exact["k"]
        v = exact["v"].reshape(*exact["v"].shape[:-1], -1, head_dim)
        want_v = fake_quantise(v, value_bits).reshape(exact["v"].shape) if value_bits else exact["v"]
        assert torch.equal(stored["k"], want_k) and torch.equal(stored["v"], want_v), (key_bits, value_bits)
        keys[key_bits, value_bits] = stored["k"]
    assert not torch.equal(keys[2, 3], keys[None, 3])  # the split really changes the keys
    assert not torch.equal(keys[0, 3], keys[None, 3])


def test_split_cache_at_the_value_width_is_the_plain_cache_and_sits_between_its_neighbours(setup):
    on = "scenario=on_policy"
    plain = _kl(setup, [on, "backend.sampler.kv_cache_bits=3"])
    same = _kl(setup, [on, "backend.sampler.kv_cache_bits=3", "backend.sampler.key_cache_bits=3"])
    assert torch.equal(plain[1], same[1])
    split = _kl(setup, [on, "backend.sampler.kv_cache_bits=3", "backend.sampler.key_cache_bits=2"])[0]
    both2 = _kl(setup, [on, "backend.sampler.kv_cache_bits=2"])[0]
    assert plain[0] < split < both2, (plain[0], split, both2)
    assert clean_sampler_config(composed(["scenario=kv3_sync", "backend.sampler.key_cache_bits=2"]
                                         ).backend.sampler).key_cache_bits is None


@pytest.mark.parametrize("scenario", ["bf16_compute", "kv4", "logits_bf16"])
def test_systematic_scenarios_compose_on_the_default(scenario):
    cfg, default = composed([f"scenario={scenario}"]), composed([])
    assert cfg.scenario == scenario and cfg.rollout == default.rollout
    changed = {k for k in cfg.backend.sampler if cfg.backend.sampler[k] != default.backend.sampler[k]}
    assert len(changed) == 1, changed  # one knob on top of the default (bf16 weights, staleness spread)
