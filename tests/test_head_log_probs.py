"""Property 8: the chunked head gather equals the naive gather in value and gradient, in bounded fp32."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ablations.score_centering import head_log_probs


def naive(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, ids)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk_rows", [1, 7, 64])
def test_value_and_gradient_match_naive(dtype, chunk_rows):
    gen = torch.Generator().manual_seed(0)
    n, vocab, k = 37, 301, 16
    base = (3 * torch.randn(n, vocab, generator=gen)).to(dtype)
    ids = torch.randint(0, vocab, (n, k), generator=gen)
    weights = torch.randn(n, k, generator=gen)

    a = base.clone().requires_grad_(True)
    out = head_log_probs(a, ids, chunk_rows=chunk_rows)
    (out * weights).sum().backward()

    b = base.clone().requires_grad_(True)
    ref = naive(b, ids)
    (ref * weights).sum().backward()

    assert out.dtype == torch.float32
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)
    assert a.grad.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 1e-2  # bf16 gradient storage rounds to ~3 significant digits
    torch.testing.assert_close(a.grad.float(), b.grad.float(), atol=tol, rtol=tol)


def test_leading_shape_and_duplicate_ids():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 5, 11, generator=gen, requires_grad=True)
    ids = torch.tensor([[0, 0, 3]]).expand(2, 5, 3).contiguous()  # a repeated id accumulates gradient
    out = head_log_probs(logits, ids, chunk_rows=3)
    assert out.shape == (2, 5, 3)
    out.sum().backward()
    ref_logits = logits.detach().clone().requires_grad_(True)
    naive(ref_logits, ids).sum().backward()
    torch.testing.assert_close(logits.grad, ref_logits.grad)


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match="leading shape"):
        head_log_probs(torch.zeros(3, 5), torch.zeros(4, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="chunk_rows"):
        head_log_probs(torch.zeros(3, 5), torch.zeros(3, 2, dtype=torch.long), chunk_rows=0)


class _LargestFloat32(TorchDispatchMode):
    """Records the largest fp32 tensor any op produces."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor) and t.dtype == torch.float32:
                self.largest = max(self.largest, t.numel())
        return out


def test_fp32_workspace_is_one_chunk_not_all_rows():
    n, vocab, k, chunk = 256, 512, 8, 16
    logits = torch.randn(n, vocab).to(torch.bfloat16).requires_grad_(True)
    ids = torch.randint(0, vocab, (n, k))
    with _LargestFloat32() as chunked:
        head_log_probs(logits, ids, chunk_rows=chunk).sum().backward()
    assert chunked.largest <= chunk * vocab

    logits.grad = None
    with _LargestFloat32() as full:
        naive(logits, ids).sum().backward()
    assert full.largest >= n * vocab  # the naive gather does materialise N x V in fp32
