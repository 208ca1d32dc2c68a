"""Benchmark: how much a late-window endpoint cuts the noise of a paired difference, measured on run folders.

For every sweep folder given and every pair of arms with at least 3 shared seeds: the per-seed difference in
``avg`` mean@k (the mean over the evaluation sets) under ``final`` (the last evaluation) and under
``last_quarter`` (each problem's score averaged over the evaluations at steps >= 3/4 of the last;
``analysis.tables.window_steps``), the SD of each over the seeds, and their ratio. Then the median ratio over
every comparison printed, which round 6's pre-registered rule reads (``docs/drift_study.md``: ``last_quarter``
is the primary endpoint when the median is at most 0.90).

    python benchmarks/report/endpoint_noise.py results/scratchpad_kv3_sync results/scratchpad_refresh16 results/scratchpad_refresh32
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from itertools import combinations
from pathlib import Path

import numpy as np

from analysis.load import load_sweep
from analysis.tables import LAST_QUARTER, arm_scores, checkpoint_steps


def per_seed_avg(sweep, checkpoint: str) -> dict[str, dict[int, float]]:
    """Per arm: seed -> the run's ``avg`` mean@k at ``checkpoint``."""
    out: dict[str, dict[int, float]] = {}
    for method, (runs, y) in arm_scores(sweep, checkpoint_steps(sweep, [checkpoint])).items():
        avg = np.mean([y[:, sl].mean(axis=1) for sl in sweep.set_slices], axis=0)
        out[method] = {int(sweep.runs.at[r, "seed"]): float(v) for r, v in zip(runs, avg, strict=True)}
    return out


def comparisons(sweep_dir: Path) -> list[dict]:
    sweep = load_sweep(sweep_dir)
    final, late = per_seed_avg(sweep, "final"), per_seed_avg(sweep, LAST_QUARTER)
    rows = []
    for a, b in combinations([m for m in sweep.methods if m in final], 2):
        seeds = sorted(set(final[a]) & set(final[b]))
        if len(seeds) < 3:
            continue
        d_final = np.array([final[a][s] - final[b][s] for s in seeds])
        d_late = np.array([late[a][s] - late[b][s] for s in seeds])
        sd_final, sd_late = d_final.std(ddof=1), d_late.std(ddof=1)
        rows.append({"sweep": sweep_dir.name, "pair": f"{a} - {b}", "seeds": len(seeds), "sd_final": sd_final,
                     "sd_last_quarter": sd_late, "ratio": sd_late / sd_final if sd_final > 0 else np.nan,
                     "diff_final": d_final.mean(), "diff_last_quarter": d_late.mean()})
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="+", type=Path, help="sweep folders (results/<sweep>)")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.sweeps if not p.is_dir()]
    if missing:
        print(f"error: not a folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    rows = [r for p in args.sweeps for r in comparisons(p)]
    print("| sweep | a - b | seeds | SD final | SD last_quarter | ratio | diff final | diff last_quarter |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['sweep']} | {r['pair']} | {r['seeds']} | {r['sd_final']:.3f} | {r['sd_last_quarter']:.3f} | "
              f"{r['ratio']:.2f} | {r['diff_final']:+.3f} | {r['diff_last_quarter']:+.3f} |")
    ratios = [r["ratio"] for r in rows if np.isfinite(r["ratio"])]
    if ratios:
        print(f"\nmedian SD ratio (last_quarter / final) over {len(ratios)} comparisons: {np.median(ratios):.3f}")
    else:
        print("\nno pair of arms with 3 or more shared seeds", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
