"""The registered arms against verl's own bypass-mode REINFORCE, their metrics and their errors."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
from verl.trainer.ppo.core_algos import get_policy_loss_fn

ARMS = ("ablation_pg", "ablation_tis", "ablation_sc", "ablation_sc_tis")


def batch(seed: int = 0, shape=(4, 9), spread: float = 1.0):
    gen = torch.Generator().manual_seed(seed)
    log_prob = -torch.rand(shape, generator=gen) * 3
    old_log_prob = log_prob + spread * torch.randn(shape, generator=gen)  # ratios well above and below 2
    advantages = torch.randn(shape[0], 1, generator=gen).expand(shape).contiguous()
    mask = (torch.rand(shape, generator=gen) > 0.2).float()
    return old_log_prob, log_prob, advantages, mask


@pytest.mark.parametrize(("ours", "rollout_is"), [("ablation_pg", None), ("ablation_tis", "token")])
def test_pg_and_tis_equal_verl_bypass_reinforce(ours, rollout_is, actor_config):
    old_log_prob, log_prob, advantages, mask = batch()
    ratio = (log_prob - old_log_prob).exp()
    assert (ratio[mask.bool()] > 2).any() and (ratio[mask.bool()] < 2).any()

    results = {}
    for name in (ours, "bypass_mode"):
        lp = log_prob.clone().requires_grad_(True)
        loss, metrics = get_policy_loss_fn(name)(
            old_log_prob=old_log_prob, log_prob=lp, advantages=advantages, response_mask=mask,
            loss_agg_mode="token-mean", config=actor_config(name, rollout_is=rollout_is),
        )
        loss.backward()
        results[name] = (loss.detach(), lp.grad, metrics)
    (loss_a, grad_a, m_a), (loss_b, grad_b, m_b) = results[ours], results["bypass_mode"]
    torch.testing.assert_close(loss_a, loss_b, atol=1e-7, rtol=1e-6)
    torch.testing.assert_close(grad_a, grad_b, atol=1e-8, rtol=1e-6)
    assert m_a["actor/ppo_kl"] == pytest.approx(m_b["actor/ppo_kl"], rel=1e-6)
    assert grad_a[mask == 0].abs().max() == 0


def test_tis_metrics_and_configurable_cap(actor_config):
    old_log_prob, log_prob, advantages, mask = batch(seed=1)
    ratio = (log_prob - old_log_prob).exp()
    valid = mask.bool()
    for cap in (2.0, 1.5):
        lp = log_prob.clone().requires_grad_(True)
        loss, metrics = get_policy_loss_fn("ablation_tis")(
            old_log_prob, lp, advantages, mask, "token-mean", actor_config("ablation_tis", threshold=cap)
        )
        loss.backward()
        weight = ratio.clamp(max=cap)
        assert metrics["actor/tis_clip_fraction"] == pytest.approx(float((ratio[valid] > cap).float().mean()))
        assert metrics["actor/tis_weight_mean"] == pytest.approx(float(weight[valid].mean()), rel=1e-6)
        expected_grad = -advantages * weight * mask / mask.sum()
        torch.testing.assert_close(lp.grad, expected_grad, atol=1e-7, rtol=1e-5)
        assert metrics["actor/pg_loss"] == pytest.approx(float(loss))


def test_cap_must_be_a_single_number(actor_config):
    old_log_prob, log_prob, advantages, mask = batch()
    with pytest.raises(ValueError, match="rollout_is_threshold='0.5_5.0'"):
        get_policy_loss_fn("ablation_tis")(
            old_log_prob, log_prob, advantages, mask, "token-mean", actor_config(threshold="0.5_5.0")
        )


@pytest.mark.parametrize("name", ["ablation_sc", "ablation_sc_tis"])
def test_sc_arms_name_the_missing_correction(name, actor_config):
    old_log_prob, log_prob, advantages, mask = batch()
    with pytest.raises(ValueError, match=f"{name} needs the per-token score-centering term"):
        get_policy_loss_fn(name)(old_log_prob, log_prob, advantages, mask, "token-mean", actor_config(name))
    with pytest.raises(ValueError, match="sc_correction has shape"):
        get_policy_loss_fn(name)(
            old_log_prob, log_prob, advantages, mask, "token-mean", actor_config(name),
            sc_correction=torch.zeros(2),
        )


@pytest.mark.parametrize("name", ["ablation_sc", "ablation_sc_tis"])
def test_a_supplied_correction_equals_the_keyword(name, actor_config):
    """verl 0.9.1's ppo_loss cannot pass sc_correction: the project's engine supplies it around the call."""
    from ablations.token_loss import supplying_correction

    old_log_prob, log_prob, advantages, mask = batch(seed=4)
    correction = torch.randn_like(log_prob)
    loss_fn = get_policy_loss_fn(name)
    by_keyword, metrics_kw = loss_fn(old_log_prob, log_prob, advantages, mask, "token-mean", actor_config(name),
                                     sc_correction=correction)
    with supplying_correction(correction):
        supplied, metrics_supplied = loss_fn(old_log_prob, log_prob, advantages, mask, "token-mean", actor_config(name))
        with pytest.raises(ValueError, match="both as a keyword and"):
            loss_fn(old_log_prob, log_prob, advantages, mask, "token-mean", actor_config(name), sc_correction=correction)
    assert float(supplied) == float(by_keyword) and metrics_supplied == metrics_kw
    with pytest.raises(ValueError, match="needs the per-token"):  # the block is over: nothing supplied any more
        loss_fn(old_log_prob, log_prob, advantages, mask, "token-mean", actor_config(name))


@pytest.mark.parametrize("name", ["ablation_sc", "ablation_sc_tis"])
def test_sc_loss_is_pg_plus_advantage_times_correction(name, actor_config):
    old_log_prob, log_prob, advantages, mask = batch(seed=2)
    correction = torch.randn_like(log_prob, requires_grad=True)
    lp = log_prob.clone().requires_grad_(True)
    loss, metrics = get_policy_loss_fn(name)(
        old_log_prob, lp, advantages, mask, "token-mean", actor_config(name), sc_correction=correction
    )
    loss.backward()
    tis = name.endswith("tis")
    # by hand: l_t = -A (w_a log p(a) - C_t), w_a = min(p(a)/q(a), 2) with TIS else 1; token mean over the mask
    weight = (log_prob - old_log_prob).exp().clamp(max=2.0) if tis else torch.ones_like(log_prob)
    if tis:
        assert (weight < 2).any() and (weight == 2).any()  # the cap binds on some tokens, not on all
    tokens = mask.sum()
    expected = (-advantages * (weight * log_prob - correction.detach()) * mask).sum() / tokens
    torch.testing.assert_close(loss.detach(), expected, atol=1e-6, rtol=1e-6)
    assert metrics["actor/pg_loss"] == pytest.approx(float(expected), rel=1e-6)
    # the sampled token's part: d loss / d log p(a) = -A sg(w_a) / N; the correction's: +A / N
    torch.testing.assert_close(lp.grad, -advantages * weight * mask / tokens, atol=1e-7, rtol=1e-6)
    torch.testing.assert_close(correction.grad, advantages * mask / tokens)
    assert metrics["actor/sc_correction"] == pytest.approx(float(correction[mask.bool()].mean()), rel=1e-5)
    assert ("actor/tis_clip_fraction" in metrics) == tis


@pytest.mark.parametrize("name", ARMS)
def test_micro_batches_with_global_token_count_sum_to_the_full_batch(name, actor_config):
    """agg_loss with config.global_batch_info: splitting the batch does not change the gradient."""
    from verl.workers.config.actor import ActorConfig

    old_log_prob, log_prob, advantages, mask = batch(seed=3, shape=(6, 5))
    correction = torch.randn_like(log_prob) if "sc" in name else None
    kw = {"sc_correction": correction} if correction is not None else {}

    lp = log_prob.clone().requires_grad_(True)
    loss, _ = get_policy_loss_fn(name)(old_log_prob, lp, advantages, mask, "token-mean", actor_config(name), **kw)
    loss.backward()

    base = actor_config(name)
    split = ActorConfig(**{**{f: getattr(base, f) for f in ("strategy", "ppo_micro_batch_size_per_gpu",
                                                            "rollout_n", "policy_loss")},
                           "global_batch_info": {"dp_size": 1, "batch_num_tokens": int(mask.sum())}})
    lp2 = log_prob.clone().requires_grad_(True)
    for rows in (slice(0, 2), slice(2, 6)):
        kw_rows = {"sc_correction": correction[rows]} if correction is not None else {}
        part, _ = get_policy_loss_fn(name)(
            old_log_prob[rows], lp2[rows], advantages[rows], mask[rows], "token-mean", split, **kw_rows
        )
        part.backward()
    torch.testing.assert_close(lp2.grad, lp.grad, atol=1e-8, rtol=1e-6)


def test_registered_after_plain_import_verl_in_fresh_process():
    code = (
        "import verl\n"
        "from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, get_policy_loss_fn\n"
        f"names = {ARMS!r}\n"
        "missing = [n for n in names if n not in POLICY_LOSS_REGISTRY]\n"
        "assert not missing, missing\n"
        "print(','.join(get_policy_loss_fn(n).__module__ for n in names))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == ",".join(["ablations.losses"] * 4)


def test_same_function_object_in_registry_and_module():
    from ablations import losses, registry

    assert get_policy_loss_fn("ablation_sc") is losses.policy_loss_sc
    assert registry.ARM_NAMES[:4] == ARMS
    assert math.isclose(losses.tis_cap(type("C", (), {"policy_loss": type("P", (), {
        "rollout_correction": type("R", (), {"rollout_is_threshold": "2.5"})})})), 2.5)
