"""Score-centering head math (the derivation is in ``docs/score_centering.md``). Imports torch only.

Two pieces:

* :func:`head_log_probs` — the trainer's full-vocabulary-normalised fp32 log-probs at the
  sampler's top-k ids, ``log_softmax(logits.float()).gather(-1, ids)``, computed chunk by chunk
  so that neither forward nor backward materialises an ``N x V`` fp32 tensor;
  :func:`head_log_probs_with_tail` also returns ``log(1 - P)``, the trainer's tail mass outside the
  head, summed over the tail itself.
* :func:`centering_term` — the per-token correction ``C_t`` of the SC and SC+TIS arms,

      SC:      C = sum_{v in H} sg(q(v) - rho p(v)) log p(v)
      SC+TIS:  C = sum_{v in H} sg(min(p(v), c q(v)) - min(1, c rho) p(v)) log p(v)
      SC+IcePop (band [l, u]):
               C = sum_{v in H} sg(p(v) 1[l <= p(v)/q(v) <= u] - 1[l <= 1/rho <= u] p(v)) log p(v)

  all three ``sum_H sg(q w(p/q) - alpha p) log p`` with ``alpha = rho w(1/rho)``, the head weight of
  verl main's ``score_centering_correction`` (c6236f51) for ``w = 1``, ``min(r, c)`` and ``r 1[l <= r <= u]``.

  with ``rho = (1 - Q) / (1 - P)`` (both tail masses floored at ``eps``, as verl 8718ca30 does).
  Gradient flows only through the trainer's head log-probs; every sampler quantity, ``p`` inside
  the coefficients and ``rho`` are detached.

Conditioning (what makes the logged ``C`` mean something where the head covers nearly everything):
a head log-prob is ``(x - max) - log sum exp(x - max)``, never ``x - lse`` with ``lse = max + log
sum``: rounding ``lse`` at ``|lse| = 30`` shifts every head log-prob of a row by ~1e-6 together, and
``rho`` divides that by the trainer's tail. The trainer's tail is summed over the tokens outside the
head, not formed as ``1 - P``; the sampler's tail ``1 - Q`` is summed in float64 from its head.

Guard: the backward recomputes the softmax from the logits it saved. If something overwrote them
between forward and backward (flash-attn's cross-entropy with ``inplace_backward=True`` writes its
gradient into the logits, and autograd runs its backward first), the recomputed rows no longer sum
to 1 and :class:`SavedLogitsOverwritten` is raised instead of returning a wrong gradient.
"""

from __future__ import annotations

import torch

#: How far a recomputed softmax row may sum from 1 before the saved logits count as overwritten.
#: A row of V fp32 terms sums to 1 within ~log2(V) ulps; an overwrite moves it by orders of magnitude.
MASS_TOLERANCE = 1e-3


class SavedLogitsOverwritten(RuntimeError):
    """The logits saved by :func:`head_log_probs` changed between its forward and backward."""


OVERWRITTEN_MESSAGE = (
    "the logits saved by the score-centering head gather were overwritten before its backward ran "
    "(recomputed softmax rows sum to {mass:.6g}, not 1): an in-place backward wrote into them, e.g. "
    "flash-attn's cross-entropy with inplace_backward=True, which verl's FSDP engine uses when entropy is "
    "not computed. Keep backend.actor.calculate_entropy=true for SC arms, or set VERL_DISABLE_FLASH_ATTN_CE=1."
)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp32 for bf16/fp16/fp32 inputs; fp64 inputs stay fp64 (used by exact tests)."""
    return torch.promote_types(dtype, torch.float32)


class _ChunkedHeadLogProbs(torch.autograd.Function):
    """``log_softmax(x.float()).gather(-1, ids)`` with an fp32 workspace of one ``chunk x V`` block,
    and optionally ``log(1 - P)`` per row (no gradient).

    Forward keeps per row only the max ``m`` and ``log_norm = log sum exp(x - m)`` (2N floats).
    Backward recomputes ``softmax = exp((x - m) - log_norm)`` per chunk, checks that each row sums to
    1 (the saved logits are intact), and returns ``d x = scatter(g) - softmax * sum_j g_j``.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, ids: torch.Tensor, chunk_rows: int, with_tail: bool):
        n = logits.shape[0]
        dtype = _compute_dtype(logits.dtype)
        out = torch.empty(ids.shape, dtype=dtype, device=logits.device)
        row_max = torch.empty(n, dtype=dtype, device=logits.device)
        log_norm = torch.empty(n, dtype=dtype, device=logits.device)
        log_tail = torch.empty(n if with_tail else 0, dtype=dtype, device=logits.device)
        for start in range(0, n, chunk_rows):
            rows = slice(start, start + chunk_rows)
            work = logits[rows].to(dtype, copy=True)  # the one chunk x V fp32 block
            chunk_max = work.amax(dim=-1, keepdim=True)
            work.sub_(chunk_max)  # shifted logits: exact near the max, so no common rounding shift
            picked = work.gather(-1, ids[rows])
            work.exp_()
            chunk_log_norm = work.sum(dim=-1).log()
            out[rows] = picked - chunk_log_norm.unsqueeze(-1)
            row_max[rows] = chunk_max.squeeze(-1)
            log_norm[rows] = chunk_log_norm
            if with_tail:  # the tail's own sum: 1 - P would cancel catastrophically where P -> 1
                work.scatter_(-1, ids[rows], 0.0)
                log_tail[rows] = work.sum(dim=-1).log() - chunk_log_norm
            del work
        ctx.save_for_backward(logits, ids, row_max, log_norm)
        ctx.chunk_rows = chunk_rows
        ctx.mark_non_differentiable(log_tail)
        return out, log_tail

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor, _grad_tail: torch.Tensor):
        logits, ids, row_max, log_norm = ctx.saved_tensors
        chunk_rows = ctx.chunk_rows
        grad_logits = torch.empty_like(logits)
        grad_out = grad_out.to(log_norm.dtype)
        for start in range(0, logits.shape[0], chunk_rows):
            rows = slice(start, start + chunk_rows)
            g = grad_out[rows]
            work = logits[rows].to(log_norm.dtype, copy=True)
            work.sub_(row_max[rows].unsqueeze(-1)).sub_(log_norm[rows].unsqueeze(-1)).exp_()  # softmax
            mass = work.sum(dim=-1)
            if bool(((mass - 1.0).abs() > MASS_TOLERANCE).any()):
                worst = mass[(mass - 1.0).abs().argmax()]
                raise SavedLogitsOverwritten(OVERWRITTEN_MESSAGE.format(mass=float(worst)))
            work.mul_(-g.sum(dim=-1, keepdim=True))
            work.scatter_add_(-1, ids[rows], g)
            grad_logits[rows].copy_(work)  # casts in place: no second chunk-sized temporary
            del work
        return grad_logits, None, None, None


def _gather(logits: torch.Tensor, ids: torch.Tensor, chunk_rows: int, with_tail: bool):
    if logits.shape[:-1] != ids.shape[:-1]:
        raise ValueError(f"logits {tuple(logits.shape)} and ids {tuple(ids.shape)} differ in leading shape")
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    lead = ids.shape[:-1]
    flat_logits = logits.reshape(-1, logits.shape[-1])
    flat_ids = ids.reshape(-1, ids.shape[-1]).long()
    out, log_tail = _ChunkedHeadLogProbs.apply(flat_logits, flat_ids, chunk_rows, with_tail)
    return out.reshape(*lead, ids.shape[-1]), log_tail.reshape(lead) if with_tail else None


def head_log_probs(logits: torch.Tensor, ids: torch.Tensor, chunk_rows: int = 1024) -> torch.Tensor:
    """Full-vocabulary-normalised fp32 log-probs of ``logits`` at ``ids``, with gradient.

    Args:
        logits: ``(..., V)`` trainer logits, any float dtype.
        ids: ``(..., k)`` integer token ids (same leading shape).
        chunk_rows: rows processed per block; the extra fp32 workspace in forward and backward
            is one ``chunk_rows x V`` block, independent of the number of rows.

    Returns:
        ``(..., k)`` fp32 tensor equal to ``log_softmax(logits.float(), -1).gather(-1, ids)``
        (fp64 when ``logits`` are fp64), each entry formed as ``(x - max) - log sum exp(x - max)``.

    Raises:
        SavedLogitsOverwritten: in backward, if ``logits`` were overwritten after the forward.
    """
    return _gather(logits, ids, chunk_rows, with_tail=False)[0]


def head_log_probs_with_tail(logits: torch.Tensor, ids: torch.Tensor, chunk_rows: int = 1024
                             ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`head_log_probs` and ``log(1 - P)``, the log of the trainer's mass outside the head.

    ``1 - P`` is ``sum_{v not in ids} exp(x_v - max) / sum_v exp(x_v - max)``, summed over the tail
    itself (the ids of a row must be distinct: the head is a set). Pass it to :func:`centering_term`
    as ``train_log_tail``. One extra pass over each chunk in the forward; the backward is unchanged.

    Returns:
        ``(head, log_tail)``: ``(..., k)`` with gradient, and ``(...)`` detached (``-inf`` where the
        head covers the whole vocabulary).
    """
    return _gather(logits, ids, chunk_rows, with_tail=True)


def centering_term(
    train_head_log_probs: torch.Tensor,
    sampler_head_log_probs: torch.Tensor,
    is_cap: float | None = None,
    eps: float = 1e-6,
    train_log_tail: torch.Tensor | None = None,
    is_band: tuple[float, float] | None = None,
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

    The tails are formed without cancellation: ``1 - Q`` as a float64 sum over the sampler's head,
    ``1 - P`` from ``train_log_tail`` (:func:`head_log_probs_with_tail`) when given, else as a
    float64 sum over the trainer's head log-probs.

    Args:
        train_head_log_probs: ``(..., k)`` trainer log-probs ``log p(v)`` at the sampler's head
            ids (full-vocabulary normalised; gradient flows through these).
        sampler_head_log_probs: ``(..., k)`` sampler log-probs ``log q(v)`` at the same ids
            (full-vocabulary normalised; ``-inf`` entries carry zero mass; detached).
        is_cap: ``None`` for SC; the TIS cap ``c`` (2.0 in the reference) for SC+TIS.
        is_band: IcePop's ``(lower, upper)`` for ``w(r) = r 1[lower <= r <= upper]`` (not with ``is_cap``):
            the head term is ``p`` where ``p/q`` lies in the band and 0 elsewhere (``q = 0`` included), and
            ``alpha = rho (1/rho)`` where ``1/rho`` lies in the band, else 0.
        eps: floor of both tail masses when forming ``rho``.
        train_log_tail: ``(...)`` ``log(1 - P)`` of the trainer, summed over the tail (optional).

    Returns:
        ``(C, Q, P)``, each of shape ``(...)``: the correction (differentiable, fp32 or fp64 even
        under autocast), the sampler's head mass and the trainer's head mass (both detached).
    """
    if train_head_log_probs.shape != sampler_head_log_probs.shape:
        raise ValueError(
            f"train head {tuple(train_head_log_probs.shape)} and sampler head "
            f"{tuple(sampler_head_log_probs.shape)} differ in shape"
        )
    if train_log_tail is not None and train_log_tail.shape != train_head_log_probs.shape[:-1]:
        raise ValueError(f"train_log_tail {tuple(train_log_tail.shape)} does not match the head's leading shape "
                         f"{tuple(train_head_log_probs.shape[:-1])}")
    if is_cap is not None and not is_cap > 0:
        raise ValueError(f"is_cap must be > 0 or None, got {is_cap}")
    if is_band is not None and (is_cap is not None or not 0 < is_band[0] <= is_band[1]):
        raise ValueError(f"is_band must be (lower, upper) with 0 < lower <= upper, without is_cap; got {is_band}, "
                         f"is_cap={is_cap}")
    log_p = train_head_log_probs.to(_compute_dtype(train_head_log_probs.dtype))
    with torch.no_grad():
        q = sampler_head_log_probs.detach().to(log_p.dtype).exp()  # exp(-inf) = 0
        p = log_p.detach().exp()
        sampler_tail = 1.0 - sampler_head_log_probs.detach().double().exp().sum(dim=-1)
        if train_log_tail is None:
            train_tail = 1.0 - log_p.detach().double().exp().sum(dim=-1)
        else:
            train_tail = train_log_tail.detach().double().exp()
        sampler_mass, train_mass = (1.0 - sampler_tail).to(log_p.dtype), (1.0 - train_tail).to(log_p.dtype)
        rho = (sampler_tail.clamp_min(eps) / train_tail.clamp_min(eps)).to(log_p.dtype)
        if is_band is not None:
            lower, upper = is_band
            ratio = (log_p.detach() - sampler_head_log_probs.detach().to(log_p.dtype)).exp()  # p/q; inf where q = 0
            coef = torch.where((ratio >= lower) & (ratio <= upper), p, torch.zeros_like(p))
            inverse = 1.0 / rho
            alpha = torch.where((inverse >= lower) & (inverse <= upper), rho * inverse, torch.zeros_like(rho))
        elif is_cap is None:
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
