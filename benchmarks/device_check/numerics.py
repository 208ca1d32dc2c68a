"""Part "numerics": the SC correction computed in fp32 (as the trainer does) against fp64, at Qwen3 size.

The logits are built as in ``tests/test_sc_numerics.py`` (:func:`case_block`): per row a head of k
ids (shuffled over the vocabulary) whose complement carries a chosen tail mass ``1 - P`` (1e-1 down
to 1e-5), shifted by an offset (0 or 30, so ``|lse|`` is about 0 or 30); the sampler's head is the
trainer's perturbed, with twice its tail. The rows are stored in bf16, the trainer's logits dtype,
and both computations start from those same bf16 values: the fp32 one is the trainer's path
(``head_log_probs_with_tail`` upcasting to fp32, ``centering_term`` in fp32) over all rows; the fp64
one (the same functions on the values cast to fp64) runs on a subset of rows per group, to bound
time and memory. Reported per (tail, offset, cap): the largest relative error of ``C``, the worst
``|dC| / (atol + rtol |C|)`` at the repository test's tolerance (``<= 1`` passes it), the largest
error of ``log(1 - P)``, and, on a few rows, the same for the gradient w.r.t. the logits. Also what a
rollout engine's own fp32 ``log_softmax`` kernel (vLLM's log-probs) does to a head: the largest
per-row mean shift of the head's log-probs against fp64 and the relative error of the tail ``1 - P``
formed from that head (docs/score_centering.md: torch's CPU kernel shifts rows by ~3e-5 at this
vocabulary; this measures the device's).

GPU memory at N = 16,384, V = 151,936, k = 128 (GB = 1e9 bytes): bf16 logits 4.98 GB; generating a
block of 512 rows holds about five fp64 ``512 x V`` tensors, 3.1 GB; the fp32 chunk block 0.62 GB;
the fp64 subset (512 rows) 0.62 GB plus its chunk block 0.62 GB -> about 10 GB.
"""

from __future__ import annotations

import math

import torch

from ablations.score_centering import centering_term, head_log_probs_with_tail

from .measure import Budget, Clock, PartSkipped, free_memory

TAILS = (1e-1, 1e-3, 1e-4, 1e-5)
OFFSETS = (0.0, 30.0)
CAPS = (None, 2.0)
RTOL, ATOL = 1e-5, 1e-7  # tests/test_sc_numerics.py: C in fp32 vs fp64
GRAD_RTOL, GRAD_ATOL = 1e-4, 1e-7  # tests/test_sc_numerics.py: the gradient


def case_block(rows: int, vocab: int, k: int, tail: float, offset: float, gen: torch.Generator,
               device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """fp64 logits ``(rows, V)`` whose mass outside the head ids is ``tail``, shifted by ``offset``;
    the head ids ``(rows, k)``; the sampler's fp32 log-probs at them (perturbed head, tail x 2)."""
    f64 = {"dtype": torch.float64, "device": device, "generator": gen}
    head = torch.randn(rows, k, **f64) * 2
    rest = torch.randn(rows, vocab - k, **f64)
    shift = (math.log(tail / (1 - tail)) + torch.logsumexp(head, -1, keepdim=True)
             - torch.logsumexp(rest, -1, keepdim=True))
    rest.add_(shift)
    sampler = torch.cat([head + 0.3 * torch.randn(rows, k, **f64), rest + 0.69], -1)
    sampler_head = torch.log_softmax(sampler, -1)[:, :k].float()
    del sampler
    perm = torch.randperm(vocab, generator=gen, device=device)
    logits = torch.cat([head, rest], -1).add_(offset)[:, perm]
    ids = torch.argsort(perm)[:k].expand(rows, k).contiguous()
    return logits, ids, sampler_head


def _tolerance_ratio(got: torch.Tensor, exact: torch.Tensor, rtol: float, atol: float) -> float:
    return float(((got.double() - exact).abs() / (atol + rtol * exact.abs())).max())


def _relative(got: torch.Tensor, exact: torch.Tensor) -> float:
    return float((got.double() - exact).abs().max() / exact.abs().max().clamp_min(1e-300))


def run(device: torch.device, *, rows: int, vocab: int, k: int, chunk_rows: int, exact_rows: int,
        grad_rows: int, block_rows: int, budget: Budget) -> dict:
    """fp32 vs fp64 of the correction over ``rows`` bf16 rows (``exact_rows`` and ``grad_rows`` in
    fp64 per group of ``rows / 8``). Returns ``{"sizes", "fp32_ms", "rows": [...], "notes"}``."""
    groups = [(tail, offset) for tail in TAILS for offset in OFFSETS]
    per_group = rows // len(groups)
    if per_group < max(exact_rows, grad_rows, 1):
        raise PartSkipped(f"{rows} rows give {per_group} per group, fewer than the {exact_rows} fp64 rows")
    gen = torch.Generator(device=device).manual_seed(1)
    logits = torch.empty(per_group * len(groups), vocab, dtype=torch.bfloat16, device=device)
    ids = torch.empty(logits.shape[0], k, dtype=torch.long, device=device)
    sampler = torch.empty(logits.shape[0], k, dtype=torch.float32, device=device)
    for g, (tail, offset) in enumerate(groups):
        for start in range(g * per_group, (g + 1) * per_group, block_rows):
            stop = min(start + block_rows, (g + 1) * per_group)
            block, ids[start:stop], sampler[start:stop] = case_block(stop - start, vocab, k, tail, offset, gen, device)
            logits[start:stop] = block
            del block
    free_memory(device.type == "cuda")
    clock = Clock(device)
    with torch.no_grad():
        t0 = clock.mark()
        head32, tail32 = head_log_probs_with_tail(logits, ids, chunk_rows)
        fp32 = {cap: centering_term(head32, sampler, is_cap=cap, train_log_tail=tail32)[0] for cap in CAPS}
        fp32_ms = clock.ms(t0, clock.mark())
    notes: list[str] = []
    out_rows: list[dict] = []
    for g, (tail, offset) in enumerate(groups):
        if budget.spent():
            notes.append(f"time budget of {budget.seconds:.0f} s spent: fp64 comparison stopped before "
                         f"tail {tail:g}, offset {offset:g}")
            break
        first = g * per_group
        sub = slice(first, first + exact_rows)
        exact_logits = logits[sub].double()
        with torch.no_grad():
            head64, tail64 = head_log_probs_with_tail(exact_logits, ids[sub], chunk_rows)
            lse = float(exact_logits.logsumexp(-1).abs().mean())
        grads = _gradient_errors(logits[first:first + grad_rows], ids[first:first + grad_rows],
                                 sampler[first:first + grad_rows], chunk_rows)
        with torch.no_grad():  # an engine's fp32 log_softmax kernel, as vLLM returns the head
            engine = torch.log_softmax(logits[sub].float(), -1).gather(-1, ids[sub]).double()
            exact_lp = torch.log_softmax(exact_logits, -1).gather(-1, ids[sub])
            engine_shift = float((engine - exact_lp).mean(-1).abs().max())
            engine_tail = 1 - engine.exp().sum(-1)
            engine_tail_err = float(((engine_tail - tail64.exp()).abs() / tail64.exp()).max())
            del engine, exact_lp
        del exact_logits
        for cap in CAPS:
            exact = centering_term(head64, sampler[sub].double(), is_cap=cap, train_log_tail=tail64)[0]
            got = fp32[cap][sub]
            out_rows.append({
                "target_tail": tail, "offset": offset, "cap": cap, "mean_abs_lse": lse,
                "fp64_tail_mean": float(tail64.exp().mean()), "fp64_rows": exact_rows,
                "mean_abs_c": float(exact.abs().mean()),
                "c_max_rel_err": _relative(got, exact),
                "c_tolerance_ratio": _tolerance_ratio(got, exact, RTOL, ATOL),
                "log_tail_max_abs_err": float((tail32[sub].double() - tail64).abs().max()),
                "grad_rows": grad_rows, "grad_max_rel_err": grads[cap][0], "grad_tolerance_ratio": grads[cap][1],
                "engine_log_softmax_shift": engine_shift, "engine_tail_max_rel_err": engine_tail_err,
            })
    del logits, ids, sampler, head32, tail32, fp32
    free_memory(device.type == "cuda")
    if not out_rows:
        raise PartSkipped(f"time budget of {budget.seconds:.0f} s spent before the first fp64 comparison")
    return {"sizes": {"rows": per_group * len(groups), "vocab": vocab, "k": k, "chunk_rows": chunk_rows,
                      "fp64_rows_per_group": exact_rows, "grad_rows_per_group": grad_rows,
                      "logits_dtype": "bfloat16", "rtol": RTOL, "atol": ATOL,
                      "grad_rtol": GRAD_RTOL, "grad_atol": GRAD_ATOL},
            "fp32_ms": fp32_ms, "rows": out_rows, "notes": notes}


def _gradient_errors(logits: torch.Tensor, ids: torch.Tensor, sampler: torch.Tensor,
                     chunk_rows: int) -> dict[float | None, tuple[float, float]]:
    """Per cap: (max relative error, tolerance ratio) of d(sum C)/d(logits), fp32 against fp64, from
    the same bf16 values (fp32 and fp64 leaves, so neither gradient is rounded to bf16)."""
    errors = {}
    for cap in CAPS:
        grads = []
        for dtype in (torch.float64, torch.float32):
            z = logits.to(dtype).requires_grad_(True)
            head, log_tail = head_log_probs_with_tail(z, ids, chunk_rows)
            centering_term(head, sampler.to(dtype), is_cap=cap, train_log_tail=log_tail)[0].sum().backward()
            grads.append(z.grad)
            del z, head, log_tail
        exact, got = grads
        errors[cap] = (_relative(got, exact), _tolerance_ratio(got, exact, GRAD_RTOL, GRAD_ATOL))
    return errors
