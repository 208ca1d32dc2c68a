"""The project's policy losses, registered in verl's ``POLICY_LOSS_REGISTRY`` by ``ablations.registry``
under the ``loss_mode`` of the arms that name them (``ablations/arms/``).

The per-token math is :func:`ablations.token_loss.token_loss` (torch only); here each loss reads its
inputs from verl's call, and minimises the token mean (``loss_agg_mode``, via verl's ``agg_loss``
with ``config.global_batch_info``) of

    l_t = -A * ( sg(w_a) * log p(a) - C_t )

| loss                  | w_a                                    | C_t                                       |
|-----------------------|----------------------------------------|-------------------------------------------|
| ablation_pg           | 1                                      | 0                                         |
| ablation_tis          | min(p(a)/q(a), cap)                    | 0                                         |
| ablation_sc           | 1                                      | keyword ``sc_correction`` (SC)            |
| ablation_sc_tis       | min(p(a)/q(a), cap)                    | keyword ``sc_correction`` (SC+TIS)        |
| ablation_sc_corrected | verl's rollout-correction weight, mask | keyword ``sc_correction`` (its IS rule)   |

``C_t`` comes from :func:`ablations.score_centering.centering_term` computed by the caller (it
needs the trainer's logits at the sampler's head ids, which a policy loss never sees), as the
keyword ``sc_correction`` or through :func:`ablations.token_loss.supplying_correction`. The TIS
cap is verl's own ``policy_loss.rollout_correction.rollout_is_threshold`` (default 2.0).
``ablation_sc_corrected`` takes the sampled token's weight and rejection mask from verl's
``compute_rollout_correction_and_rejection_mask`` with the block's four keys, exactly as verl's
``bypass_mode`` loss does, and subtracts ``C_t``: with ``rollout_is=token`` and a number it is SC+TIS,
with a ``lower_upper`` band it is SC with IcePop's weight.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from verl.trainer.ppo.core_algos import agg_loss

from ablations.token_loss import resolve_correction, token_loss


def tis_cap(config: Any) -> float:
    """The TIS cap: ``config.policy_loss.rollout_correction.rollout_is_threshold`` as a float > 0.

    ``policy_loss`` is verl's ``PolicyLossConfig``; its ``rollout_correction`` has no dataclass
    behind it on the actor side, so after verl's ``omega_conf_to_dataclass`` it arrives as a plain
    mapping (a ``RolloutCorrectionConfig`` where a caller built one by hand). Both are read.
    """
    correction = config_value(config_value(config, "policy_loss"), "rollout_correction")
    raw = config_value(correction, "rollout_is_threshold")
    if raw is None:
        raise ValueError(
            "TIS arms read the cap from actor config policy_loss.rollout_correction.rollout_is_threshold, "
            "which is missing"
        )
    return parse_tis_cap(raw)


def config_value(node: Any, key: str, default: Any = None) -> Any:
    """``node[key]`` for a mapping, ``node.key`` for an object (verl's config dataclasses); ``default``
    where absent or where ``node`` is None."""
    if node is None:
        return default
    if isinstance(node, Mapping):
        return node.get(key, default)
    return getattr(node, key, default)


def parse_tis_cap(raw: Any) -> float:
    """``rollout_is_threshold`` as a TIS cap: a single finite number > 0 (not an IcePop band)."""
    try:
        cap = float(raw)
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"policy_loss.rollout_correction.rollout_is_threshold={raw!r}: TIS arms need a single "
            "upper cap (a number > 0), not an IcePop lower_upper band"
        ) from err
    if not (cap > 0 and math.isfinite(cap)):
        raise ValueError(f"policy_loss.rollout_correction.rollout_is_threshold must be a finite cap > 0, got {raw!r}")
    return cap


def _reinforce(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str,
    config: Any,
    cap: float | None,
    correction: torch.Tensor | None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The token loss of :func:`ablations.token_loss.token_loss` aggregated by verl's ``agg_loss``, plus metrics."""
    if config is None:
        raise ValueError("the ablation losses need verl's actor config (for global_batch_info and the TIS cap)")
    loss_mat, metrics = token_loss(old_log_prob, log_prob, advantages, response_mask, cap, correction)
    loss = agg_loss(
        loss_mat=loss_mat, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **config.global_batch_info
    )
    metrics["actor/pg_loss"] = float(loss.detach())
    return loss, metrics


def policy_loss_pg(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PG: ``l_t = -A log p(a)`` (REINFORCE, GRPO mean-centred A, no clipping)."""
    return _reinforce(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, None, None)


def policy_loss_tis(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """TIS: ``l_t = -A sg(min(p(a)/q(a), cap)) log p(a)``, token-level truncated IS, cap 2 by default."""
    cap = tis_cap(config)
    return _reinforce(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, cap, None)


def policy_loss_sc(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    sc_correction: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """SC: ``l_t = -A (log p(a) - C_t)``, ``C_t = sum_{v in H} sg(q(v) - rho p(v)) log p(v)``."""
    correction = resolve_correction("ablation_sc", log_prob, sc_correction)
    return _reinforce(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, None, correction)


def policy_loss_sc_tis(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    sc_correction: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """SC+TIS: ``l_t = -A (sg(min(r_a, c)) log p(a) - C_t)``,
    ``C_t = sum_{v in H} sg(min(p(v), c q(v)) - min(1, c rho) p(v)) log p(v)`` (computed with the same cap).
    """
    cap = tis_cap(config)
    correction = resolve_correction("ablation_sc_tis", log_prob, sc_correction)
    return _reinforce(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, cap, correction)


def policy_loss_sc_corrected(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    sc_correction: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """SC with verl's rollout correction: ``l_t = -A (sg(w_t) log p(a) - C_t)`` over the tokens verl's
    rejection mask keeps, token mean; ``w_t`` and the mask from verl's
    ``compute_rollout_correction_and_rejection_mask`` on ``policy_loss.rollout_correction`` (as verl's
    ``bypass_mode`` computes them; ``w_t = 1`` without ``rollout_is``). ``rollout_is_weights`` is ignored,
    as ``bypass_mode`` ignores it."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask

    if config is None:
        raise ValueError("ablation_sc_corrected needs verl's actor config (rollout_correction, global_batch_info)")
    rc = config_value(config_value(config, "policy_loss"), "rollout_correction")
    correction = resolve_correction("ablation_sc_corrected", log_prob, sc_correction)
    with torch.no_grad():
        weights_proto, kept, rc_metrics = compute_rollout_correction_and_rejection_mask(
            old_log_prob=log_prob, rollout_log_prob=old_log_prob, response_mask=response_mask,
            rollout_is=config_value(rc, "rollout_is"),
            rollout_is_threshold=config_value(rc, "rollout_is_threshold", 2.0),
            rollout_is_batch_normalize=config_value(rc, "rollout_is_batch_normalize", False),
            rollout_rs=config_value(rc, "rollout_rs"), rollout_rs_threshold=config_value(rc, "rollout_rs_threshold"))
    weights = None if weights_proto is None else weights_proto.batch["rollout_is_weights"]
    loss_mat, metrics = token_loss(old_log_prob, log_prob, advantages, kept, None, correction, weights=weights)
    loss = agg_loss(loss_mat=loss_mat, loss_mask=kept, loss_agg_mode=loss_agg_mode, **config.global_batch_info)
    metrics.update(rc_metrics)
    metrics["actor/pg_loss"] = float(loss.detach())
    return loss, metrics
