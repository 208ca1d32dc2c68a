"""Benchmark: time the full analysis report on synthetic sweeps of 4, 16, 64 and 256 runs.

Each sweep: the four arms (pg, tis, sc, sc_tis) x runs/4 seeds, each run 500 train steps x 26
evaluations (steps 0, 20, ..., 500) x 60 problems (aime2024 and aime2025, 30 each) x 8 samples, sc
following pg and sc_tis following tis per seed for a while (:func:`analysis.synthetic.build_sweep`,
``coincide``), as real arms do; built first, not timed. Timed: ``analysis.report.write_report`` end
to end (loading and checking every file, all tables with 10,000 bootstrap resamples and
permutations, the per-point bands of the curves, the three figures, the markdown), stage by stage
(:class:`analysis.progress.Progress`). Reported per size: seconds, seconds per run, and each stage.

Checks: the 4-run report under :data:`TARGET_S` on the 2-core development machine, and the time
growing no faster than the runs: from each size to the next, the seconds per run may not grow by
more than :data:`PER_RUN_SLACK` (fixed costs make them fall at small sizes). Wall-clock times move
with the machine's load: compare ratios, and say when the machine was busy.

    python benchmarks/report/timing.py [--sizes 4,16,64,256] [--steps 500] [--eval-every 20]
        [--problems-per-set 30] [--samples 8] [--repeat 1] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from analysis.progress import Progress
from analysis.report import write_report
from analysis.synthetic import build_sweep

TARGET_S = 10.0
PER_RUN_SLACK = 1.25
METHODS = ("pg", "tis", "sc", "sc_tis")
STAGES = ("load", "tables", "curves", "csv", "eval_curves.png", "train_curves.png", "per_problem.png", "markdown")


def _sizes(text: str) -> list[int]:
    sizes = [int(x) for x in text.split(",") if x.strip()]
    if not sizes or any(n < len(METHODS) or n % len(METHODS) for n in sizes):
        raise argparse.ArgumentTypeError(f"--sizes: multiples of {len(METHODS)} (one seed per arm and more), got {text}")
    return sizes


def time_report(sweep: Path, repeat: int) -> tuple[float, dict[str, float]]:
    """Best wall time of ``repeat`` full reports of ``sweep`` and the stage times of that best one."""
    best, stages = float("inf"), {}
    for _ in range(repeat):
        progress = Progress()
        t0 = time.perf_counter()
        write_report(sweep, progress=progress)
        elapsed = time.perf_counter() - t0
        if elapsed < best:
            best, stages = elapsed, dict(progress.times)
    return best, stages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=_sizes, default=[4, 16, 64, 256], help="runs per sweep, comma-separated")
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--eval-every", type=int, default=20)
    parser.add_argument("--problems-per-set", type=int, default=30, help="two sets of this many problems")
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=1, help="time each report this many times, report the best")
    parser.add_argument("--keep", type=Path, default=None,
                        help="build the sweeps here (DIR/runs_N) and keep them; an existing one is reused")
    args = parser.parse_args(argv)

    n_evals = args.steps // args.eval_every + 1
    print(f"each run: {args.steps} steps x {n_evals} evals x {2 * args.problems_per_set} problems x "
          f"{args.samples} samples; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            sweep = (args.keep or Path(tmp)) / f"runs_{n}"
            if not (sweep / f"{METHODS[-1]}-seed{n // len(METHODS)}").is_dir():
                t0 = time.perf_counter()
                build_sweep(sweep, methods=METHODS, seeds=tuple(range(1, n // len(METHODS) + 1)),
                            total_steps=args.steps, eval_every=args.eval_every, k=args.samples,
                            sets={"aime2024": args.problems_per_set, "aime2025": args.problems_per_set},
                            coincide={"sc": ("pg", args.steps // 5), "sc_tis": ("tis", args.steps // 10)})
                print(f"built {n} runs in {time.perf_counter() - t0:.1f} s (not timed)", flush=True)
            seconds, stages = time_report(sweep, args.repeat)
            rows.append((n, seconds, stages))
            print(f"{n} runs: {seconds:.2f} s, {seconds / n:.3f} s per run", flush=True)
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end (times of a busy machine are not comparable)\n")
    print("| runs | seconds | seconds per run | " + " | ".join(STAGES) + " |")
    print("|---:|---:|---:|" + "---:|" * len(STAGES))
    for n, seconds, stages in rows:
        print(f"| {n} | {seconds:.1f} | {seconds / n:.3f} | " + " | ".join(f"{stages.get(s, 0):.1f}" for s in STAGES)
              + " |")
    ok = True
    if rows[0][0] == len(METHODS):
        fast = rows[0][1] < TARGET_S
        ok &= fast
        print(f"\n{rows[0][0]}-run report {rows[0][1]:.2f} s; target < {TARGET_S:.0f} s: {'OK' if fast else 'TOO SLOW'}")
    for (n0, s0, _), (n1, s1, _) in zip(rows, rows[1:], strict=False):
        growth = (s1 / n1) / (s0 / n0)
        linear = growth <= PER_RUN_SLACK
        ok &= linear
        print(f"{n0} -> {n1} runs: seconds per run x {growth:.2f} (at most {PER_RUN_SLACK}): "
              f"{'OK' if linear else 'GROWS FASTER THAN THE RUNS'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
