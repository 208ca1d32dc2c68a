"""Benchmark: the head processor's selection, each row's top-k of ``log_softmax(logits)``, on one CPU thread.

Three ways on the same random logits (32 rows, k = 128, best of 3 interleaved rounds of 5 x 5 calls): the
processor's own :func:`runners.verl_side.logits_processor.writer.top_log_probs` (``torch.topk`` on ``log_softmax``;
importing it needs vLLM, as the processor does); the candidate of issue 45 item 4, ``torch.topk`` on the logits
and the k selected shifted by the row's ``torch.logsumexp`` (no batch x vocabulary tensor of log-probs kept);
and numpy's partial selection (``argpartition``, then a sort of the k), which the processor used before
2026-12-06; and ``log_softmax`` alone. Prints milliseconds per call and the ratios to the processor's, per
vocabulary (a ratio above 1: slower than the processor).

    python benchmarks/head/top_log_probs.py                  # vocabularies 4,096, 8,192, 32,768 and 151,936
    python benchmarks/head/top_log_probs.py --vocab 151936
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

ROWS, K = 32, 128


def by_topk(logits: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    from runners.verl_side.logits_processor.writer import top_log_probs

    return top_log_probs(logits, K)


def by_topk_on_logits(logits: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    values, ids = logits.topk(K, dim=-1)
    values = values - torch.logsumexp(logits, dim=-1, keepdim=True)
    return ids.to(torch.int32).numpy(), values.numpy()


def by_argpartition(logits: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    x = torch.log_softmax(logits, -1).numpy()
    part = np.argpartition(x, -K, axis=-1)[:, -K:]
    values = np.take_along_axis(x, part, -1)
    order = np.argsort(-values, -1, kind="stable")
    return np.take_along_axis(part, order, -1), np.take_along_axis(values, order, -1)


def log_softmax_only(logits: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits, -1)


def best_ms(f: Callable, logits: torch.Tensor, rounds: int = 5, calls: int = 5) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            f(logits)
        times.append((time.perf_counter() - start) / calls)
    return 1e3 * min(times)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, nargs="+", default=[4096, 8192, 32768, 151936])
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print("| vocabulary | processor: topk on log_softmax (ms) | topk on logits + logsumexp (ms) | ratio "
          "| argpartition (ms) | ratio | log_softmax alone (ms) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    ways = (by_topk, by_topk_on_logits, by_argpartition, log_softmax_only)
    for vocab in args.vocab:
        logits = torch.randn(ROWS, vocab, generator=torch.Generator().manual_seed(0)) * 3
        a, b, c = by_topk(logits), by_topk_on_logits(logits), by_argpartition(logits)
        for other in (b, c):  # the same head every way (fp32 sums in another order: 2e-5 apart at 151,936)
            assert (a[0] == other[0]).all() and np.abs(a[1] - other[1]).max() < 1e-4
        best = [float("inf")] * len(ways)
        for _ in range(3):  # interleaved
            best = [min(t, best_ms(f, logits)) for t, f in zip(best, ways, strict=True)]
        t_proc, t_cand, t_part, t_floor = best
        print(f"| {vocab:,} | {t_proc:.2f} | {t_cand:.2f} | {t_cand / t_proc:.2f} | {t_part:.2f} | {t_part / t_proc:.2f} "
              f"| {t_floor:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
