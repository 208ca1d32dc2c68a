"""The logged correction is well-conditioned, and the head gather refuses logits overwritten in place.

Conditioning: fp32 against fp64 at Qwen3's vocabulary (151,936), k = 128, ``|lse|`` up to 40 and
trainer tails ``1 - P`` down to 1e-5 (docs/score_centering.md, "Precision of the logged correction").
In-place backward: a stand-in cross-entropy whose backward writes its gradient into the logits it
saved, as flash-attn's ``cross_entropy_loss(..., inplace_backward=True)`` does, run in verl's order
(the head gather first, the cross-entropy after it, so autograd runs the cross-entropy's backward first).
"""

from __future__ import annotations

import pytest
import torch

from ablations.score_centering import (
    SavedLogitsOverwritten,
    centering_term,
    head_log_probs_with_tail,
)

VOCAB, K = 151_936, 128


def qwen3_sized_case(tail: float, offset: float, rows: int = 4, seed: int = 0):
    """fp64 logits whose mass outside the first-k ids (shuffled over the vocabulary) is ``tail``,
    shifted by ``offset`` (so ``lse`` is about ``offset``); a sampler head perturbed from the
    trainer's with twice its tail, in fp32 (as a rollout engine returns it)."""
    gen = torch.Generator().manual_seed(seed)
    head = torch.randn(rows, K, generator=gen, dtype=torch.float64) * 2
    rest = torch.randn(rows, VOCAB - K, generator=gen, dtype=torch.float64)
    shift = (torch.log(torch.tensor(tail / (1 - tail), dtype=torch.float64))
             + torch.logsumexp(head, -1, keepdim=True) - torch.logsumexp(rest, -1, keepdim=True))
    perm = torch.randperm(VOCAB, generator=gen)
    logits = (torch.cat([head, rest + shift], -1) + offset)[:, perm]
    ids = torch.argsort(perm)[:K].expand(rows, K).contiguous()
    sampler = torch.cat([head + 0.3 * torch.randn(rows, K, generator=gen, dtype=torch.float64),
                         rest + shift + 0.69], -1)
    return logits, ids, torch.log_softmax(sampler, -1)[:, :K].float()


@pytest.mark.parametrize("cap", [None, 2.0])
@pytest.mark.parametrize("tail", [1e-1, 1e-3, 1e-4, 1e-5])
@pytest.mark.parametrize("offset", [0.0, 30.0, 40.0])
def test_fp32_correction_matches_fp64(tail, offset, cap):
    logits, ids, sampler = qwen3_sized_case(tail, offset)
    exact_head, exact_log_tail = head_log_probs_with_tail(logits, ids)
    exact, _, _ = centering_term(exact_head, sampler.double(), is_cap=cap, train_log_tail=exact_log_tail)
    head, log_tail = head_log_probs_with_tail(logits.float(), ids)
    got, _, _ = centering_term(head, sampler, is_cap=cap, train_log_tail=log_tail)
    assert got.dtype == torch.float32
    torch.testing.assert_close(log_tail.double(), exact_log_tail, rtol=0, atol=1e-5)  # 1 - P to 1e-5 relative
    # before the fix: 1e-2 relative at tail 1e-4 and |lse| 30, 15% at 1e-5
    torch.testing.assert_close(got.double(), exact, rtol=1e-5, atol=1e-7)


def test_fp32_gradient_matches_fp64():
    logits, ids, sampler = qwen3_sized_case(1e-4, 30.0, rows=2)
    grads = []
    for dtype in (torch.float64, torch.float32):
        z = logits.to(dtype).clone().requires_grad_(True)
        head, log_tail = head_log_probs_with_tail(z, ids)
        centering_term(head, sampler.to(dtype), train_log_tail=log_tail)[0].sum().backward()
        grads.append(z.grad.double())
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-7)


def test_tail_is_summed_over_the_tail():
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(5, 40, generator=gen, dtype=torch.float64) * 4
    ids = torch.stack([torch.randperm(40, generator=gen)[:6] for _ in range(5)])
    head, log_tail = head_log_probs_with_tail(logits, ids, chunk_rows=2)
    torch.testing.assert_close(head, torch.log_softmax(logits, -1).gather(-1, ids))
    torch.testing.assert_close(log_tail, torch.log1p(-head.exp().sum(-1)), rtol=1e-12, atol=1e-12)
    full, none_left = head_log_probs_with_tail(logits, torch.arange(40).expand(5, 40))
    assert torch.isneginf(none_left).all()
    c, _, p_mass = centering_term(full, full.detach(), train_log_tail=none_left)
    assert torch.isfinite(c).all() and torch.allclose(p_mass, torch.ones_like(p_mass))
    with pytest.raises(ValueError, match="train_log_tail"):
        centering_term(head, head.detach(), train_log_tail=log_tail[:2])


class InPlaceBackwardCrossEntropy(torch.autograd.Function):
    """``log p(label)`` whose backward writes its gradient into the logits it saved and returns that
    buffer as the gradient, as flash-attn's Triton cross-entropy does with ``inplace_backward=True``.
    It writes the storage directly (``.data``), so autograd's version counter does not see it."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor, inplace: bool) -> torch.Tensor:
        lse = torch.logsumexp(logits, -1)
        ctx.save_for_backward(logits, labels, lse)
        ctx.inplace = inplace
        return logits.gather(-1, labels[:, None]).squeeze(-1) - lse

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        logits, labels, lse = ctx.saved_tensors
        out = -torch.exp(logits - lse[:, None])
        out[torch.arange(len(labels)), labels] += 1.0
        out *= grad[:, None]
        if not ctx.inplace:
            return out, None, None
        logits.data.copy_(out)
        return logits, None, None


def _engine_step(inplace: bool):
    """verl's order in the FSDP engine: logits, the logits processor (head gather + correction),
    then the sampled tokens' log-probs; the loss adds both terms; returns the hidden states' gradient."""
    gen = torch.Generator().manual_seed(5)
    hidden = torch.randn(24, 16, generator=gen, requires_grad=True)
    weight = torch.randn(300, 16, generator=gen) * 0.5
    logits = hidden @ weight.T
    ids = torch.stack([torch.randperm(300, generator=gen)[:8] for _ in range(24)])
    sampler = torch.log_softmax(torch.randn(24, 300, generator=gen), -1).gather(-1, ids)
    labels = torch.randint(0, 300, (24,), generator=gen)
    head, log_tail = head_log_probs_with_tail(logits, ids)
    correction, _, _ = centering_term(head, sampler, train_log_tail=log_tail)
    log_prob = InPlaceBackwardCrossEntropy.apply(logits, labels, inplace)
    advantages = torch.randn(24, generator=gen)
    (-(advantages * (log_prob - correction)).mean()).backward()
    return hidden.grad


def test_in_place_cross_entropy_backward_is_refused():
    reference = _engine_step(inplace=False)
    assert torch.isfinite(reference).all() and reference.abs().sum() > 0
    with pytest.raises(SavedLogitsOverwritten, match="calculate_entropy"):
        _engine_step(inplace=True)  # before the guard: no error and the SC part of the gradient corrupted
