"""The properties of ``docs/score_centering.md`` (1-7), on small exact examples."""

from __future__ import annotations

import math

import pytest
import torch
from verl.trainer.ppo.core_algos import get_policy_loss_fn

from ablations.score_centering import centering_term, head_log_probs

CAP = 2.0
SC_ARMS = {"sc": ("ablation_sc", None), "sc_tis": ("ablation_sc_tis", CAP)}


def sampler_head(sampler_log_probs: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The sampler's top-k ids and their full-vocabulary log-probs."""
    head_lq, ids = sampler_log_probs.topk(k, dim=-1)
    return ids, head_lq


def arm_loss(arm, logits, tokens, sampler_log_probs, k, adv, mask, config, head=None):
    """The whole trainer path of one arm: head gather, correction, registered loss.

    ``head`` = (ids, sampler log-probs) overrides the top-k of ``sampler_log_probs``.
    """
    loss_name, cap = {"pg": ("ablation_pg", None), "tis": ("ablation_tis", CAP), **SC_ARMS}[arm]
    log_prob = head_log_probs(logits, tokens.unsqueeze(-1)).squeeze(-1)
    old_log_prob = sampler_log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    kwargs = {}
    if arm in SC_ARMS:
        ids, head_lq = head if head is not None else sampler_head(sampler_log_probs, k)
        correction, _, _ = centering_term(head_log_probs(logits, ids), head_lq, is_cap=cap)
        kwargs["sc_correction"] = correction
    advantages = adv.unsqueeze(-1).expand_as(log_prob) if adv.dim() == log_prob.dim() - 1 else adv
    loss, metrics = get_policy_loss_fn(loss_name)(
        old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages, response_mask=mask,
        loss_agg_mode="token-mean", config=config(loss_name), **kwargs,
    )
    return loss, metrics


def random_case(seed: int, vocab: int = 6, positions: int = 1, mismatch: float = 1.5):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(positions, vocab, generator=gen, dtype=torch.float64) * 1.5
    sampler_logits = logits + mismatch * torch.randn(positions, vocab, generator=gen, dtype=torch.float64)
    return logits, torch.log_softmax(sampler_logits, dim=-1)


# -- property 1 -------------------------------------------------------------------------------
@pytest.mark.parametrize("arm", ["sc", "sc_tis"])
def test_on_policy_correction_is_zero_and_loss_equals_pg(arm, actor_config):
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 10, generator=gen)
    tokens = torch.randint(0, 10, (2, 5), generator=gen)
    mask = torch.ones(2, 5)
    adv = torch.tensor([0.8, -1.2])
    # sampler = trainer: the very log-probs the trainer computes, for every vocabulary entry
    own = head_log_probs(logits, torch.arange(10).expand(2, 5, 10)).detach()

    ids, head_lq = sampler_head(own, 4)
    c, q_mass, p_mass = centering_term(head_log_probs(logits, ids), head_lq, is_cap=SC_ARMS[arm][1])
    assert torch.equal(c, torch.zeros_like(c))
    torch.testing.assert_close(q_mass, p_mass)

    z_pg = logits.clone().requires_grad_(True)
    loss_pg, _ = arm_loss("pg", z_pg, tokens, own, 4, adv, mask, actor_config)
    loss_pg.backward()
    z_sc = logits.clone().requires_grad_(True)
    loss_sc, _ = arm_loss(arm, z_sc, tokens, own, 4, adv, mask, actor_config)
    loss_sc.backward()
    assert float(loss_sc) == float(loss_pg)
    torch.testing.assert_close(z_sc.grad, z_pg.grad, atol=0, rtol=0)


# -- property 2 -------------------------------------------------------------------------------
def expected_gradient(arm, logits, sampler_log_probs, k, adv, actor_config):
    """Exact E_{a ~ q_hat}[grad l(a)] by enumerating the vocabulary; q_hat = head q, tail rho p."""
    vocab = logits.shape[-1]
    ids, head_lq = sampler_head(sampler_log_probs, k)
    p = torch.softmax(logits, -1)
    in_head = torch.zeros(vocab, dtype=torch.bool)
    in_head[ids[0]] = True
    rho = (1 - head_lq.exp().sum()) / (1 - p[0, in_head].sum())
    q_hat = torch.where(in_head, sampler_log_probs[0].exp(), rho * p[0])
    assert float(q_hat.sum()) == pytest.approx(1.0, abs=1e-12)
    # the sampler as seen by the loss: head log-probs exact, tail log-probs of q_hat
    log_q_hat = q_hat.log().unsqueeze(0)
    z = logits.clone().requires_grad_(True)
    total = 0.0
    for a in range(vocab):
        loss, _ = arm_loss(arm, z, torch.tensor([a]), log_q_hat, k, adv, torch.ones(1), actor_config,
                           head=(ids, head_lq))
        total = total + q_hat[a].detach() * loss
    total.backward()
    return z.grad, q_hat, p


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("arm", ["sc", "sc_tis"])
def test_no_drift_under_the_proportional_tail(arm, seed, actor_config):
    logits, sampler_log_probs = random_case(seed, vocab=7, mismatch=2.0)
    grad, _, _ = expected_gradient(arm, logits, sampler_log_probs, 3, torch.tensor([1.3], dtype=torch.float64), actor_config)
    torch.testing.assert_close(grad, torch.zeros_like(grad), atol=1e-12, rtol=0)


def test_plain_pg_drifts_by_minus_a_times_q_minus_p(actor_config):
    logits, sampler_log_probs = random_case(5, vocab=7, mismatch=2.0)
    adv = 1.3
    adv_t = torch.tensor([adv], dtype=torch.float64)
    grad, q_hat, p = expected_gradient("pg", logits, sampler_log_probs, 3, adv_t, actor_config)
    torch.testing.assert_close(grad[0], -adv * (q_hat - p[0]), atol=1e-12, rtol=0)
    assert grad.abs().max() > 1e-2  # the case really is off-policy


def test_no_drift_case_exercises_tis_truncation():
    """The SC+TIS no-drift cases above include truncated head ratios and rho < 1/2."""
    truncated = 0
    for seed in range(4):
        logits, sampler_log_probs = random_case(seed, vocab=7, mismatch=2.0)
        ids, head_lq = sampler_head(sampler_log_probs, 3)
        ratio = torch.log_softmax(logits, -1).gather(-1, ids) - head_lq
        truncated += int((ratio > math.log(CAP)).sum())
    assert truncated > 0


# -- properties 3 and 4 -----------------------------------------------------------------------
def full_vocab_gradient(logits, q_full, cap):
    """grad of sum_v sg(q(v) f(p(v)/q(v))) log p(v) over the whole vocabulary."""
    z = logits.clone().requires_grad_(True)
    log_p = torch.log_softmax(z, -1)
    p = log_p.detach().exp()
    coef = q_full if cap is None else torch.minimum(p, cap * q_full)
    (coef * log_p).sum().backward()
    return z.grad


def head_gradient(logits, ids, head_lq, cap):
    z = logits.clone().requires_grad_(True)
    c, _, _ = centering_term(head_log_probs(z, ids), head_lq, is_cap=cap)
    c.sum().backward()
    return z.grad


@pytest.mark.parametrize("cap", [None, CAP])
def test_full_head_equals_full_vocabulary_centering(cap):
    logits, sampler_log_probs = random_case(7, vocab=9, positions=3)
    ids, head_lq = sampler_head(sampler_log_probs, 9)
    torch.testing.assert_close(
        head_gradient(logits, ids, head_lq, cap), full_vocab_gradient(logits, sampler_log_probs.exp(), cap),
        atol=1e-10, rtol=0,
    )


@pytest.mark.parametrize("cap", [None, CAP])
@pytest.mark.parametrize("k", [1, 3, 6])
def test_partial_head_equals_full_formula_on_reconstructed_sampler(cap, k):
    logits, sampler_log_probs = random_case(11, vocab=9, positions=4, mismatch=2.0)
    ids, head_lq = sampler_head(sampler_log_probs, k)
    p = torch.softmax(logits, -1)
    head = torch.zeros_like(p, dtype=torch.bool).scatter_(-1, ids, True)
    rho = (1 - head_lq.exp().sum(-1, keepdim=True)) / (1 - (p * head).sum(-1, keepdim=True))
    q_hat = torch.where(head, sampler_log_probs.exp(), rho * p)
    torch.testing.assert_close(
        head_gradient(logits, ids, head_lq, cap), full_vocab_gradient(logits, q_hat, cap), atol=1e-10, rtol=0
    )


# -- property 5 -------------------------------------------------------------------------------
def test_sc_tis_correction_vanishes_without_truncation():
    p = torch.tensor([0.30, 0.20, 0.15, 0.15, 0.10, 0.10], dtype=torch.float64)
    q_head = torch.tensor([0.25, 0.30, 0.10], dtype=torch.float64)  # p/q = 1.2, 0.67, 1.5 <= 2
    log_p = p.log().requires_grad_(True)
    head_p = log_p[:3].unsqueeze(0)
    c, q_mass, p_mass = centering_term(head_p, q_head.log().unsqueeze(0), is_cap=CAP)
    rho = (1 - q_mass) / (1 - p_mass)
    assert float(rho) >= 0.5
    assert float(c.abs()) < 1e-15
    c.sum().backward()
    assert float(log_p.grad.abs().max()) < 1e-15
    sc_only, _, _ = centering_term(head_p, q_head.log().unsqueeze(0), is_cap=None)
    assert float(sc_only.abs()) > 1e-3  # plain SC does correct here


# -- property 6 -------------------------------------------------------------------------------
@pytest.mark.parametrize("arm", ["sc", "sc_tis"])
def test_correction_independent_of_sampled_token_and_linear_in_advantage(arm, actor_config):
    logits, sampler_log_probs = random_case(3, vocab=8, positions=1, mismatch=2.5)

    def grads(token: int, adv: float, which: str):
        z = logits.clone().requires_grad_(True)
        loss, _ = arm_loss(which, z, torch.tensor([token]), sampler_log_probs, 3, torch.tensor([adv], dtype=torch.float64),
                           torch.ones(1), actor_config)
        loss.backward()
        return z.grad

    base = "pg" if arm == "sc" else "tis"
    corr_a = grads(0, 1.0, arm) - grads(0, 1.0, base)
    corr_b = grads(5, 1.0, arm) - grads(5, 1.0, base)
    torch.testing.assert_close(corr_a, corr_b, atol=1e-12, rtol=0)
    assert corr_a.abs().max() > 1e-4
    torch.testing.assert_close(grads(2, 0.0, arm), torch.zeros_like(logits), atol=0, rtol=0)
    torch.testing.assert_close(grads(2, -2.5, arm), -2.5 * grads(2, 1.0, arm), atol=1e-12, rtol=0)


# -- property 7 -------------------------------------------------------------------------------
@pytest.mark.parametrize("arm", ["pg", "tis", "sc", "sc_tis"])
def test_masked_positions_get_zero_gradient_and_neg_inf_heads_stay_finite(arm, actor_config):
    gen = torch.Generator().manual_seed(4)
    logits = torch.randn(2, 6, 12, generator=gen)
    sampler = torch.log_softmax(logits + torch.randn(2, 6, 12, generator=gen), -1)
    sampler[0, 1, :] = -math.inf  # a padding position: dummy head with no mass
    sampler[0, 1, 0] = 0.0
    sampler[1, 2, 3:] = -math.inf  # a real position whose head has -inf entries
    sampler[1, 2, :3] = torch.log_softmax(torch.randn(3, generator=gen), -1)
    tokens = torch.randint(0, 3, (2, 6), generator=gen)
    mask = torch.ones(2, 6)
    mask[0, 1] = 0
    mask[1, 4:] = 0
    z = logits.clone().requires_grad_(True)
    loss, metrics = arm_loss(arm, z, tokens, sampler, 5, torch.tensor([1.0, -0.5]), mask, actor_config)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(z.grad).all()
    assert all(math.isfinite(v) for v in metrics.values())
    masked = mask == 0
    assert torch.equal(z.grad[masked], torch.zeros_like(z.grad[masked]))
    assert z.grad[~masked].abs().sum() > 0


# -- numerics of centering_term ---------------------------------------------------------------
def test_head_mass_rounding_and_errors():
    """A rounded Q > 1 floors the sampler tail at eps (verl 8718ca30 does the same; no error)."""
    log_p = torch.log(torch.tensor([[0.5, 0.3]], dtype=torch.float64))
    for over in ([0.60003, 0.40003], [0.7, 0.4]):
        log_q = torch.log(torch.tensor([over], dtype=torch.float64))
        c, q_mass, p_mass = centering_term(log_p, log_q)
        rho = 1e-6 / (1 - 0.8)
        expected = ((log_q.exp() - rho * log_p.exp()) * log_p).sum()
        assert float(q_mass) == pytest.approx(sum(over), abs=1e-12) and float(p_mass) == pytest.approx(0.8)
        assert float(c) == pytest.approx(float(expected), abs=1e-12)
    with pytest.raises(ValueError, match="differ in shape"):
        centering_term(log_p, log_p[:, :1])
    with pytest.raises(ValueError, match="is_cap"):
        centering_term(log_p, log_p, is_cap=0.0)


def _verl_rule_correction(log_p: torch.Tensor, log_q: torch.Tensor, cap: float | None, eps: float = 1e-6):
    """verl 8718ca30's rule, written out independently: rho from both tails floored at eps."""
    p, q = log_p.detach().exp(), log_q.exp()
    f = (lambda r: torch.ones_like(r)) if cap is None else (lambda r: r.clamp(max=cap))
    rho = (1 - q.sum(-1)).clamp_min(eps) / (1 - p.sum(-1)).clamp_min(eps)
    coef = q * f(p / q) - (rho * f(1 / rho)).unsqueeze(-1) * p
    return (coef * log_p).sum(-1)


@pytest.mark.parametrize("cap", [None, 2.0])
def test_no_trainer_tail_follows_verls_rule_without_a_jump(cap):
    """Trainer tail around eps, sampler tail 0.43: the project equals verl's rule on both sides of
    the threshold, value and gradient, and the gradient moves continuously across it."""
    grads = []
    for train_tail in (6.4e-7, 0.9e-6, 1.1e-6):
        head = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64) * (1 - train_tail)
        z = torch.log(head).requires_grad_(True)
        log_q = torch.log(torch.tensor([0.3, 0.17, 0.1], dtype=torch.float64))  # Q = 0.57
        c, _, _ = centering_term(z, log_q, is_cap=cap)
        c.sum().backward()
        z_ref = torch.log(head).requires_grad_(True)
        ref = _verl_rule_correction(z_ref, log_q, cap)
        ref.sum().backward()
        torch.testing.assert_close(c, ref, atol=1e-12, rtol=1e-12)
        torch.testing.assert_close(z.grad, z_ref.grad, atol=1e-9, rtol=1e-12)
        grads.append(z.grad)
    # 0.9e-6 and 1.1e-6 straddle eps: the floored rule changes rho by at most 1.1/0.9, no jump to 0
    ratio = (grads[2] - grads[1]).norm() / grads[1].norm()
    assert float(ratio) < 0.25


def test_correction_stays_fp32_under_autocast():
    """verl runs the logits processor inside autocast: C must not be computed in bf16."""
    gen = torch.Generator().manual_seed(11)
    logits = torch.randn(64, 300, generator=gen) * 3
    ids = torch.randperm(300, generator=gen)[:128].expand(64, 128)
    log_p = torch.log_softmax(logits, -1).gather(-1, ids)
    log_q = torch.log_softmax(logits + 0.5 * torch.randn(64, 300, generator=gen), -1).gather(-1, ids)
    for cap in (None, 2.0):
        plain, _, _ = centering_term(log_p, log_q, is_cap=cap)
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            cast, _, _ = centering_term(log_p, log_q, is_cap=cap)
        assert cast.dtype == torch.float32
        torch.testing.assert_close(cast, plain, atol=0, rtol=0)
