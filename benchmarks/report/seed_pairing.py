"""Benchmark: how much runs of two arms that share a seed share, measured on the project's studies.

Two sources, one table each:

- ``--doc``: the per-seed final scores the drift study publishes (``docs/drift_study.md``, rounds 2 and
  3: the tables of final mean@k whose cells end in the seeds' values, ``(v_1, ..., v_S)``, in seed
  order 1..S; two decimals). Per study and arm pair: the Pearson correlation ``r`` of the two arms'
  finals across the shared seeds with a 95% Fisher-z interval ``tanh(atanh r -+ 1.96 / sqrt(S - 3))``
  (none for S = 3), and the variance ratio ``var(a - b) / (var a + var b)`` (= 1 - r sd_a sd_b /
  ((sd_a^2 + sd_b^2) / 2)): the share of the unpaired seed variance a paired test keeps.
  Pooled per arm pair over the mismatch studies (every study but ``on_policy``, where the arms'
  losses coincide): the correlation of the within-study deviations from each arm's study mean,
  ``sum cov / sqrt(sum var_a sum var_b)`` over studies, with the Fisher interval at
  ``sum (S_i - 1)`` degrees of freedom (``1.96 / sqrt(df - 2)``).
- ``SWEEP_DIR ...``: run folders (``python -m analysis`` layout). The same correlations from the
  runs' final ``avg`` mean@k, and per seed and arm pair the trajectories: the first step whose
  sampled batch differs (the first train step where ``critic/score/mean`` or
  ``response_length/mean`` differ: before it both arms trained on the same responses), and the
  correlation over steps of the two arms' 20-step moving averages of ``critic/score/mean``
  (against the same arms on different seeds as a baseline); and both two-level tests side by side.

``--reread`` (with ``--doc``): the drift study's comparisons re-read from the same finals, run
level (the per-seed finals are all the document keeps; the problem part, 3-12% of the variance in
the calibration's sweeps, is left out, so both tests here are a little optimistic alike): the
unpaired Student t on the seeds' finals (``2S - 2`` df) and the paired t on their per-seed
differences (``S - 1`` df, ``scipy.stats.ttest_rel``), each with its 80%-power minimum detectable
difference (``analysis.seeds.minimum_detectable``); and the seed pairs a study would need to
detect a true difference delta with 80% power at the 5% level, ``n`` the smallest with
``(t_.975,n-1 + t_.80,n-1) sd_d / sqrt(n) <= delta`` (paired; ``sd_d`` the sd of the per-seed
differences pooled within the mismatch studies) or ``(t_.975,2n-2 + t_.80,2n-2)
sqrt((sd_a^2 + sd_b^2) / n) <= delta`` (unpaired, seeds per arm).

    python benchmarks/report/seed_pairing.py --doc [--reread] [--write]
    python benchmarks/report/seed_pairing.py /tmp/r20/drift_study/default
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

DOC = Path(__file__).resolve().parents[2] / "docs" / "drift_study.md"
STATS_DOC = Path(__file__).resolve().parents[2] / "docs" / "statistics.md"
START, END = "<!-- pairing:start -->", "<!-- pairing:end -->"
REREAD_START, REREAD_END = "<!-- paired-reread:start -->", "<!-- paired-reread:end -->"
DELTAS = (0.1, 0.2, 0.3, 0.4)  # the published effect sizes (verl PR #8010, the paper's 30B run)
NEEDED_PAIRS = (("sc", "pg"), ("sc", "tis"), ("tis", "pg"), ("sc_tis", "pg"), ("sc_tis", "tis"), ("sc_tis", "sc"))
ARMS = ("pg", "tis", "sc", "sc_tis")
CONTROL = "on_policy"
BATCH_METRICS = ("critic/score/mean", "response_length/mean")
Z95 = 1.959963984540054


def doc_finals(text: str) -> dict[str, dict[str, np.ndarray]]:
    """Per study (``r3 kv4``, ``r2 default``, ...) and arm: the seeds' finals of the rounds 2 and 3 tables."""
    out: dict[str, dict[str, np.ndarray]] = {}
    sections = re.split(r"^## ", text, flags=re.M)
    for section in sections:
        m = re.match(r"Round (\d)\b", section)
        if not m or m.group(1) not in ("2", "3"):
            continue
        for line in section.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) != 1 + len(ARMS):
                continue
            values = [re.search(r"\(((?:-?\d\.\d+, )+-?\d\.\d+)\)\s*$", c) for c in cells[1:]]
            scenario = cells[0].split()[0] if cells[0] else ""
            arms = {a: np.array([float(v) for v in g.group(1).split(", ")]) for a, g in zip(ARMS, values, strict=True)
                    if g}
            if len(arms) >= 1 and re.fullmatch(r"[a-z0-9_]+", scenario):
                out[f"r{m.group(1)} {scenario}"] = arms
    return out


def correlation(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """Pearson r with its 95% Fisher-z interval (NaN bounds below 4 pairs; NaN r without variance)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.std() == 0 or b.std() == 0:
        return float("nan"), float("nan"), float("nan")
    r = float(np.corrcoef(a, b)[0, 1])
    return (r, *fisher_interval(r, len(a) - 1))


def fisher_interval(r: float, df: int) -> tuple[float, float]:
    """``tanh(atanh r -+ 1.96 / sqrt(df - 2))`` for a correlation estimated with ``df`` degrees of freedom."""
    if df < 3 or not np.isfinite(r):
        return float("nan"), float("nan")
    z, half = np.arctanh(np.clip(r, -0.999999, 0.999999)), Z95 / np.sqrt(df - 2)
    return float(np.tanh(z - half)), float(np.tanh(z + half))


def variance_ratio(a: np.ndarray, b: np.ndarray) -> float:
    """``var(a - b) / (var a + var b)``: below 1 where the shared seed makes the pairs alike."""
    den = np.var(a, ddof=1) + np.var(b, ddof=1)
    return float(np.var(np.asarray(a) - np.asarray(b), ddof=1) / den) if den > 0 else float("nan")


def pooled(pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[float, float, float, int]:
    """Within-study pooled correlation, its interval and degrees of freedom (module docstring)."""
    da = [a - a.mean() for a, _ in pairs]
    db = [b - b.mean() for _, b in pairs]
    cov = sum(float((x * y).sum()) for x, y in zip(da, db, strict=True))
    den = np.sqrt(sum(float((x**2).sum()) for x in da) * sum(float((y**2).sum()) for y in db))
    df = sum(len(a) - 1 for a, _ in pairs)
    r = cov / den if den > 0 else float("nan")
    return (r, *fisher_interval(r, df), df)


def _fmt(x: float, signed: bool = False) -> str:
    return "—" if not np.isfinite(x) else (f"{x:+.2f}" if signed else f"{x:.2f}")


def _ci(lo: float, hi: float) -> str:
    return "—" if not np.isfinite(lo) else f"[{lo:+.2f}, {hi:+.2f}]"


def correlation_table(finals: dict[str, dict[str, np.ndarray]]) -> tuple[str, dict[str, tuple]]:
    """Markdown of the per-study correlations and the pooled ones; returns (text, pooled per arm pair)."""
    lines = ["| study | arm pair | seeds | r [95%] | var(a − b) / (var a + var b) |", "|---|---|---|---|---|"]
    by_pair: dict[str, list] = {}
    for study, arms in finals.items():
        for a, b in combinations([x for x in ARMS if x in arms], 2):
            r, lo, hi = correlation(arms[a], arms[b])
            lines.append(f"| {study} | {a} − {b} | {len(arms[a])} | {_fmt(r, True)} {_ci(lo, hi)} | "
                         f"{_fmt(variance_ratio(arms[a], arms[b]))} |")
            if not study.endswith(CONTROL):
                by_pair.setdefault(f"{a} − {b}", []).append((arms[a], arms[b]))
    lines += ["", "| arm pair, pooled over the mismatch studies | df | r [95%] | variance ratio |",
              "|---|---|---|---|"]
    out = {}
    all_pairs = [p for ps in by_pair.values() for p in ps]
    for name, pairs in [*by_pair.items(), ("every arm pair", all_pairs)]:
        r, lo, hi, df = pooled(pairs)
        va = sum(float(((a - a.mean()) ** 2).sum()) for a, _ in pairs)
        vb = sum(float(((b - b.mean()) ** 2).sum()) for _, b in pairs)
        vd = sum(float((((a - b) - (a - b).mean()) ** 2).sum()) for a, b in pairs)
        lines.append(f"| {name} | {df} | {_fmt(r, True)} {_ci(lo, hi)} | {_fmt(vd / (va + vb))} |")
        out[name] = (r, lo, hi, df)
    return "\n".join(lines), out


# -- the studies re-read with the paired test ---------------------------------------------------------
def mde80(se: float, df: float) -> float:
    """``(t_.975,df + t_.80,df) se`` (as ``analysis.seeds.minimum_detectable``)."""
    return float((stats.t.ppf(0.975, df) + stats.t.ppf(0.8, df)) * se)


def reread_table(finals: dict[str, dict[str, np.ndarray]]) -> str:
    """Markdown: per mismatch study and arm pair (a − b, as the drift study orders them), both run-level tests."""
    lines = ["| study | a − b | diff | unpaired: p, mde80 | paired: 95% CI | paired: p, mde80 | r |",
             "|---|---|---|---|---|---|---|"]
    for study, arms in finals.items():
        if study.endswith(CONTROL):
            continue
        for a, b in NEEDED_PAIRS:
            if a not in arms or b not in arms:
                continue
            x, y = arms[a], arms[b]
            s = len(x)
            un = stats.ttest_ind(x, y)
            se_un = float(np.sqrt((np.var(x, ddof=1) + np.var(y, ddof=1)) / s))
            pa = stats.ttest_rel(x, y)
            se_pa = float(np.std(x - y, ddof=1) / np.sqrt(s))
            ci = pa.confidence_interval(0.95)
            lines.append(f"| {study} | {a} − {b} | {x.mean() - y.mean():+.3f} | {un.pvalue:.3f}, "
                         f"{mde80(se_un, 2 * s - 2):.2f} | [{ci.low:+.2f}, {ci.high:+.2f}] | {pa.pvalue:.3f}, "
                         f"{mde80(se_pa, s - 1):.2f} | {correlation(x, y)[0]:+.2f} |")
    controls = {study.split()[0]: arms["pg"] for study, arms in finals.items() if study.endswith(CONTROL)}
    for study, arms in finals.items():  # across sweeps (analysis.cross): each arm against on-policy PG
        control = controls.get(study.split()[0])
        if study.endswith(CONTROL) or control is None or "r3" not in study:
            continue
        for a in [x for x in ARMS if x in arms]:
            x, y, s = arms[a], control, len(control)
            un, pa = stats.ttest_ind(x, y), stats.ttest_rel(x, y)
            se_un = float(np.sqrt((np.var(x, ddof=1) + np.var(y, ddof=1)) / s))
            se_pa = float(np.std(x - y, ddof=1) / np.sqrt(s))
            ci = pa.confidence_interval(0.95)
            lines.append(f"| {study} vs r3 on_policy | {a} − on-policy pg | {x.mean() - y.mean():+.3f} | "
                         f"{un.pvalue:.3f}, {mde80(se_un, 2 * s - 2):.2f} | [{ci.low:+.2f}, {ci.high:+.2f}] | "
                         f"{pa.pvalue:.3f}, {mde80(se_pa, s - 1):.2f} | {correlation(x, y)[0]:+.2f} |")
    return "\n".join(lines)


def pairs_needed(sd: float, delta: float, paired: bool, cap: int = 1000) -> int:
    """Smallest n (seed pairs, or seeds per arm unpaired with ``sd`` = sqrt(sd_a^2 + sd_b^2)) with mde80 <= delta."""
    for n in range(2, cap + 1):
        df = n - 1 if paired else 2 * n - 2
        if mde80(sd / np.sqrt(n), df) <= delta:
            return n
    return cap


def needed_table(finals: dict[str, dict[str, np.ndarray]]) -> str:
    """Markdown: the seed pairs (and unpaired seeds per arm) to detect each delta of :data:`DELTAS`."""
    head = " / ".join(f"+{d:.1f}" for d in DELTAS)
    lines = [f"| a − b | pooled sd of per-seed differences (df) | sd_a, sd_b | seed pairs for {head} | "
             f"seeds per arm, unpaired, for {head} |", "|---|---|---|---|---|"]
    for a, b in NEEDED_PAIRS:
        studies = [arms for study, arms in finals.items() if not study.endswith(CONTROL) and a in arms and b in arms]
        df = sum(len(arms[a]) - 1 for arms in studies)
        sd_d = np.sqrt(sum(np.var(arms[a] - arms[b], ddof=1) * (len(arms[a]) - 1) for arms in studies) / df)
        sd_a = np.sqrt(sum(np.var(arms[a], ddof=1) * (len(arms[a]) - 1) for arms in studies) / df)
        sd_b = np.sqrt(sum(np.var(arms[b], ddof=1) * (len(arms[b]) - 1) for arms in studies) / df)
        paired = " / ".join(str(pairs_needed(sd_d, d, True)) for d in DELTAS)
        unpaired = " / ".join(str(pairs_needed(np.hypot(sd_a, sd_b), d, False)) for d in DELTAS)
        lines.append(f"| {a} − {b} | {sd_d:.3f} ({df}) | {sd_a:.3f}, {sd_b:.3f} | {paired} | {unpaired} |")
    return "\n".join(lines)


def _write(start: str, end: str, text: str, doc_path: Path) -> None:
    doc = doc_path.read_text()
    if start not in doc or end not in doc:
        raise SystemExit(f"{doc_path}: the markers {start} and {end} are missing")
    doc_path.write_text(re.sub(re.escape(start) + ".*?" + re.escape(end), lambda _: f"{start}\n{text}\n{end}", doc,
                               flags=re.S))


# -- run folders ----------------------------------------------------------------------------------
def sweep_finals(sweep) -> dict[str, dict[int, float]]:
    """Per method and seed: the run's final ``avg`` mean@k (the last evaluated step)."""
    out: dict[str, dict[int, float]] = {}
    for run in sweep.evaluated_runs:
        curve = sweep.avg_scores.loc[run]
        out.setdefault(sweep.runs.at[run, "method"], {})[int(sweep.runs.at[run, "seed"])] = float(curve.iloc[-1])
    return out


def first_differing_step(a: pd.DataFrame, b: pd.DataFrame, metrics: Sequence[str] = BATCH_METRICS) -> int | None:
    """First train step where any of ``metrics`` differs between two runs (None: never within both)."""
    steps = sorted(set(a.index) & set(b.index))
    for step in steps:
        if any(a.at[step, m] != b.at[step, m] for m in metrics):
            return int(step)
    return None


def trajectory_table(sweep) -> str:
    """Markdown: per arm pair and seed, the first differing step and the curve correlation."""
    train = sweep.train.set_index(["run", "step"]).sort_index()
    runs = {(sweep.runs.at[r, "method"], int(sweep.runs.at[r, "seed"])): r for r in sweep.runs.index}
    methods = [m for m in ARMS if any(k[0] == m for k in runs)]
    seeds = sorted({s for _, s in runs})

    def curve(run: str) -> pd.Series:
        return train.loc[run]["critic/score/mean"].rolling(20, min_periods=1).mean()

    lines = ["| arm pair | seed | first differing step | r of the score curves (same seed) | "
             "r, different seeds (mean) |", "|---|---|---|---|---|"]
    for a, b in combinations(methods, 2):
        for s in seeds:
            if (a, s) not in runs or (b, s) not in runs:
                continue
            ra, rb = runs[(a, s)], runs[(b, s)]
            first = first_differing_step(train.loc[ra], train.loc[rb])
            same = float(curve(ra).corr(curve(rb)))  # over the steps both runs trained
            others = [float(curve(ra).corr(curve(runs[(b, t)]))) for t in seeds if t != s and (b, t) in runs]
            lines.append(f"| {a} − {b} | {s} | {first if first is not None else 'never'} | {same:+.3f} | "
                         f"{np.mean(others):+.3f} |")
    return "\n".join(lines)


def both_tests_table(sweep) -> str:
    """Markdown: per arm pair at the final checkpoint (avg), the unpaired and the paired two-level test side
    by side (for the record: the report uses the one its design calls for, ``analysis.pairing``)."""
    from analysis.seeds import diff_paired_two_level, diff_two_level, minimum_detectable
    from analysis.tables import arm_scores, checkpoint_steps

    arms = arm_scores(sweep, checkpoint_steps(sweep, ["final"]))
    lines = ["| a − b | diff | unpaired two-level: p, mde80 | paired two-level: 95% CI, p, mde80 |", "|---|---|---|---|"]
    for a, b in combinations([m for m in ARMS if m in arms], 2):
        (ra, ya), (rb, yb) = arms[a], arms[b]
        order_a = np.argsort([sweep.runs.at[r, "seed"] for r in ra])
        order_b = np.argsort([sweep.runs.at[r, "seed"] for r in rb])
        un = diff_two_level(ya, yb, sweep.set_slices)
        pa = diff_paired_two_level(ya[order_a], yb[order_b], sweep.set_slices)
        mu, mp = minimum_detectable(un["se"], un["df"])[-1], minimum_detectable(pa["se"], pa["df"])[-1]
        lines.append(f"| {a} − {b} | {un['estimate'][-1]:+.3f} | {un['p_value'][-1]:.3f}, {mu:.2f} | "
                     f"[{pa['ci_low'][-1]:+.2f}, {pa['ci_high'][-1]:+.2f}], {pa['p_value'][-1]:.3f}, {mp:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="*", type=Path, help="sweep folders to measure")
    parser.add_argument("--doc", action="store_true", help=f"measure the seeds published in {DOC.name}")
    parser.add_argument("--reread", action="store_true", help="with --doc: the comparisons re-read, seeds needed")
    parser.add_argument("--write", action="store_true",
                        help="write the --doc table into docs/statistics.md (--reread's into docs/drift_study.md)")
    args = parser.parse_args(argv)
    if args.doc:
        finals = doc_finals(DOC.read_text())
        text, _ = correlation_table(finals)
        text = (f"Measured with `python benchmarks/report/seed_pairing.py --doc --write` from the seeds' finals in "
                f"`docs/drift_study.md` (two decimals, seed order 1..S).\n\n{text}")
        print(text)
        if args.write:
            _write(START, END, text, STATS_DOC)
        if args.reread:
            reread = (f"Made with `python benchmarks/report/seed_pairing.py --doc --reread --write` from the seeds' "
                      f"finals in the tables above (two decimals).\n\n{reread_table(finals)}\n\n"
                      f"{needed_table(finals)}")
            print("\n" + reread)
            if args.write:
                _write(REREAD_START, REREAD_END, reread, DOC)
    if args.sweeps:
        from analysis.load import load_sweep

        for path in args.sweeps:
            sweep = load_sweep(path)
            finals = sweep_finals(sweep)
            common = sorted(set.intersection(*(set(v) for v in finals.values())))
            arrays = {m: np.array([finals[m][s] for s in common]) for m in finals}
            print(f"\n{path} (seeds {common}): finals {({m: np.round(v, 3).tolist() for m, v in arrays.items()})}")
            print(correlation_table({path.name: arrays})[0].split("\n\n")[0])
            print()
            print(both_tests_table(sweep))
            print()
            print(trajectory_table(sweep))
    if not args.doc and not args.sweeps:
        parser.error("give --doc or sweep folders")
    return 0


if __name__ == "__main__":
    sys.exit(main())
