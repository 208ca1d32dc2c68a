"""Benchmark: calibration of the report's paired comparison, on simulated sweeps of two arms.

Each sweep: two arms x S seeds, one set of 30 problems x 8 samples, solve rates Beta(0.6, 0.9),
a seed effect on the logit of each run (:func:`analysis.synthetic.two_arm_counts`); a fresh
problem set per sweep. For every cell (seeds per arm 1, 2, 3, 5, 10 and 3 vs 5, x two seed-effect
sizes) it measures, over
N null sweeps (truly equal arms) and N shifted sweeps (arm B better by +0.10 expected accuracy):

- ``FPR``: share of null sweeps the report calls significant (p < 0.05). S >= 2: the two-level t
  of :func:`analysis.seeds.diff_two_level`, the function ``analysis.tables.paired_table`` calls
  (``tests/test_analysis_calibration.py`` checks they agree on sweeps written to disk); S = 1: the
  report never calls a single-seed comparison significant (checked here on ``--report-sweeps``
  sweeps written to disk and read by the report's own code);
- ``power``: the same share on the shifted sweeps; ``coverage``: share of shifted sweeps whose 95%
  interval holds the true +0.10; ``width``: mean interval width;
- ``problem-only FPR``: what the problem-level statistics reject under the null (sign-flip test
  over problems on the seed-averaged scores, the paired test of the report before seeds were
  counted; for S = 1 the interval the report still shows, labelled single seed).

Seed pairs (the second table, ``--paired-only --corr``): sweeps whose arms share their seeds, the seed
effects of run s of both arms correlated at rho (``two_arm_counts(..., seed_corr=rho)``), for 2, 3, 5
and 10 seeds per arm at a run-accuracy sd of 0.07: FPR at nominal 5% and power against +0.10 of the
paired test (:func:`analysis.seeds.diff_paired_two_level`, what the report uses for seed pairs) and
the unpaired one (:func:`analysis.seeds.diff_two_level`), side by side, with each test's mean 80%
minimum detectable difference and the correlation of the arms' run scores the sweeps show (the
quantity ``benchmarks/report/seed_pairing.py`` measures on the studies).

Writes the tables between the calibration markers of ``docs/statistics.md`` (``--write``) and prints them.

    python benchmarks/report/calibration.py [--sweeps 1000] [--write]
    python benchmarks/report/calibration.py --paired-only --corr 0,0.3,0.6,0.9,0.57 --sweeps 4000 --write
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy import optimize

from analysis.load import load_sweep
from analysis.seeds import diff_paired_two_level, diff_two_level, minimum_detectable
from analysis.stats import Resampler, percentile_interval, sign_flip_pvalue
from analysis.synthetic import run_accuracy_sd, true_difference, two_arm_counts, write_two_arm_sweep
from analysis.tables import paired_table

DOC = Path(__file__).resolve().parents[2] / "docs" / "statistics.md"
START, END = "<!-- calibration:start -->", "<!-- calibration:end -->"
PAIRED_START, PAIRED_END = "<!-- paired-calibration:start -->", "<!-- paired-calibration:end -->"
PAIRED_SEEDS = (2, 3, 5, 10)
PAIRED_SEED_SD_LOGIT = 0.5  # run-accuracy sd about 0.07
CORRELATIONS = (0.0, 0.3, 0.6, 0.9)
K, N_PROBLEMS, ALPHA, TRUE_DIFF = 8, 30, 0.05, 0.10
SEEDS = ((1, 1), (2, 2), (3, 3), (5, 5), (10, 10), (3, 5))  # seeds of arm A, arm B
SEED_SD_LOGIT = (0.2, 0.5)  # run-accuracy sd about 0.03 and 0.07
SLICES = [slice(0, N_PROBLEMS)]


def shift_for(diff: float, seed_sd_logit: float) -> float:
    """Logit shift of arm B whose expected accuracy gain is ``diff``."""
    return optimize.brentq(lambda s: true_difference(s, seed_sd_logit=seed_sd_logit) - diff, 0.0, 3.0, xtol=1e-4)


def problem_only(ca: np.ndarray, cb: np.ndarray, n_flip: int, resampler: Resampler) -> tuple[np.ndarray, np.ndarray]:
    """Sign-flip p-values and bootstrap-interval-excludes-0 flags of B - A on seed-averaged scores."""
    d = (cb / K).mean(axis=1) - (ca / K).mean(axis=1)
    p = np.array([sign_flip_pvalue(row, n_flip=n_flip) for row in d])
    lo, hi = percentile_interval(resampler.means(d))
    return p, (lo > 0) | (hi < 0)


def report_single_seed_significant(ca: np.ndarray, cb: np.ndarray, n: int) -> tuple[int, int]:
    """(significant rows, rows) of the report's paired table on ``n`` single-seed sweeps written to disk."""
    significant = rows = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(n):
            paired = paired_table(load_sweep(write_two_arm_sweep(Path(tmp) / f"s{i}", ca[i], cb[i], K)), ["final"],
                                  n_flip=500)
            significant += int(paired["significant"].sum())
            rows += len(paired)
    return significant, rows


def cell(seeds_ab: tuple[int, int], seed_sd_logit: float, n: int, rng_seed: int, n_flip: int,
         report_sweeps: int) -> dict:
    sa, sb = seeds_ab
    seeds = max(sa, sb)
    shift = shift_for(TRUE_DIFF, seed_sd_logit)
    rng = np.random.default_rng([rng_seed, sa, sb, int(seed_sd_logit * 1000)])
    null = two_arm_counts(rng, n, seeds, n_problems=N_PROBLEMS, k=K, seed_sd_logit=seed_sd_logit)
    alt = two_arm_counts(rng, n, seeds, n_problems=N_PROBLEMS, k=K, seed_sd_logit=seed_sd_logit, shift_logit=shift)
    null, alt = (null[0][:, :sa], null[1][:, :sb]), (alt[0][:, :sa], alt[1][:, :sb])
    resampler = Resampler(n_boot=2000, seed=rng_seed)
    p_old, excl_old = problem_only(*null, n_flip, resampler)
    out = {"seeds": f"{sa}" if sa == sb else f"{sa} / {sb}", "single": seeds == 1, "run_sd": run_accuracy_sd(seed_sd_logit), "seed_sd_logit": seed_sd_logit,
           "shift": shift, "problem_only_fpr": float((p_old < ALPHA).mean()),
           "problem_ci_excludes_0": float(excl_old.mean())}
    if min(sa, sb) >= 2:
        t0 = diff_two_level(null[1] / K, null[0] / K, SLICES)
        t1 = diff_two_level(alt[1] / K, alt[0] / K, SLICES)
        out.update(fpr=float((t0["p_value"][-1] < ALPHA).mean()), power=float((t1["p_value"][-1] < ALPHA).mean()),
                   coverage=float(((t1["ci_low"][-1] <= TRUE_DIFF) & (TRUE_DIFF <= t1["ci_high"][-1])).mean()),
                   width=float((t1["ci_high"][-1] - t1["ci_low"][-1]).mean()))
    else:
        sig, rows = report_single_seed_significant(*null, report_sweeps)
        if sig:
            raise AssertionError(f"the report called {sig} of {rows} single-seed comparisons significant")
        d = (alt[1] / K).mean(axis=1) - (alt[0] / K).mean(axis=1)
        lo, hi = percentile_interval(resampler.means(d))
        out.update(fpr=0.0, power=0.0, coverage=float(((lo <= TRUE_DIFF) & (TRUE_DIFF <= hi)).mean()),
                   width=float((hi - lo).mean()), report_rows=rows)
    return out


def table(cells: list[dict], n: int, seconds: float, command: str) -> str:
    se = np.sqrt(ALPHA * (1 - ALPHA) / n)
    lines = [
        f"Measured with `{command}` ({n:,} null and {n:,} shifted sweeps per cell; {seconds:.0f} s on the 2-core "
        f"machine). Monte Carlo standard error of a rate near 5%: {se:.3f}. True difference of the shifted "
        f"sweeps: +{TRUE_DIFF:.2f} expected accuracy.", "",
        "| seeds per arm | run-accuracy sd (seed effect, logit sd) | report FPR at 5% | power vs +0.10 | "
        "coverage of +0.10 | mean 95% CI width | problem-only test FPR | problem-only CI excludes 0 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        single = c["single"]
        lines.append(
            f"| {c['seeds']} | {c['run_sd']:.3f} ({c['seed_sd_logit']:.2f}) | "
            + (f"0 (by rule; {c['report_rows']} report rows checked)" if single else f"{c['fpr']:.3f}") + " | "
            + ("— (never significant)" if single else f"{c['power']:.3f}") + " | "
            + f"{c['coverage']:.3f}{' (problem-level CI)' if single else ''} | {c['width']:.3f} | "
            + f"{c['problem_only_fpr']:.3f} | {c['problem_ci_excludes_0']:.3f} |")
    return "\n".join(lines)


def paired_cell(seeds: int, rho: float, n: int, rng_seed: int, seed_sd_logit: float = PAIRED_SEED_SD_LOGIT,
                paired_df: str = "seeds") -> dict:
    """FPR, power, mean mde80 of the paired and the unpaired test on sweeps of seed pairs correlated at ``rho``."""
    shift = shift_for(TRUE_DIFF, seed_sd_logit)
    rng = np.random.default_rng([rng_seed, seeds, round(rho * 1000), 20])
    kw = {"n_problems": N_PROBLEMS, "k": K, "seed_sd_logit": seed_sd_logit, "seed_corr": rho}
    null = two_arm_counts(rng, n, seeds, **kw)
    alt = two_arm_counts(rng, n, seeds, shift_logit=shift, **kw)
    ra, rb = null[0].mean(axis=-1), null[1].mean(axis=-1)  # run scores (sweeps, seeds)
    da, db = ra - ra.mean(axis=1, keepdims=True), rb - rb.mean(axis=1, keepdims=True)
    out = {"seeds": seeds, "rho": rho, "run_corr": float((da * db).sum() / np.sqrt((da**2).sum() * (db**2).sum()))}
    def paired(yb: np.ndarray, ya: np.ndarray, slices: list[slice]) -> dict[str, np.ndarray]:
        return diff_paired_two_level(yb, ya, slices, df_rule=paired_df)

    for name, test in (("paired", paired), ("unpaired", diff_two_level)):
        t0, t1 = test(null[1] / K, null[0] / K, SLICES), test(alt[1] / K, alt[0] / K, SLICES)
        out[f"{name}_fpr"] = float((t0["p_value"][-1] < ALPHA).mean())
        out[f"{name}_power"] = float((t1["p_value"][-1] < ALPHA).mean())
        out[f"{name}_mde80"] = float(minimum_detectable(t1["se"][-1], t1["df"][-1]).mean())
    return out


def seed_pair_table(cells: list[dict], n: int, seconds: float, command: str) -> str:
    lines = [
        f"Measured with `{command}` ({n:,} null and {n:,} shifted sweeps per cell; {seconds:.0f} s on the 2-core "
        f"machine; 30 problems x {K} samples, run-accuracy sd {run_accuracy_sd(PAIRED_SEED_SD_LOGIT):.3f}, "
        f"true difference +{TRUE_DIFF:.2f}). Monte Carlo se of a rate near 5%: "
        f"{np.sqrt(ALPHA * (1 - ALPHA) / n):.3f}.", "",
        "| seeds per arm | seed-effect correlation | run-score correlation | FPR paired | FPR unpaired | "
        "power paired | power unpaired | mean mde80 paired | mean mde80 unpaired |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        lines.append(f"| {c['seeds']} | {c['rho']:.2f} | {c['run_corr']:.2f} | {c['paired_fpr']:.3f} | "
                     f"{c['unpaired_fpr']:.3f} | {c['paired_power']:.3f} | {c['unpaired_power']:.3f} | "
                     f"{c['paired_mde80']:.3f} | {c['unpaired_mde80']:.3f} |")
    return "\n".join(lines)


def _write(start: str, end: str, text: str) -> None:
    doc = DOC.read_text()
    if start not in doc or end not in doc:
        raise SystemExit(f"{DOC}: the markers {start} and {end} are missing")
    DOC.write_text(re.sub(re.escape(start) + ".*?" + re.escape(end), lambda _: f"{start}\n{text}\n{end}", doc,
                          flags=re.S))
    print(f"wrote the table into {DOC}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=1000, help="null and shifted sweeps per cell (default 1000)")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--n-flip", type=int, default=2000, help="sign flips of the problem-only test")
    parser.add_argument("--report-sweeps", type=int, default=20,
                        help="single-seed sweeps per cell run through the report's own code (default 20)")
    parser.add_argument("--write", action="store_true", help=f"write the table into {DOC.relative_to(DOC.parents[1])}")
    parser.add_argument("--corr", default=",".join(str(c) for c in CORRELATIONS),
                        help="seed-effect correlations of the seed-pair table (comma list, each in [0, 1))")
    parser.add_argument("--paired-only", action="store_true",
                        help="the seed-pair table instead of the independent-seed table")
    parser.add_argument("--paired-df", choices=("seeds", "satterthwaite"), default="seeds",
                        help="df of the paired test (analysis.seeds.diff_paired_two_level; the report: seeds)")
    args = parser.parse_args(argv)
    if args.sweeps < 100:
        parser.error("--sweeps must be >= 100 for a meaningful rate")
    corrs = [float(c) for c in args.corr.split(",")]
    if any(not 0 <= c < 1 for c in corrs):
        parser.error(f"--corr values must lie in [0, 1), got {args.corr}")
    start = time.perf_counter()
    if not args.paired_only:
        return unpaired_main(args, start)
    paired_cells = [paired_cell(s, rho, args.sweeps, args.seed, paired_df=args.paired_df)
                    for s in PAIRED_SEEDS for rho in corrs]
    command = (f"python benchmarks/report/calibration.py --paired-only --corr {args.corr}"
               + (f" --paired-df {args.paired_df}" if args.paired_df != "seeds" else "")
               + (f" --sweeps {args.sweeps}" if args.sweeps != 1000 else "")
               + (f" --seed {args.seed}" if args.seed != 2026 else "") + " --write")
    text = seed_pair_table(paired_cells, args.sweeps, time.perf_counter() - start, command)
    print(text)
    if args.write and args.paired_df == "seeds":
        _write(PAIRED_START, PAIRED_END, text)
    return 0


def unpaired_main(args: argparse.Namespace, start: float) -> int:
    """The first table: independent seeds, every seed count and both seed-effect sizes."""
    cells = []
    for tau in SEED_SD_LOGIT:
        for s in SEEDS:
            cells.append(cell(s, tau, args.sweeps, args.seed, args.n_flip, args.report_sweeps))
            print(f"seeds {s[0]}/{s[1]}, logit sd {tau}: done ({time.perf_counter() - start:.0f} s)", file=sys.stderr)
    command = "python benchmarks/report/calibration.py" + (f" --sweeps {args.sweeps}" if args.sweeps != 1000 else "") + (
        f" --seed {args.seed}" if args.seed != 2026 else "") + " --write"
    text = table(cells, args.sweeps, time.perf_counter() - start, command)
    print(text)
    if args.write:
        _write(START, END, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
