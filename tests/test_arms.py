"""The arms as declarations (``ablations/arms/``) and the plug-in corrections against verl's own functions.

- every declared arm becomes a ``method`` node whose reading (:class:`ablations.arms.ArmSpec`) is its
  declaration; the four arms' method text is what it was;
- the non-SC plug-in arms *are* verl's ``bypass_mode`` loss, configured: their weights and masks equal
  ``compute_rollout_correction_and_rejection_mask``'s output in float64 on shared inputs;
- the centering term with an IS rule equals verl main's formula (c6236f51, ``score_centering_correction``
  with ``score_centering_weight_fn``: ``sum_H sg(q w(p/q) - alpha p) log p``, ``alpha = rho w(1/rho)``),
  written out below from that formula in float64, in values and gradients; SC+TIS is its TIS case and
  ``ablation_sc_corrected`` with a number is ``ablation_sc_tis``.
"""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_dir
from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.trainer.ppo.rollout_corr_helper import (
    _parse_rollout_is_threshold,
    compute_rollout_correction_and_rejection_mask,
)

import runners  # noqa: F401 - registers the schemas and the arms' method nodes
from ablations.arms import ArmSpec, all_arms
from ablations.score_centering import centering_term
from runners.config import CONF_DIR
from runners.config.config_error import ConfigError

NEW_ARMS = ("icepop", "seq_tis", "token_mis", "geo_mask", "sc_icepop")


def _method(name: str, *overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose("config", overrides=[f"method={name}", *overrides]).method


def test_every_declared_arm_is_a_method_node_read_back_as_declared():
    arms = all_arms()
    assert list(arms)[:4] == ["pg", "tis", "sc", "sc_tis"] and set(NEW_ARMS) <= set(arms)
    for name, arm in arms.items():
        node = _method(name)
        assert ArmSpec.of(node) == ArmSpec.of(arm.method_node()), name
    # the four arms' method text is unchanged but for the added key, which config_history maps to null
    assert list(_method("tis")) == ["name", "loss_mode", "tis_cap", "score_centering", "rollout_correction", "top_k"]
    assert ArmSpec.of({"name": "tis", "loss_mode": "ablation_tis", "tis_cap": 2.0, "score_centering": False}) \
        == ArmSpec.of(_method("tis"))


def test_the_questions_an_arm_answers():
    spec = {name: ArmSpec.of(arm.method_node()) for name, arm in all_arms().items()}
    assert [spec[n].rank for n in ("pg", "tis", "sc", "sc_tis", "icepop", "geo_mask", "sc_icepop")] == [0, 1, 2, 3, 1, 1, 3]
    assert spec["tis"].verl_rollout_correction() == {"rollout_is": "token", "rollout_is_threshold": 2.0,
                                                     "rollout_rs": None, "rollout_rs_threshold": None}
    assert spec["pg"].verl_rollout_correction()["rollout_is"] is None
    assert spec["icepop"].is_level == "token" and spec["seq_tis"].is_level == "sequence"
    assert spec["geo_mask"].is_level is None and spec["geo_mask"].rejection == "seq_mean_k1"
    assert spec["sc_tis"].centering_weight() == (2.0, None)
    assert spec["sc_icepop"].centering_weight() == (None, (0.5, 5.0))
    assert spec["sc"].centering_weight() == (None, None)


@pytest.mark.parametrize(("overrides", "message"), [
    (["method.rollout_correction.rollout_is_threshold=0.0"], r"rollout_is_threshold=0\.0: .*upper bound must be positive"),
    (["method.rollout_correction.rollout_is_threshold=5.0_0.5"], r"lower bound must be <= upper"),
    (["method.rollout_correction.rollout_rs=token_k1"], r"arm icepop has no rollout_rs; allowed: null"),
    (["method.rollout_correction.rollout_is=null"], r"arm icepop has rollout_is"),
    (["method.tis_cap=2.0"], r"applies no TIS; allowed: null"),
    (["method.loss_mode=ablation_pg"], r"is not arm icepop's loss; allowed: method.loss_mode=bypass_mode"),
])
def test_an_override_may_move_a_threshold_not_change_what_the_arm_reads(overrides, message):
    from runners.config.config_checks import check_arm

    check_arm(_method_cfg("icepop", "method.rollout_correction.rollout_is_threshold=0.4_3.0"))  # a band moves
    with pytest.raises(ConfigError, match=message):
        check_arm(_method_cfg("icepop", *overrides))


def test_rejection_options_and_sequence_level_centering_are_refused_in_one_line():
    from runners.config.config_checks import check_arm

    with pytest.raises(ConfigError, match=r"rollout_rs='seq_mean_k9'; allowed: comma-separated of"):
        check_arm(_method_cfg("geo_mask", "method.rollout_correction.rollout_rs=seq_mean_k9"))
    with pytest.raises(ConfigError, match=r"seq_mean_k2.*single upper bound"):
        check_arm(_method_cfg("geo_mask", "method.rollout_correction.rollout_rs=seq_mean_k2"))
    with pytest.raises(ConfigError, match=r"token-level IS only, got rollout_is='sequence'"):
        check_arm(_method_cfg("sc_icepop", "method.rollout_correction.rollout_is=sequence"))


def _method_cfg(name: str, *overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose("config", overrides=[f"method={name}", *overrides])


# -- the plug-in arms are verl's functions ----------------------------------------------------------
def _batch(seed: int = 0, shape=(6, 11), spread: float = 0.6, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    log_prob = (-torch.rand(shape, generator=gen, dtype=dtype) * 3)
    old_log_prob = log_prob + spread * torch.randn(shape, generator=gen, dtype=dtype)
    advantages = torch.randn(shape[0], 1, generator=gen, dtype=dtype).expand(shape).contiguous()
    mask = (torch.rand(shape, generator=gen) > 0.2).to(dtype)
    mask[:, 0] = 1
    return old_log_prob, log_prob, advantages, mask


def _verl_config(block: dict, loss_mode: str, actor_config):
    config = actor_config(loss_mode)
    rc = config.policy_loss.rollout_correction
    for key, value in block.items():
        object.__setattr__(rc, key, value)
    config.global_batch_info.update(dp_size=1, batch_num_tokens=None, global_batch_size=None, loss_scale_factor=None)
    return config


@pytest.mark.parametrize("name", ["icepop", "seq_tis", "token_mis", "geo_mask", "tis", "pg"])
def test_plug_in_arms_weights_and_masks_are_verls_in_float64(name, actor_config):
    """The arm's block through verl's own loss equals ``-A sg(w) log p`` with verl's ``w`` and mask, in float64."""
    spec = ArmSpec.of(all_arms()[name].method_node())
    block = spec.verl_rollout_correction()
    old_log_prob, log_prob, advantages, mask = _batch()
    if name == "geo_mask":  # a band the shared batch straddles: some responses kept, some masked
        block["rollout_rs_threshold"] = "0.9_1.1"
    weights, kept, _ = compute_rollout_correction_and_rejection_mask(
        old_log_prob=log_prob, rollout_log_prob=old_log_prob, response_mask=mask, **block)
    w = torch.ones_like(log_prob) if weights is None else weights.batch["rollout_is_weights"]
    assert w.dtype == torch.float64
    if spec.rejection is not None:
        assert 0 < kept.sum() < mask.sum(), "the mask must keep some tokens and drop others here"
    if block["rollout_is"] == "token" and "_" in str(block["rollout_is_threshold"]):
        assert (w[mask.bool()] == 0).any() and (w[mask.bool()] > 1).any()
    lp = log_prob.clone().requires_grad_(True)
    loss, metrics = get_policy_loss_fn("bypass_mode")(
        old_log_prob=old_log_prob, log_prob=lp, advantages=advantages, response_mask=mask,
        loss_agg_mode="token-mean", config=_verl_config(block, "bypass_mode", actor_config))
    loss.backward()
    expected = (-advantages * w * log_prob * kept).sum() / kept.sum()
    torch.testing.assert_close(loss.detach(), expected, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(lp.grad, -advantages * w * kept / kept.sum(), rtol=1e-12, atol=1e-14)
    if name in ("tis", "pg"):  # the project's own PG and TIS are that same loss where the settings coincide
        lp2 = log_prob.clone().requires_grad_(True)
        ours, _ = get_policy_loss_fn(spec.loss_mode)(
            old_log_prob=old_log_prob, log_prob=lp2, advantages=advantages, response_mask=mask,
            loss_agg_mode="token-mean", config=_verl_config(block, spec.loss_mode, actor_config))
        ours.backward()
        torch.testing.assert_close(ours.detach(), loss.detach(), rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(lp2.grad, lp.grad, rtol=1e-12, atol=1e-14)


# -- the centering term with an IS rule: verl main's formula ----------------------------------------
def _verl_main_correction(train, sampler, rollout_is, threshold, eps=1e-6):
    """verl main c6236f51's centering term, written from its formula in float64: ``w`` by
    ``score_centering_weight_fn`` (1; ``min(r, upper)``; ``r 1[lower <= r <= upper]``), then
    ``rho = max(1-Q, eps) / max(1-P, eps)``, ``alpha = rho w(1/rho)``, ``sum_H sg(q w(p/q) - alpha p) log p``."""
    if rollout_is is None:
        weight = torch.ones_like
    else:
        upper, lower = _parse_rollout_is_threshold(threshold)
        weight = (lambda r: r.clamp(max=upper)) if lower is None else \
            (lambda r: torch.where((r >= lower) & (r <= upper), r, torch.zeros_like(r)))
    with torch.no_grad():
        p, q = train.exp(), sampler.exp()
        rho = (1 - q.sum(-1)).clamp_min(eps) / (1 - p.sum(-1)).clamp_min(eps)
        alpha = rho * weight(1.0 / rho)
        residual = q * weight((train - sampler).exp()) - alpha.unsqueeze(-1) * p
    return (residual * train).sum(-1)


def _heads(seed: int, rows: int = 64, vocab: int = 50, k: int = 12):
    gen = torch.Generator().manual_seed(seed)
    train_logits = torch.randn(rows, vocab, generator=gen, dtype=torch.float64) * 2
    sampler_logits = train_logits + 0.8 * torch.randn(rows, vocab, generator=gen, dtype=torch.float64)
    ids = torch.argsort(sampler_logits, dim=-1, descending=True)[:, :k]
    train_head = torch.log_softmax(train_logits, -1).gather(-1, ids)
    sampler_head = torch.log_softmax(sampler_logits, -1).gather(-1, ids)
    return train_head, sampler_head


@pytest.mark.parametrize(("rollout_is", "threshold", "cap", "band"), [
    (None, 2.0, None, None),
    ("token", 2.0, 2.0, None),
    ("token", "0.5_5.0", None, (0.5, 5.0)),
    ("token", "0.8_1.25", None, (0.8, 1.25)),
])
def test_centering_term_equals_verl_mains_formula_in_float64(rollout_is, threshold, cap, band):
    for seed in range(3):
        train_head, sampler_head = _heads(seed)
        ours_in = train_head.clone().requires_grad_(True)
        theirs_in = train_head.clone().requires_grad_(True)
        ours, _, _ = centering_term(ours_in, sampler_head, is_cap=cap, is_band=band)
        theirs = _verl_main_correction(theirs_in, sampler_head, rollout_is, threshold)
        torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-13)
        g = torch.randn(ours.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        (ours * g).sum().backward()
        (theirs * g).sum().backward()
        torch.testing.assert_close(ours_in.grad, theirs_in.grad, rtol=1e-12, atol=1e-13)
    if band is not None:  # the band bites: some head tokens are out, some in
        ratio = (train_head - sampler_head).exp()
        assert ((ratio < band[0]) | (ratio > band[1])).any() and ((ratio >= band[0]) & (ratio <= band[1])).any()


def test_sc_corrected_loss_with_a_number_is_sc_tis_and_with_a_band_weights_by_icepop(actor_config):
    old_log_prob, log_prob, advantages, mask = _batch(seed=3)
    correction = 0.1 * torch.randn(log_prob.shape, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    results = {}
    for loss_mode, threshold in (("ablation_sc_tis", 2.0), ("ablation_sc_corrected", 2.0),
                                 ("ablation_sc_corrected", "0.5_5.0")):
        lp, c = log_prob.clone().requires_grad_(True), correction.clone().requires_grad_(True)
        config = _verl_config({"rollout_is": "token", "rollout_is_threshold": threshold}, loss_mode, actor_config)
        loss, metrics = get_policy_loss_fn(loss_mode)(
            old_log_prob=old_log_prob, log_prob=lp, advantages=advantages, response_mask=mask,
            loss_agg_mode="token-mean", config=config, sc_correction=c)
        loss.backward()
        results[(loss_mode, threshold)] = (loss.detach(), lp.grad, c.grad, metrics)
    a, b = results[("ablation_sc_tis", 2.0)], results[("ablation_sc_corrected", 2.0)]
    for x, y in zip(a[:3], b[:3], strict=True):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-14)
    loss, grad, cgrad, metrics = results[("ablation_sc_corrected", "0.5_5.0")]
    r = (log_prob - old_log_prob).exp()
    w = torch.where((r >= 0.5) & (r <= 5.0), r, torch.zeros_like(r)) * mask
    assert (w[mask.bool()] == 0).any()
    torch.testing.assert_close(loss, (-advantages * (w * log_prob - correction) * mask).sum() / mask.sum(),
                               rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(grad, -advantages * w * mask / mask.sum(), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(cgrad, advantages * mask / mask.sum(), rtol=1e-12, atol=1e-14)
    assert "rollout_corr/rollout_is_mean" in metrics and "actor/sc_correction" in metrics


def test_registry_registers_every_arms_loss_under_its_loss_mode():
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

    from ablations import losses, registry

    assert registry.ARM_NAMES[:4] == ("ablation_pg", "ablation_tis", "ablation_sc", "ablation_sc_tis")
    assert POLICY_LOSS_REGISTRY["ablation_sc_corrected"] is losses.policy_loss_sc_corrected
    assert {a.loss_mode for a in all_arms().values()} <= set(POLICY_LOSS_REGISTRY)
