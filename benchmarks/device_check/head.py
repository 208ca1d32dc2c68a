"""Part "head_cost": the SC and SC+TIS arms' extra trainer work against PG's, on one micro-batch of logits.

Every arm runs its token loss (:func:`ablations.token_loss.token_loss`) over bf16 logits ``N x V``
that are an autograd leaf, forward then backward, timed with :class:`.measure.Clock` and with
its peak memory read by :class:`.measure.Meter`:

* ``pg`` — the sampled token's log-prob as the project computes it, chunked
  (``head_log_probs(logits, sampled, k=1)``; verl's own ``logprobs_from_logits`` is the same
  log-softmax-and-gather, row-chunked or flash-attn's cross-entropy); the reference of every ratio;
* ``pg_torch`` — the same log-prob as plain ``torch.log_softmax(logits.float()).gather`` (labelled;
  it materialises ``N x V`` fp32 tensors, so it is skipped where the estimate does not fit);
* ``sc`` — ``pg``'s log-prob plus ``head_log_probs_with_tail`` over the sampler's top-k ids and
  ``centering_term(is_cap=None)``;
* ``sc_tis`` — the same with ``is_cap=2.0`` and the TIS weight on the sampled token.

Rounds interleave the arms (warm-up rounds first, not timed), so drift hits every arm alike; the
logits' ``.grad`` is dropped after each step, so each backward allocates it as a trainer's does.

GPU memory at Qwen3-4B size (N = 16,384, V = 151,936, k = 128, chunk 1,024 rows; GB = 1e9 bytes):
inputs: bf16 logits 4.98 GB, ids 17 MB, sampler head 8 MB. Extra per arm: ``pg`` 4.98 GB bf16 grad
+ 0.62 GB fp32 chunk block (x2 in flight) -> ~11 GB total; ``sc``/``sc_tis`` two bf16 grads summed
by autograd (up to 3 x 4.98 GB) + chunk blocks -> ~21 GB; ``pg_torch`` fp32 copy and log-softmax
output 2 x 9.96 GB forward, fp32 gather/log-softmax grads 2 x 9.96 GB + bf16 grad backward -> ~45 GB.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ablations.score_centering import centering_term, head_log_probs, head_log_probs_with_tail
from ablations.token_loss import token_loss

from .measure import Budget, Clock, Meter, PartSkipped, check_fits, free_memory, is_oom, median, ratio

ARMS = ("pg", "pg_torch", "sc", "sc_tis")
LABELS = {
    "pg": "PG: sampled-token log-prob, chunked (head_log_probs, k=1)",
    "pg_torch": "PG: plain torch log_softmax(logits.float()).gather",
    "sc": "SC: PG's log-prob + head gather with tail + centering_term",
    "sc_tis": "SC+TIS: as SC, is_cap=2.0, TIS weight on the sampled token",
}
IS_CAP = {"sc": None, "sc_tis": 2.0}  # centering_term's is_cap for the SC arms
TIS_CAP = {"pg": None, "pg_torch": None, "sc": None, "sc_tis": 2.0}  # token_loss's cap


@dataclass
class HeadInputs:
    """One micro-batch: bf16 logits (leaf), the sampler's top-k ids and log-probs, the sampled tokens."""

    logits: torch.Tensor  # (N, V) bf16, requires grad
    ids: torch.Tensor  # (N, k) int64, the sampler's head
    sampled: torch.Tensor  # (N, 1) int64
    sampler_head: torch.Tensor  # (N, k) fp32 log q at ids (head mass < 1)
    old_log_prob: torch.Tensor  # (1, N) the sampler's log-prob of the sampled token
    advantages: torch.Tensor  # (1, N)
    mask: torch.Tensor  # (1, N)
    chunk_rows: int


def make_inputs(n: int, vocab: int, k: int, chunk_rows: int, device: torch.device, seed: int = 0) -> HeadInputs:
    """Random logits (std 3, drawn in bf16: no fp32 temporary), their top-k per row as the head, a
    sampled token from the head, and a sampler head perturbed from the trainer's with the same mass."""
    gen = torch.Generator(device=device).manual_seed(seed)
    logits = torch.randn(n, vocab, dtype=torch.bfloat16, device=device, generator=gen).mul_(3)
    ids = torch.empty(n, k, dtype=torch.long, device=device)
    for start in range(0, n, chunk_rows):
        ids[start:start + chunk_rows] = logits[start:start + chunk_rows].topk(k, dim=-1).indices
    pick = torch.randint(0, k, (n, 1), device=device, generator=gen)
    sampled = ids.gather(1, pick)
    with torch.no_grad():
        head, _ = head_log_probs_with_tail(logits, ids, chunk_rows)
        noisy = head + 0.1 * torch.randn(head.shape, device=device, generator=gen)
        sampler_head = noisy - noisy.logsumexp(-1, keepdim=True) + head.logsumexp(-1, keepdim=True)
        old = head.gather(1, pick).reshape(1, n) + 0.05 * torch.randn(1, n, device=device, generator=gen)
    return HeadInputs(
        logits=logits.requires_grad_(True), ids=ids, sampled=sampled, sampler_head=sampler_head,
        old_log_prob=old, advantages=torch.randn(1, n, device=device, generator=gen),
        mask=torch.ones(1, n, device=device), chunk_rows=chunk_rows,
    )


def estimate_bytes(arm: str, n: int, vocab: int, k: int, chunk_rows: int) -> int:
    """Upper estimate of an arm's peak: the inputs plus its gradients and fp32 workspace."""
    inputs = n * vocab * 2 + n * k * 16
    block = 2 * chunk_rows * vocab * 4
    extra = {"pg": n * vocab * 2 + block, "sc": 3 * n * vocab * 2 + block,
             "pg_torch": 4 * n * vocab * 4 + n * vocab * 2}
    return inputs + extra.get(arm, extra["sc"])


def step(arm: str, inp: HeadInputs, clock: Clock) -> tuple[float, float]:
    """One forward and backward of ``arm``'s token loss; (forward ms, backward ms)."""
    logits = inp.logits
    logits.grad = None
    t0 = clock.mark()
    if arm == "pg_torch":
        log_prob = torch.log_softmax(logits.float(), dim=-1).gather(-1, inp.sampled)
    else:
        log_prob = head_log_probs(logits, inp.sampled, chunk_rows=inp.chunk_rows)
    correction = None
    if arm in IS_CAP:
        head, log_tail = head_log_probs_with_tail(logits, inp.ids, chunk_rows=inp.chunk_rows)
        correction = centering_term(head, inp.sampler_head, is_cap=IS_CAP[arm], train_log_tail=log_tail)[0]
        correction = correction.reshape(1, -1)
    loss_matrix, _ = token_loss(inp.old_log_prob, log_prob.reshape(1, -1), inp.advantages, inp.mask,
                                TIS_CAP[arm], correction)
    loss = loss_matrix.mean()
    t1 = clock.mark()
    loss.backward()
    t2 = clock.mark()
    forward_ms, backward_ms = clock.ms(t0, t1), clock.ms(t1, t2)
    logits.grad = None
    return forward_ms, backward_ms


def run(device: torch.device, *, tokens: int, vocab: int, k: int, chunk_rows: int, warmup: int,
        repeats: int, budget: Budget, limit_bytes: int) -> dict:
    """Time and peak memory of each arm (medians over the repeats that fit in ``budget``).

    Returns ``{"sizes", "rows": [...], "notes": [...]}``; each row has ``arm``, ``label``,
    ``forward_ms``, ``backward_ms``, ``total_ms``, ``peak_bytes``, ``extra_peak_bytes``,
    ``repeats``, the ratios ``time_ratio_to_pg``, ``memory_ratio_to_pg`` (peak),
    ``extra_memory_ratio_to_pg`` (peak above the inputs), and ``skipped`` (a reason) where it did not run.
    """
    clock, meter = Clock(device), Meter(device)
    inp = make_inputs(tokens, vocab, k, chunk_rows, device)
    resident = torch.cuda.memory_allocated() if device.type == "cuda" else 0
    samples = {arm: {"forward": [], "backward": [], "total": [], "peak": None, "extra": None, "reserved": None}
               for arm in ARMS}
    skipped: dict[str, str] = {}
    notes: list[str] = []
    done = 0
    for round_index in range(warmup + repeats):
        if budget.spent():
            notes.append(f"time budget of {budget.seconds:.0f} s spent: {done} of {repeats} timed repeats "
                         f"({'in warm-up' if round_index < warmup else 'remaining repeats skipped'})")
            break
        for arm in ARMS:
            if arm in skipped:
                continue
            try:
                if round_index == 0:
                    check_fits(arm, estimate_bytes(arm, tokens, vocab, k, chunk_rows), device, limit_bytes,
                               resident_bytes=resident)
                meter.start()
                forward_ms, backward_ms = step(arm, inp, clock)
                memory = meter.stop()
            except PartSkipped as exc:
                skipped[arm] = str(exc)
                continue
            except Exception as exc:
                if not is_oom(exc):
                    raise
                inp.logits.grad = None
                skipped[arm] = f"out of memory: {str(exc).splitlines()[0][:200]}"
                free_memory(device.type == "cuda")
                continue
            record = samples[arm]
            for key, value in (("peak", memory["peak_bytes"]), ("extra", memory["extra_peak_bytes"]),
                               ("reserved", memory.get("peak_reserved_bytes"))):
                if value is not None:
                    record[key] = max(record[key] or 0, value)
            if round_index >= warmup:
                record["forward"].append(forward_ms)
                record["backward"].append(backward_ms)
                record["total"].append(forward_ms + backward_ms)
        if round_index >= warmup:
            done += 1
    del inp
    free_memory(device.type == "cuda")
    rows = [_row(arm, samples[arm], skipped.get(arm)) for arm in ARMS]
    reference = rows[0]
    for row in rows:
        row["time_ratio_to_pg"] = ratio(row["total_ms"], reference["total_ms"])
        row["memory_ratio_to_pg"] = ratio(row["peak_bytes"], reference["peak_bytes"])
        row["extra_memory_ratio_to_pg"] = ratio(row["extra_peak_bytes"], reference["extra_peak_bytes"])
    if done == 0:
        raise PartSkipped(f"time budget of {budget.seconds:.0f} s spent before any timed repeat")
    return {"sizes": {"tokens": tokens, "vocab": vocab, "k": k, "chunk_rows": chunk_rows,
                      "warmup": warmup, "repeats": repeats, "logits_dtype": "bfloat16"},
            "rows": rows, "notes": notes}


def _row(arm: str, record: dict, skipped: str | None) -> dict:
    return {
        "arm": arm, "label": LABELS[arm],
        "forward_ms": median(record["forward"]), "backward_ms": median(record["backward"]),
        "total_ms": median(record["total"]), "repeats": len(record["total"]),
        "peak_bytes": record["peak"], "extra_peak_bytes": record["extra"],
        "peak_reserved_bytes": record["reserved"], "skipped": skipped,
    }
