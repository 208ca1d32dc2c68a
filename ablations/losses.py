"""The four policy-loss arms, registered in verl's ``POLICY_LOSS_REGISTRY``.

The per-token math is :func:`ablations.token_loss.token_loss` (torch only); here each arm reads its
inputs from verl's call, and minimises the token mean (``loss_agg_mode``, via verl's ``agg_loss``
with ``config.global_batch_info``) of

    l_t = -A * ( sg(w_a) * log p(a) - C_t )

| arm            | w_a                  | C_t                                            |
|----------------|----------------------|------------------------------------------------|
| ablation_pg    | 1                    | 0                                              |
| ablation_tis   | min(p(a)/q(a), cap)  | 0                                              |
| ablation_sc    | 1                    | keyword ``sc_correction`` (SC centering term)  |
| ablation_sc_tis| min(p(a)/q(a), cap)  | keyword ``sc_correction`` (SC+TIS centering)   |

``C_t`` comes from :func:`ablations.score_centering.centering_term` computed by the caller (it
needs the trainer's logits at the sampler's head ids, which a policy loss never sees), as the
keyword ``sc_correction`` or through :func:`ablations.token_loss.supplying_correction`. The TIS
cap is verl's own ``policy_loss.rollout_correction.rollout_is_threshold`` (default 2.0).

Adding an arm: one function decorated with :func:`arm` here (declaring what it reads: the TIS cap,
the ``sc_correction`` term), and one ``conf/method/*.yaml`` (the arm spec, ``runners.config.schema.MethodConfig``:
its ``tis_cap`` and ``score_centering`` must fit the declaration; ``runners.config.config_checks.check_arm``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from verl.trainer.ppo.core_algos import agg_loss, register_policy_loss

from ablations.token_loss import resolve_correction, token_loss

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
    correction = resolve_correction("ablation_sc", log_prob, sc_correction)
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
    correction = resolve_correction("ablation_sc_tis", log_prob, sc_correction)
    return _reinforce(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, cap, correction)
