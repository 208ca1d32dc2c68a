"""The four policy-loss arms, registered in verl's ``POLICY_LOSS_REGISTRY``.

Bypass convention: ``old_log_prob`` is the *sampler's* log-prob of the sampled token, so the
token ratio ``p(a)/q(a) = exp(log_prob - old_log_prob)`` covers staleness and numerics
mismatch at once. Every arm minimises the token mean (``loss_agg_mode``, via verl's
``agg_loss`` with ``config.global_batch_info``) of

    l_t = -A * ( sg(w_a) * log p(a) - C_t )

| arm            | w_a                  | C_t                                            |
|----------------|----------------------|------------------------------------------------|
| ablation_pg    | 1                    | 0                                              |
| ablation_tis   | min(p(a)/q(a), cap)  | 0                                              |
| ablation_sc    | 1                    | keyword ``sc_correction`` (SC centering term)  |
| ablation_sc_tis| min(p(a)/q(a), cap)  | keyword ``sc_correction`` (SC+TIS centering)   |

``C_t`` comes from :func:`ablations.score_centering.centering_term` computed by the caller (it
needs the trainer's logits at the sampler's head ids, which a policy loss never sees). The TIS
cap is verl's own ``policy_loss.rollout_correction.rollout_is_threshold`` (default 2.0).

Adding an arm: one function decorated with :func:`arm` here (declaring what it reads: the TIS cap,
the ``sc_correction`` term), and one ``conf/method/*.yaml`` (the arm spec, ``runners.schema.MethodConfig``:
its ``tis_cap`` and ``score_centering`` must fit the declaration; ``runners.validate.check_arm``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from verl.trainer.ppo.core_algos import agg_loss, register_policy_loss

#: Names of the arms, in registration order (filled by :func:`arm`).
ARM_NAMES: list[str] = []


@dataclass(frozen=True)
class ArmLoss:
    """What a registered arm loss reads: the TIS cap (``tis``), the ``sc_correction`` term (``sc``)."""

    name: str
    tis: bool
    sc: bool


#: The declaration of every arm loss, by loss name (filled by :func:`arm`).
ARM_LOSSES: dict[str, ArmLoss] = {}


def arm(name: str, *, tis: bool = False, sc: bool = False) -> Callable:
    """Register ``fn`` in verl's policy-loss registry under ``name``, declaring what it reads.

    ``tis``: it weights by ``min(p/q, cap)`` with the cap of the actor config (the arm's yaml needs
    ``tis_cap``); ``sc``: it needs the keyword ``sc_correction`` (the yaml needs ``score_centering``).
    """

    def decorator(fn: Callable) -> Callable:
        register_policy_loss(name)(fn)
        if name not in ARM_NAMES:
            ARM_NAMES.append(name)
        ARM_LOSSES[name] = ArmLoss(name=name, tis=tis, sc=sc)
        return fn

    return decorator


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


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean over ``mask``; values at masked-out positions (even inf/nan) are ignored."""
    return float(torch.where(mask, x, 0.0).sum() / mask.sum().clamp_min(1))


def _require_correction(name: str, log_prob: torch.Tensor, sc_correction: torch.Tensor | None) -> torch.Tensor:
    if sc_correction is None:
        raise ValueError(
            f"{name} needs the keyword argument sc_correction: the per-token score-centering term C_t "
            "(shape of log_prob, with gradient), from ablations.score_centering.centering_term over the "
            "sampler's top-k head; in verl this needs score centering enabled (verl >= 8718ca30)"
        )
    if sc_correction.shape != log_prob.shape:
        raise ValueError(
            f"{name}: sc_correction has shape {tuple(sc_correction.shape)}, log_prob {tuple(log_prob.shape)}"
        )
    return sc_correction


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
    """Token loss ``-A (sg(w_a) log p(a) - C)`` aggregated by verl's ``agg_loss``, plus metrics."""
    if config is None:
        raise ValueError("the ablation losses need verl's actor config (for global_batch_info and the TIS cap)")
    mask = response_mask.bool()
    metrics: dict[str, float] = {}
    with torch.no_grad():
        log_ratio = log_prob.detach() - old_log_prob.detach()
        metrics["actor/ppo_kl"] = _masked_mean(-log_ratio, mask)  # k1 estimate of KL(q || p)
    score = log_prob
    if cap is not None:
        with torch.no_grad():
            # exp(min(log r, log cap)) = min(r, cap), without overflow for large ratios
            weight = torch.exp(torch.clamp(log_ratio, max=math.log(cap)))
            metrics["actor/tis_clip_fraction"] = _masked_mean((log_ratio > math.log(cap)).float(), mask)
            metrics["actor/tis_weight_mean"] = _masked_mean(weight, mask)
        score = weight * log_prob
    if correction is not None:
        score = score - correction
        metrics["actor/sc_correction"] = _masked_mean(correction.detach(), mask)
    loss_mat = -advantages * score
    loss = agg_loss(
        loss_mat=loss_mat, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **config.global_batch_info
    )
    metrics["actor/pg_loss"] = float(loss.detach())
    return loss, metrics


@arm("ablation_pg")
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


@arm("ablation_tis", tis=True)
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


@arm("ablation_sc", sc=True)
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
    correction = _require_correction("ablation_sc", log_prob, sc_correction)
    return _reinforce(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, None, correction)


@arm("ablation_sc_tis", tis=True, sc=True)
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
    correction = _require_correction("ablation_sc_tis", log_prob, sc_correction)
    return _reinforce(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, cap, correction)
