"""Benchmark: chunked head gather vs the naive ``log_softmax(...).gather`` and each arm's loss cost.

Part 1 runs every (method, sequence length) in a fresh subprocess and reports its peak RSS
increase during forward+backward (``ru_maxrss`` after minus before; the bf16 logits and their
accumulated bf16 ``.grad`` are resident before the baseline is read). Both methods also hold one
freshly computed bf16 gradient (``N x V x 2`` bytes) before autograd adds it into ``.grad``; the
rest is fp32 workspace. Wall time is the median over repeats. Part 2 times each arm's loss (forward+backward, with the
score-centering term for SC arms) relative to PG on identical inputs, after a warm-up, in
interleaved rounds (median per arm).

    python benchmarks/head/gather.py                 # defaults: V=151,936, N in 1024..4096, k=128
    python benchmarks/head/gather.py --lengths 512 1024 --vocab 32000
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

_CHILD = r"""
import json, resource, sys, time, torch
from ablations.score_centering import head_log_probs
method, n, vocab, k, chunk, repeats = sys.argv[1], *map(int, sys.argv[2:7])
torch.manual_seed(0)
logits = torch.empty(n, vocab, dtype=torch.bfloat16).normal_().requires_grad_(True)  # no fp32 temporary
ids = torch.randint(0, vocab, (n, k))
weights = torch.randn(n, k)
logits.grad = torch.zeros_like(logits)  # accumulated into: its pages are resident before the baseline
def step():
    if method == "chunked":
        out = head_log_probs(logits, ids, chunk_rows=chunk)
    else:
        out = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids)
    (out * weights).sum().backward()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
times = []
for _ in range(repeats):
    t0 = time.perf_counter(); step(); times.append(time.perf_counter() - t0)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"extra_mib": (after - before) / 1024, "times": times}))
"""


def gather_row(method: str, n: int, vocab: int, k: int, chunk: int, repeats: int) -> dict:
    args = [sys.executable, "-c", _CHILD, method, str(n), str(vocab), str(k), str(chunk), str(repeats)]
    out = subprocess.run(args, capture_output=True, text=True, check=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    return {"method": method, "n": n, "extra_mib": row["extra_mib"], "median_s": statistics.median(row["times"])}


def loss_rows(batch: int, length: int, k: int, repeats: int) -> list[dict]:
    import torch
    import verl  # noqa: F401  (registers the arms through the plug-in entry point)
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.workers.config.actor import ActorConfig, PolicyLossConfig

    from ablations.score_centering import centering_term

    torch.manual_seed(0)
    shape = (batch, length)
    old = -torch.rand(shape) * 3
    base_lp = old + 0.3 * torch.randn(shape)
    adv = torch.randn(batch, 1).expand(shape).contiguous()
    mask = torch.ones(shape)
    head_train = torch.log_softmax(torch.randn(batch, length, k + 1), -1)[..., :k]
    head_sampler = (head_train + 0.1 * torch.randn_like(head_train)).clamp(max=-1e-3)
    head_sampler = head_sampler - torch.logsumexp(head_sampler, -1, keepdim=True) + head_train.exp().sum(-1).log()[..., None]
    config = ActorConfig(
        strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=5,
        policy_loss=PolicyLossConfig(rollout_correction=RolloutCorrectionConfig(rollout_is_threshold=2.0)),
    )
    caps = {"ablation_pg": None, "ablation_tis": None, "ablation_sc": "sc", "ablation_sc_tis": 2.0}

    def once(name: str, sc) -> float:
        lp = base_lp.clone().requires_grad_(True)
        ht = head_train.clone().requires_grad_(True)
        t0 = time.perf_counter()
        kw = {}
        if sc is not None:
            kw["sc_correction"] = centering_term(ht, head_sampler, is_cap=None if sc == "sc" else sc)[0]
        loss, _ = get_policy_loss_fn(name)(old, lp, adv, mask, "token-mean", config, **kw)
        loss.backward()
        return time.perf_counter() - t0

    times: dict[str, list[float]] = {name: [] for name in caps}
    for name, sc in caps.items():  # warm-up: first calls pay allocation and thread-pool start-up
        once(name, sc)
        once(name, sc)
    for _ in range(repeats):  # interleaved rounds, so drift in machine load hits every arm alike
        for name, sc in caps.items():
            times[name].append(once(name, sc))
    rows = [{"arm": name, "median_s": statistics.median(ts)} for name, ts in times.items()]
    pg = rows[0]["median_s"]
    for r in rows:
        r["ratio_to_pg"] = r["median_s"] / pg
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--k", type=int, default=128)
    parser.add_argument("--chunk-rows", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--loss-batch", type=int, default=160, help="responses (32 prompts x 5)")
    parser.add_argument("--loss-length", type=int, default=512)
    args = parser.parse_args()

    print(f"head gather, bf16 logits, V={args.vocab}, k={args.k}, chunk_rows={args.chunk_rows}")
    print(f"{'method':>8} {'N':>6} {'extra peak MiB':>15} {'bf16 grad MiB':>14} {'fp32 workspace MiB':>19}"
          f" {'N x V fp32 MiB':>15} {'fwd+bwd s':>10}")
    for n in args.lengths:
        for method in ("chunked", "naive"):
            r = gather_row(method, n, args.vocab, args.k, args.chunk_rows, args.repeats)
            full = n * args.vocab * 4 / 2**20
            grad = full / 2
            print(f"{method:>8} {n:>6} {r['extra_mib']:>15.0f} {grad:>14.0f} {r['extra_mib'] - grad:>19.0f}"
                  f" {full:>15.0f} {r['median_s']:>10.3f}", flush=True)
    print(f"\nchunk workspace bound: chunk_rows x V x 4 B = {args.chunk_rows * args.vocab * 4 / 2**20:.0f} MiB")

    print(f"\nloss forward+backward, {args.loss_batch} x {args.loss_length} tokens, k={args.k}")
    for r in loss_rows(args.loss_batch, args.loss_length, args.k, max(args.repeats, 15)):
        print(f"{r['arm']:>16} {r['median_s'] * 1e3:8.1f} ms  x{r['ratio_to_pg']:.2f} of PG")


if __name__ == "__main__":
    main()
