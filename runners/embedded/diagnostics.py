"""Per-step diagnostics of where score centering can act, logged for every arm (``diag/*``).

* ``diag/centering_grad_ratio``: ``||g_C|| / ||g_main||``, the norm of the centering term's
  parameter gradient relative to that of the sampled-token term, on the step's batch. ``g_main``
  is the gradient of ``-A sg(w_a) log p(a)`` (token mean), ``g_C`` that of ``+A C_t`` with the
  centering term of the arm (SC, SC+TIS) or, for PG and TIS, of the SC / SC+TIS arm with the same
  TIS cap (a counterfactual: what centering would have added to this update). So for SC vs PG on
  one batch it is ``||g_SC - g_PG|| / ||g_PG||``. ``diag/centering_grad_cos`` is the cosine of the
  two gradients (negative: the correction opposes the sampled-token update).
* ``diag/tail_mass_sampler`` and ``diag/tail_mass_trainer``: ``1 - Q`` and ``1 - P``, the
  probability outside the sampler's top-k head under each distribution (token means).
* ``diag/shared_context_fraction``: the share of response tokens whose context (prompt and
  response prefix) is the same for every response of the group. There the group-mean advantage
  sums to zero over the group, so the drift at that context cancels within the batch.

The gradient ratio and cosine cost one extra backward pass per micro-batch (``torch.autograd.grad``
of the centering term, which leaves ``.grad`` and hence the training update untouched), so they are
on only with ``backend.gradient_diagnostics=true`` (``+experiment=scratchpad`` sets it; the cost is
measured by ``benchmarks/arms/diagnostics_cost.py``, figures in docs/miniature.md). The other three are cheap
and always logged.
"""

from __future__ import annotations

import torch


def shared_context(response_ids: torch.Tensor, response_mask: torch.Tensor, n: int) -> torch.Tensor:
    """``(R, T)`` bool: token t of row r has a context shared by all ``n`` rows of its group.

    Rows are prompt-major (group g is rows ``g*n .. g*n+n-1``). Token 0's context is the prompt
    alone (shared); token t's is shared when every row of the group is alive at t and all agree
    on tokens ``0 .. t-1``.
    """
    rows, width = response_ids.shape
    if rows % n:
        raise ValueError(f"{rows} rows are not whole groups of {n}")
    ids = response_ids.view(rows // n, n, width)
    alive = response_mask.bool().view(rows // n, n, width)
    agree = (ids == ids[:, :1]).all(dim=1) & alive.all(dim=1)  # (G, T): token t equal across the group
    prefix_equal = torch.ones_like(agree)
    prefix_equal[:, 1:] = agree[:, :-1].cumprod(dim=1).bool()
    shared = prefix_equal & alive.all(dim=1)
    return shared.repeat_interleave(n, dim=0) & response_mask.bool()


class CenteringGradient:
    """Accumulates ``g_C`` over micro-batches without touching ``.grad``; see the module docstring."""

    def __init__(self, params: list[torch.nn.Parameter]):
        self.params = params
        self.total = [torch.zeros_like(p) for p in params]

    def add(self, loss_c: torch.Tensor) -> None:
        """Add the gradient of this micro-batch's centering loss (its graph is kept for the main backward)."""
        grads = torch.autograd.grad(loss_c, self.params, retain_graph=True, allow_unused=True)
        for total, grad in zip(self.total, grads, strict=True):
            if grad is not None:
                total.add_(grad)

    def metrics(self, correction_in_update: bool) -> dict[str, float]:
        """Ratio and cosine against ``g_main``, read from ``.grad`` after the step's backward passes.

        ``correction_in_update``: the arm trains with the correction, so ``.grad = g_main + g_C``.
        """
        dot = main_sq = c_sq = 0.0
        for param, g_c in zip(self.params, self.total, strict=True):
            grad = param.grad if param.grad is not None else torch.zeros_like(param)
            g_main = grad - g_c if correction_in_update else grad
            dot += float((g_main.double() * g_c.double()).sum())
            main_sq += float(g_main.double().square().sum())
            c_sq += float(g_c.double().square().sum())
        main_norm, c_norm = main_sq**0.5, c_sq**0.5
        return {
            "diag/centering_grad_ratio": c_norm / main_norm if main_norm > 0 else float("nan"),
            "diag/centering_grad_cos": dot / (main_norm * c_norm) if main_norm > 0 and c_norm > 0 else float("nan"),
        }
