"""``python -m analysis SWEEP_DIR``: write the comparison report of a sweep (see analysis.report)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from analysis.load import SweepError, find_run_dirs
from analysis.progress import PROGRESS_MIN_RUNS, Progress
from analysis.report import DEFAULT_KS, parse_checkpoints, write_report
from analysis.stats import N_BOOT, SEED

#: The fewest bootstrap resamples ``--n-boot`` accepts: 40 puts one resample beyond each 2.5% tail.
MIN_N_BOOT = 40


def _ks(text: str) -> list[int]:
    try:
        ks = [int(k) for k in text.split(",") if k.strip()]
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"--k expects comma-separated integers, got {text!r}") from e
    if not ks or min(ks) < 1:
        raise argparse.ArgumentTypeError(f"--k values must be >= 1, got {text!r}")
    return ks


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and status 2, not argparse's usage block
        print(f"error: {self.prog}: {message} (see --help)", file=sys.stderr)
        raise SystemExit(2)


def _n_boot(text: str) -> int:
    """``--n-boot``: a whole number of bootstrap resamples, at least :data:`MIN_N_BOOT`."""
    try:
        n = int(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expects a whole number, got {text!r}") from e
    if n < MIN_N_BOOT:
        raise argparse.ArgumentTypeError(f"must be >= {MIN_N_BOOT} (a 95% interval needs resamples beyond "
                                         f"each tail), got {n}")
    return n


def main(argv: Sequence[str] | None = None) -> int:
    parser = _Parser(
        prog="python -m analysis",
        description="Turn a sweep of run directories into mean@k comparison tables with error bars, "
                    "paired tests, pass@k and curves (written to SWEEP_DIR/report/ unless --out).")
    parser.add_argument("sweep_dir", type=Path, help="folder holding the run directories of one sweep")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: SWEEP_DIR/report)")
    parser.add_argument("--checkpoint", default="both",
                        help="final, best, both (default), last_quarter (each problem's score averaged over a "
                             "run's evaluations at steps >= 3/4 of its last) or an evaluated step number; "
                             "comma-separate several")
    parser.add_argument("--k", type=_ks, default=list(DEFAULT_KS),
                        help="k values of pass@k, comma-separated (default 1,2,4,8; k above the samples per "
                             "problem are skipped)")
    parser.add_argument("--n-boot", type=_n_boot, default=N_BOOT,
                        help=f"bootstrap resamples (default {N_BOOT}; at least {MIN_N_BOOT})")
    parser.add_argument("--seed", type=int, default=SEED, help=f"seed of resampling and permutations (default {SEED})")
    parser.add_argument("--control", default=None, metavar="ARM",
                        help="the arm the planned comparisons are against (each arm - ARM, Holm-adjusted); "
                             "default: every pair, Holm-adjusted when the sweep has more than four arms")
    parser.add_argument("--no-figures", action="store_true", help="write the tables only")
    parser.add_argument("--strict", action="store_true",
                        help="fail on run folders whose record (metrics.json, config.yaml) or val files fail the "
                             "contract, and on runs trained differently from their peers, instead of skipping "
                             "them or showing them apart")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help=f"a line per stage on stderr (default: with {PROGRESS_MIN_RUNS} run folders or more)")
    args = parser.parse_args(argv)
    try:
        checkpoints = parse_checkpoints(args.checkpoint)
    except ValueError as e:
        parser.error(str(e))
    start = time.perf_counter()
    n_folders = len(find_run_dirs(args.sweep_dir)[0]) if args.sweep_dir.is_dir() else 0
    show = args.progress if args.progress is not None else n_folders >= PROGRESS_MIN_RUNS
    progress = Progress(sys.stderr if show else None)
    progress.say(f"{n_folders} run folders in {args.sweep_dir}; stages: load, tables, curves, csv, "
                 + ("3 figures, " if not args.no_figures else "") + "markdown")
    try:
        report = write_report(args.sweep_dir, args.out, checkpoints, args.k, args.n_boot, args.seed,
                              figures=not args.no_figures, strict=args.strict, progress=progress,
                              control=args.control)
    except SweepError as e:
        print(f"error: cannot analyse {args.sweep_dir}:", file=sys.stderr)
        for line in e.problems:
            print(f"  {line}", file=sys.stderr)
        return 2
    except OSError as e:  # the report's folder or a file in it cannot be written (read errors are SweepErrors)
        where = e.filename or args.out or args.sweep_dir / "report"
        print(f"error: cannot write the report: {where}: {e.strerror or e}; choose another folder with --out",
              file=sys.stderr)
        return 2
    if report.sweep.apart:
        print(f"warning: {len(report.sweep.apart)} run(s) trained differently from their peers; each is its own row, "
              "not pooled with its arm's seeds (--strict makes this an error):", file=sys.stderr)
        for line in report.sweep.peers.apart_lines():
            print(f"  {line}", file=sys.stderr)
    if report.sweep.skipped:
        print(f"warning: skipped {len(report.sweep.skipped)} run folder(s) whose record (metrics.json, "
              "config.yaml) fails the contract, or whose val files do (--strict makes this an error):", file=sys.stderr)
        for path, reasons in report.sweep.skipped.items():
            print(f"  {path}:", file=sys.stderr)
            for reason in reasons:
                print(f"    {reason}", file=sys.stderr)
    runs = report.sweep.runs
    print(f"{len(runs)} runs ({int(runs['in_progress'].sum())} in progress), {report.sweep.k} samples per problem, "
          f"sets {', '.join(report.sweep.sets)}; {time.perf_counter() - start:.1f} s")
    for path in report.files.values():
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
