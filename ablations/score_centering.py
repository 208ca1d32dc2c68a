"""Score-centering head math (the derivation is in ``docs/score_centering.md``).

Two pieces:

* :func:`head_log_probs` — the trainer's full-vocabulary-normalised fp32 log-probs at the
  sampler's top-k ids, ``log_softmax(logits.float()).gather(-1, ids)``, computed chunk by chunk
  so that neither forward nor backward materialises an ``N x V`` fp32 tensor.
* :func:`centering_term` — the per-token correction ``C_t`` of the SC and SC+TIS arms,

      SC:      C = sum_{v in H} sg(q(v) - rho p(v)) log p(v)
      SC+TIS:  C = sum_{v in H} sg(min(p(v), c q(v)) - min(1, c rho) p(v)) log p(v)

  with ``rho = (1 - Q) / (1 - P)`` (both tail masses floored at ``eps``, as verl 8718ca30 does).
  Gradient flows only through the trainer's head log-probs; every sampler quantity, ``p`` inside
  the coefficients and ``rho`` are detached.
"""

from __future__ import annotations

import torch


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp32 for bf16/fp16/fp32 inputs; fp64 inputs stay fp64 (used by exact tests)."""
    return torch.promote_types(dtype, torch.float32)


class _ChunkedHeadLogProbs(torch.autograd.Function):
    """``log_softmax(x.float()).gather(-1, ids)`` with an fp32 workspace of one ``chunk x V`` block.

    Forward keeps only the per-row log-normaliser ``lse`` (N floats). Backward recomputes
    ``softmax = exp(x - lse)`` per chunk: ``d x = scatter(g) - softmax * sum_j g_j``.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, ids: torch.Tensor, chunk_rows: int) -> torch.Tensor:
        n = logits.shape[0]
        dtype = _compute_dtype(logits.dtype)
        out = torch.empty(ids.shape, dtype=dtype, device=logits.device)
        lse = torch.empty(n, dtype=dtype, device=logits.device)
        for start in range(0, n, chunk_rows):
            rows = slice(start, start + chunk_rows)
            work = logits[rows].to(dtype, copy=True)  # the one chunk x V fp32 block
            row_max = work.amax(dim=-1, keepdim=True)
            picked = work.gather(-1, ids[rows])
            work.sub_(row_max).exp_()
            chunk_lse = row_max.squeeze(-1) + work.sum(dim=-1).log()
            lse[rows] = chunk_lse
            out[rows] = picked - chunk_lse.unsqueeze(-1)
            del work
        ctx.save_for_backward(logits, ids, lse)
        ctx.chunk_rows = chunk_rows
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        logits, ids, lse = ctx.saved_tensors
        chunk_rows = ctx.chunk_rows
        grad_logits = torch.empty_like(logits)
        grad_out = grad_out.to(lse.dtype)
        for start in range(0, logits.shape[0], chunk_rows):
            rows = slice(start, start + chunk_rows)
            g = grad_out[rows]
            work = logits[rows].to(lse.dtype, copy=True)
            work.sub_(lse[rows].unsqueeze(-1)).exp_()  # softmax of the chunk
            work.mul_(-g.sum(dim=-1, keepdim=True))
            work.scatter_add_(-1, ids[rows], g)
            grad_logits[rows].copy_(work)  # casts in place: no second chunk-sized temporary
            del work
        return grad_logits, None, None


def head_log_probs(logits: torch.Tensor, ids: torch.Tensor, chunk_rows: int = 1024) -> torch.Tensor:
    """Full-vocabulary-normalised fp32 log-probs of ``logits`` at ``ids``, with gradient.

    Args:
        logits: ``(..., V)`` trainer logits, any float dtype.
        ids: ``(..., k)`` integer token ids (same leading shape).
        chunk_rows: rows processed per block; the extra fp32 workspace in forward and backward
            is one ``chunk_rows x V`` block, independent of the number of rows.

    Returns:
        ``(..., k)`` fp32 tensor equal to ``log_softmax(logits.float(), -1).gather(-1, ids)``
        (fp64 when ``logits`` are fp64).
    """
    if logits.shape[:-1] != ids.shape[:-1]:
        raise ValueError(f"logits {tuple(logits.shape)} and ids {tuple(ids.shape)} differ in leading shape")
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    lead = ids.shape[:-1]
    flat_logits = logits.reshape(-1, logits.shape[-1])
    flat_ids = ids.reshape(-1, ids.shape[-1]).long()
    out = _ChunkedHeadLogProbs.apply(flat_logits, flat_ids, chunk_rows)
    return out.reshape(*lead, ids.shape[-1])


def centering_term(
    train_head_log_probs: torch.Tensor,
    sampler_head_log_probs: torch.Tensor,
    is_cap: float | None = None,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token score-centering correction ``C_t`` and the head masses.

    ``C = sum_{v in H} sg(q(v) f(p(v)/q(v)) - alpha p(v)) log p(v)`` with ``f = 1`` (SC) or
    ``f(r) = min(r, c)`` (SC+TIS: ``q f(p/q) = min(p, c q)``), ``alpha = rho f(1/rho)`` and
    ``rho = max(1 - Q, eps) / max(1 - P, eps)``.

    Edge cases follow verl 8718ca30 (``score_centering_correction``), so both paths give the same
    gradient everywhere: both tail masses are floored at ``eps`` and nothing else is special-cased.
    Where the head covers the whole vocabulary, ``sum_{v in H} p(v) grad log p(v) = 0``, so
    ``alpha`` (however ill-conditioned) drops out of the gradient, which is then the exact
    full-vocabulary centering; only the *value* of ``C`` is not meaningful there. A rounded
    ``Q > 1`` floors the sampler tail at ``eps`` (no error), as in verl.

    Args:
        train_head_log_probs: ``(..., k)`` trainer log-probs ``log p(v)`` at the sampler's head
            ids (full-vocabulary normalised; gradient flows through these).
        sampler_head_log_probs: ``(..., k)`` sampler log-probs ``log q(v)`` at the same ids
            (full-vocabulary normalised; ``-inf`` entries carry zero mass; detached).
        is_cap: ``None`` for SC; the TIS cap ``c`` (2.0 in the reference) for SC+TIS.
        eps: floor of both tail masses when forming ``rho``.

    Returns:
        ``(C, Q, P)``, each of shape ``(...)``: the correction (differentiable, fp32 or fp64 even
        under autocast), the sampler's head mass and the trainer's head mass (both detached).
    """
    if train_head_log_probs.shape != sampler_head_log_probs.shape:
        raise ValueError(
            f"train head {tuple(train_head_log_probs.shape)} and sampler head "
            f"{tuple(sampler_head_log_probs.shape)} differ in shape"
        )
    if is_cap is not None and not is_cap > 0:
        raise ValueError(f"is_cap must be > 0 or None, got {is_cap}")
    log_p = train_head_log_probs.to(_compute_dtype(train_head_log_probs.dtype))
    with torch.no_grad():
        q = sampler_head_log_probs.detach().to(log_p.dtype).exp()  # exp(-inf) = 0
        p = log_p.detach().exp()
        sampler_mass = q.sum(dim=-1)
        train_mass = p.sum(dim=-1)
        rho = (1.0 - sampler_mass).clamp_min(eps) / (1.0 - train_mass).clamp_min(eps)
        if is_cap is None:
            coef = q  # head coefficient q(v); q is not needed afterwards, so it is updated in place
            alpha = rho
        else:
            coef = torch.minimum(p, q.mul_(is_cap))  # q min(p/q, c) = min(p, c q)
            alpha = torch.clamp(is_cap * rho, max=1.0)  # rho min(1/rho, c)
        coef.addcmul_(p, alpha.unsqueeze(-1), value=-1.0)  # coef - alpha p
    # An elementwise product and a sum: neither is on autocast's lower-precision list (a fused
    # vecdot/matmul is, and verl's engine runs this inside autocast), so C stays in log_p's dtype.
    correction = (coef * log_p).sum(dim=-1)
    return correction, sampler_mass, train_mass
