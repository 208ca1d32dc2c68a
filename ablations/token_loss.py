"""The arms' per-token loss, torch only (verl's registration and aggregation: :mod:`ablations.losses`).

Bypass convention: ``old_log_prob`` is the *sampler's* log-prob of the sampled token, so the token
ratio ``p(a)/q(a) = exp(log_prob - old_log_prob)`` covers staleness and numerics mismatch at once.
Every arm's token loss is

    l_t = -A * ( sg(w_a) * log p(a) - C_t ),    w_a = 1 (PG, SC) or min(p(a)/q(a), cap) (TIS, SC+TIS),

with ``C_t = 0`` (PG, TIS) or the score-centering term of :func:`ablations.score_centering.centering_term`
(SC, SC+TIS). Where a trainer cannot pass ``C_t`` to the registered loss as a keyword (verl 0.9.1's
``ppo_loss`` passes a fixed set), it supplies it for the duration of the call with
:func:`supplying_correction`.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator

import torch

_SUPPLIED: contextvars.ContextVar[torch.Tensor | None] = contextvars.ContextVar("sc_correction", default=None)


@contextlib.contextmanager
def supplying_correction(correction: torch.Tensor) -> Iterator[None]:
    """Within the block, an SC arm called without ``sc_correction=`` uses ``correction`` (shape of log_prob)."""
    token = _SUPPLIED.set(correction)
    try:
        yield
    finally:
        _SUPPLIED.reset(token)


def resolve_correction(name: str, log_prob: torch.Tensor, sc_correction: torch.Tensor | None) -> torch.Tensor:
    """The arm's ``C_t``: the keyword, else the one supplied; exactly one of them, shaped as ``log_prob``."""
    supplied = _SUPPLIED.get()
    if sc_correction is not None and supplied is not None:
        raise ValueError(f"{name} got sc_correction both as a keyword and from supplying_correction")
    correction = sc_correction if sc_correction is not None else supplied
    if correction is None:
        raise ValueError(
            f"{name} needs the per-token score-centering term C_t (shape of log_prob, with gradient), from "
            "ablations.score_centering.centering_term over the sampler's top-k head: as the keyword sc_correction "
            "(verl 8718ca30) or through ablations.token_loss.supplying_correction (the project's head transport)"
        )
    if correction.shape != log_prob.shape:
        raise ValueError(f"{name}: sc_correction has shape {tuple(correction.shape)}, log_prob {tuple(log_prob.shape)}")
    return correction


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean over ``mask``; values at masked-out positions (even inf/nan) are ignored."""
    return float(torch.where(mask, x, 0.0).sum() / mask.sum().clamp_min(1))


def token_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    cap: float | None,
    correction: torch.Tensor | None,
    weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """``l_t = -A (sg(w_a) log p(a) - C_t)`` per token (not aggregated) and the arm's diagnostics.

    Args:
        old_log_prob, log_prob, advantages, response_mask: ``(B, T)``; ``log_prob`` carries the gradient.
        cap: the TIS cap (``w_a = min(p(a)/q(a), cap)``) or None (``w_a = 1``).
        correction: ``C_t`` or None.
        weights: a sampled-token weight computed elsewhere (verl's rollout correction, detached), used as
            ``w_a``; not together with ``cap``.

    Returns:
        the loss matrix and ``actor/ppo_kl`` (k1 estimate of KL(q || p)), with a cap
        ``actor/tis_clip_fraction`` and ``actor/tis_weight_mean``, with a correction ``actor/sc_correction``
        (masked means over ``response_mask``).
    """
    if cap is not None and weights is not None:
        raise ValueError("token_loss takes a TIS cap or precomputed weights, not both")
    mask = response_mask.bool()
    metrics: dict[str, float] = {}
    with torch.no_grad():
        log_ratio = log_prob.detach() - old_log_prob.detach()
        metrics["actor/ppo_kl"] = _masked_mean(-log_ratio, mask)
    score = log_prob
    if cap is not None:
        with torch.no_grad():
            # exp(min(log r, log cap)) = min(r, cap), without overflow for large ratios
            weight = torch.exp(torch.clamp(log_ratio, max=math.log(cap)))
            metrics["actor/tis_clip_fraction"] = _masked_mean((log_ratio > math.log(cap)).float(), mask)
            metrics["actor/tis_weight_mean"] = _masked_mean(weight, mask)
        score = weight * log_prob
    elif weights is not None:
        score = weights.detach() * log_prob
    if correction is not None:
        score = score - correction
        metrics["actor/sc_correction"] = _masked_mean(correction.detach(), mask)
    return -advantages * score, metrics
