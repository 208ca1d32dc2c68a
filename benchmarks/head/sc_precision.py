"""How precise ``actor/sc_correction`` is: the correction C in fp32 against float64, at Qwen3's vocabulary.

    python benchmarks/head/sc_precision.py            # V = 151,936, k = 128; a table for docs/score_centering.md

Rows: the trainer's tail mass ``1 - P`` outside the sampler's head (the sampler's own tail is 2x that)
and the logits' offset (``|lse|`` about the offset). Columns, against float64 throughout: the mean
``|C|``, and the mean absolute error of C computed by the project in fp32 from the trainer's logits
(``head_log_probs_with_tail`` + ``centering_term``) when the sampler's head log-probs arrive
(a) as the exact values rounded to fp32 (the transport's float32), (b) as the best fp32 computation
from fp32 sampler logits can give them (max-shifted, an accurate sum: the project's own gather on
the sampler's logits), (c) as torch's fp32 ``log_softmax`` on a CPU gives them (its sum over
151,936 entries shifts every log-prob of a row by ~3e-5: an example of an engine's kernel deciding
the precision); and the relative error of the sampler's tail ``1 - Q`` formed from (b)'s head.
Deterministic (seeded); takes seconds.
"""

from __future__ import annotations

import argparse

import torch

from ablations.score_centering import centering_term, head_log_probs_with_tail


def case(vocab: int, k: int, tail: float, offset: float, rows: int, seed: int = 0):
    """fp64 trainer logits with mass ``tail`` outside the first k ids (shuffled) and their sampler's
    fp64 logits (a perturbed head, twice the tail); both shifted by ``offset``; and the head ids."""
    gen = torch.Generator().manual_seed(seed)
    head = torch.randn(rows, k, generator=gen, dtype=torch.float64) * 2
    rest = torch.randn(rows, vocab - k, generator=gen, dtype=torch.float64)
    shift = (torch.log(torch.tensor(tail / (1 - tail), dtype=torch.float64))
             + torch.logsumexp(head, -1, keepdim=True) - torch.logsumexp(rest, -1, keepdim=True))
    perm = torch.randperm(vocab, generator=gen)
    trainer = (torch.cat([head, rest + shift], -1) + offset)[:, perm]
    sampler = (torch.cat([head + 0.3 * torch.randn(rows, k, generator=gen, dtype=torch.float64),
                          rest + shift + 0.69], -1) + offset)[:, perm]
    ids = torch.argsort(perm)[:k].expand(rows, k).contiguous()
    return trainer, sampler, ids


def errors(vocab: int, k: int, tail: float, offset: float, rows: int, cap: float | None) -> dict[str, float]:
    from ablations.score_centering import head_log_probs

    trainer, sampler, ids = case(vocab, k, tail, offset, rows)
    exact_q = torch.log_softmax(sampler, -1).gather(-1, ids)
    head64, tail64 = head_log_probs_with_tail(trainer, ids)
    exact = centering_term(head64, exact_q, is_cap=cap, train_log_tail=tail64)[0]
    head32, tail32 = head_log_probs_with_tail(trainer.float(), ids)
    heads = {"rounded": exact_q.float(), "best_fp32": head_log_probs(sampler.float(), ids),
             "cpu_log_softmax": torch.log_softmax(sampler.float(), -1).gather(-1, ids)}
    out = {"abs_C": float(exact.abs().mean())}
    for name, sampler_head in heads.items():
        got = centering_term(head32, sampler_head, is_cap=cap, train_log_tail=tail32)[0].double()
        out[name] = float((got - exact).abs().mean())
    q_tail_exact = 1 - exact_q.exp().sum(-1)
    q_tail = 1 - heads["best_fp32"].double().exp().sum(-1)
    out["sampler_tail"] = float(((q_tail - q_tail_exact).abs() / q_tail_exact).mean())
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=151_936)
    ap.add_argument("--k", type=int, default=128)
    ap.add_argument("--rows", type=int, default=8)
    args = ap.parse_args()
    print(f"V = {args.vocab:,}, k = {args.k}, {args.rows} rows per case; errors against float64")
    print("| 1 - P | offset | arm | mean abs C | abs error of C: (a) head rounded to fp32 | (b) best fp32 head "
          "| (c) CPU fp32 log_softmax head | rel. error of 1 - Q from (b) |")
    print("|---|---|---|---|---|---|---|---|")
    for tail in (1e-1, 1e-2, 1e-3, 1e-4, 1e-5):
        for offset in (0.0, 30.0):
            for arm, cap in (("SC", None), ("SC+TIS", 2.0)):
                e = errors(args.vocab, args.k, tail, offset, args.rows, cap)
                print(f"| {tail:.0e} | {offset:.0f} | {arm} | {e['abs_C']:.2g} | {e['rounded']:.1e} | {e['best_fp32']:.1e} "
                      f"| {e['cpu_log_softmax']:.1e} | {e['sampler_tail']:.1e} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
