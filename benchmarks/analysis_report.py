"""Benchmark: time the full analysis report on a synthetic sweep of realistic size.

The sweep: 4 runs (pg, tis, sc, sc_tis; one seed each) x 500 train steps x 26 evaluations
(steps 0, 20, ..., 500) x 60 problems (aime2024 and aime2025, 30 each) x 8 samples, built with
:func:`analysis.synthetic.build_sweep` (not timed). Timed: ``analysis.report.write_report`` end
to end (loading and checking every file, all tables with 10,000 bootstrap resamples and
permutations, the per-point bootstrap bands of the curves, the three figures, the markdown).
Target on the 2-core development machine: under 10 s.

    python benchmarks/analysis_report.py [--problems-per-set 30] [--repeat 1] [--keep DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from analysis.report import write_report
from analysis.synthetic import build_sweep

TARGET_S = 10.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--eval-every", type=int, default=20)
    parser.add_argument("--problems-per-set", type=int, default=30, help="two sets of this many problems")
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=1, help="time the report this many times, report the best")
    parser.add_argument("--keep", type=Path, default=None, help="build the sweep here and keep it")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        sweep = args.keep or Path(tmp) / "bench_sweep"
        t0 = time.perf_counter()
        build_sweep(sweep, total_steps=args.steps, eval_every=args.eval_every, k=args.samples,
                    sets={"aime2024": args.problems_per_set, "aime2025": args.problems_per_set})
        build_s = time.perf_counter() - t0
        n_evals = args.steps // args.eval_every + 1
        print(f"built 4 runs x {args.steps} steps x {n_evals} evals x {2 * args.problems_per_set} problems x "
              f"{args.samples} samples in {build_s:.1f} s (not timed)")
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            report = write_report(sweep)
            times.append(time.perf_counter() - t0)
        best = min(times)
        print(f"full report: {best:.2f} s (best of {len(times)}: {', '.join(f'{t:.2f}' for t in times)}); "
              f"target < {TARGET_S:.0f} s: {'OK' if best < TARGET_S else 'TOO SLOW'}")
        print(f"wrote {len(report.files)} files to {report.files['comparison.md'].parent}")
    return 0 if best < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
