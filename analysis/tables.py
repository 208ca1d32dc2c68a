"""The report's tables as pandas frames, computed from the tidy table of a :class:`Sweep`.

Checkpoints: ``final`` is a run's last evaluated step; ``best`` the evaluated step with the
highest ``avg`` mean@k (the earliest on ties; step 0, before training, counts). ``best`` is
selected on the very sets it is reported on, so it is optimistic. An integer step ``N`` (label
``step_N``) picks that evaluated step in every run.

Seeds. A run's rows describe that run alone: mean@k, se and a percentile bootstrap over problems
(:mod:`analysis.stats`). A method with >= 2 seeds also gets an aggregate row whose interval counts
both levels, seeds and problems (:func:`analysis.seeds.mean_two_level`). A paired comparison of
two methods that both have >= 2 seeds is a two-level t-test and interval (``seed_variance`` True;
significant when p < ``ALPHA``): on seed pairs (:func:`analysis.seeds.diff_paired_two_level`) when
the runs' records make them pairs (:mod:`analysis.pairing`), else on independent seeds
(:func:`analysis.seeds.diff_two_level`); the design decides, never the p-value.
When either method has a single seed the between-seed variance cannot be estimated: the row gives
the problem-level paired bootstrap interval and sign-flip p-value of the seed-averaged per-problem
scores, labelled :data:`SINGLE_SEED`, and is never significant. Every statistic reads the repeat-0
evaluations; repeated evaluations only feed :func:`retest_table`.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import numpy as np
import pandas as pd

from analysis.load import Sweep, SweepError
from analysis.pairing import arm_design, compare
from analysis.planned import plan
from analysis.seeds import mean_two_level, minimum_detectable
from analysis.stats import (
    N_FLIP,
    SEED,
    Resampler,
    pass_at_k,
    set_summaries,
    sign_flip_pvalue,
    stratified_weights,
)
from runners.run.checkpoint_selection import best_steps

AVG = "avg"
ALPHA = 0.05
SINGLE_SEED = "single seed: between-seed variance not estimated"
TWO_LEVEL = "two-level t (seeds and problems)"
PAIRED_TWO_LEVEL = "paired two-level t (seed pairs and problems)"
SINGLE_SEED_PAIRING = "unpaired: a single seed in an arm"
PROBLEM_LEVEL = "bootstrap over problems"
COMPARISON_COLUMNS = ["method", "seed", "run", "data_source", "checkpoint", "step", "k", "n_problems",
                      "mean_at_k", "se", "ci_low", "ci_high", "n_seeds", "interval"]
PAIRED_COLUMNS = ["method_a", "method_b", "data_source", "checkpoint", "diff", "ci_low", "ci_high", "p_value",
                  "n_problems", "seeds_a", "seeds_b", "se", "df", "test", "seed_variance", "significant",
                  "pairs", "pairing", "mde80", "planned", "adjustment", "p_adjusted", "verdict"]
RETEST_COLUMNS = ["run", "method", "step", "data_source", "n_repeats", "mean_at_k", "sd", "predicted_sd"]
EVAL_CURVE_COLUMNS = ["curve", "method", "step", "data_source", "mean_at_k", "ci_low", "ci_high", "n_seeds"]
PASSK_COLUMNS = ["method", "seed", "run", "data_source", "checkpoint", "step", "n_samples", "k", "pass_at_k"]
#: The label of the late-window endpoint: each problem's score averaged over a run's last quarter.
LAST_QUARTER = "last_quarter"
#: The window's start as a fraction of the run's last evaluated step (inclusive).
LAST_QUARTER_FROM = 0.75
CHECKPOINT_NOTES = {
    "final": "the last evaluated step of each run",
    "best": "the step with the highest avg mean@k of each run — selected on the test sets, optimistic",
    LAST_QUARTER: "each problem's score averaged over the run's evaluations at steps >= 3/4 of its last "
                  "evaluated step (step = the last one)",
}


def aggregate_label(method: str, n_seeds: int) -> str:
    """Run label of a method's across-seed aggregate row."""
    return f"{method} (mean of {n_seeds} seeds)"


def checkpoint_note(label: str) -> str:
    return CHECKPOINT_NOTES.get(label, f"evaluated step {label.removeprefix('step_')} in every run")


def set_labels(sweep: Sweep) -> list[str]:
    """The evaluation sets followed by ``avg`` (the row order of :func:`analysis.stats.set_summaries`)."""
    return [*sweep.sets, AVG]


def set_sizes(sweep: Sweep) -> list[int]:
    """Problems per set and, last, over all sets."""
    sizes = [len(sweep.problems[ds]) for ds in sweep.sets]
    return [*sizes, sum(sizes)]


def avg_curve(sweep: Sweep, run: str) -> pd.Series:
    """``avg`` mean@k (mean of the sets' mean@k) of ``run`` at each evaluated step."""
    return pd.Series(sweep.avg_scores.to_numpy()[sweep.rows(run)], index=pd.Index(sweep.steps(run), name="step"),
                     name=run)


def checkpoint_steps(sweep: Sweep, checkpoints: Sequence[str | int] = ("final", "best")) -> pd.DataFrame:
    """One row per (evaluated run, checkpoint): run, checkpoint (label), step."""
    rows = []
    for cp in checkpoints:
        for run in sweep.evaluated_runs:
            curve = avg_curve(sweep, run)
            if cp == "final":
                rows.append((run, "final", int(curve.index[-1])))
            elif cp == "best":
                rows.append((run, "best", best_steps(curve.to_dict())[0]))
            elif cp == LAST_QUARTER:
                rows.append((run, LAST_QUARTER, int(curve.index[-1])))
            else:
                step = int(cp)
                if step not in curve.index:
                    raise SweepError(f"checkpoint step {step}: run {run} ({sweep.runs.at[run, 'path']}) has no "
                                     f"evaluation at that step; evaluated steps: {list(curve.index)}")
                rows.append((run, f"step_{step}", step))
    return pd.DataFrame(rows, columns=["run", "checkpoint", "step"])


def window_steps(sweep: Sweep, run: str, checkpoint: str, step: int) -> list[int]:
    """The evaluated steps one checkpoint row stands for: ``[step]``, or for :data:`LAST_QUARTER` every
    evaluated step ``s`` of ``run`` with ``s >= LAST_QUARTER_FROM * step`` (``step`` = its last)."""
    if checkpoint != LAST_QUARTER:
        return [int(step)]
    return [int(s) for s in sweep.steps(run) if s >= LAST_QUARTER_FROM * step]


def _scores_at(sweep: Sweep, run: str, step: int, checkpoint: str = "") -> np.ndarray:
    """Per-problem mean correctness of ``run`` at a checkpoint row: the evaluation at ``step``, or the mean
    over the evaluations of :func:`window_steps`."""
    steps, x = sweep.scores(run)
    return np.mean([x[np.flatnonzero(steps == s)[0]] for s in window_steps(sweep, run, checkpoint, step)], axis=0)


def arm_scores(sweep: Sweep, cps: pd.DataFrame) -> dict[str, tuple[list[str], np.ndarray]]:
    """Per method: its runs and their per-problem scores (S, n) at the steps of ``cps`` (one checkpoint)."""
    out: dict[str, tuple[list[str], list[np.ndarray]]] = {}
    for run, cp, step in cps.itertuples(index=False):
        runs, rows = out.setdefault(sweep.runs.at[run, "method"], ([], []))
        runs.append(run)
        rows.append(_scores_at(sweep, run, step, cp))
    return {m: (runs, np.stack(rows)) for m, (runs, rows) in out.items()}


def comparison_table(sweep: Sweep, checkpoints: Sequence[str | int] = ("final", "best"),
                     resampler: Resampler | None = None) -> pd.DataFrame:
    """Per (run, data_source incl. ``avg``, checkpoint): mean@k, se and 95% bootstrap interval over problems.

    Columns :data:`COMPARISON_COLUMNS` (run_contract.md, "report/"; ``n_seeds`` = 1 and
    ``interval`` = :data:`PROBLEM_LEVEL` on these rows).
    """
    resampler = resampler or Resampler()
    cps = checkpoint_steps(sweep, checkpoints)
    labels, sizes = set_labels(sweep), set_sizes(sweep)
    rows = []
    if cps.empty:
        return pd.DataFrame(columns=COMPARISON_COLUMNS)
    x = np.stack([_scores_at(sweep, r, s, cp) for r, cp, s in cps.itertuples(index=False)])
    summ = set_summaries(x, sweep.set_slices, resampler)
    for i, (run, cp, step) in enumerate(cps.itertuples(index=False)):
        method, seed = sweep.runs.at[run, "method"], sweep.runs.at[run, "seed"]
        for j, ds in enumerate(labels):
            rows.append({"method": method, "seed": seed, "run": run, "data_source": ds, "checkpoint": cp,
                         "step": step, "k": sweep.k, "n_problems": sizes[j], "mean_at_k": summ["mean"][j, i],
                         "se": summ["se"][j, i], "ci_low": summ["ci_low"][j, i], "ci_high": summ["ci_high"][j, i],
                         "n_seeds": 1, "interval": PROBLEM_LEVEL})
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def seeds_per_method(sweep: Sweep) -> dict[str, int]:
    """Number of evaluated runs (seeds) of each method."""
    counts = sweep.runs.loc[sweep.evaluated_runs, "method"].value_counts()
    return {m: int(counts.get(m, 0)) for m in sweep.methods}


def seed_aggregate_table(sweep: Sweep, checkpoints: Sequence[str | int] = ("final", "best")) -> pd.DataFrame:
    """One row per (method with >= 2 seeds, data_source, checkpoint), in :data:`COMPARISON_COLUMNS`.

    ``mean_at_k`` = mean of the seeds' mean@k; ``se``, ``ci_low``/``ci_high`` = the two-level
    standard error and 95% t interval of :func:`analysis.seeds.mean_two_level` (seed part + problem
    part, Satterthwaite df); ``step`` is the seeds' common step or NaN; ``seed`` is NaN and ``run``
    names the aggregate (:func:`aggregate_label`).
    """
    labels, sizes = set_labels(sweep), set_sizes(sweep)
    rows = []
    for cp in checkpoints:
        cps = checkpoint_steps(sweep, [cp])
        label = cps["checkpoint"].iloc[0] if len(cps) else str(cp)
        for method, (runs, y) in arm_scores(sweep, cps).items():
            if len(runs) < 2:
                continue
            summ = mean_two_level(y, sweep.set_slices)
            steps = cps.set_index("run").loc[runs, "step"].unique()
            for j, ds in enumerate(labels):
                rows.append({"method": method, "seed": np.nan, "run": aggregate_label(method, len(runs)),
                             "data_source": ds, "checkpoint": label, "step": steps[0] if len(steps) == 1 else np.nan,
                             "k": sweep.k, "n_problems": sizes[j], "mean_at_k": summ["estimate"][j],
                             "se": summ["se"][j], "ci_low": summ["ci_low"][j], "ci_high": summ["ci_high"][j],
                             "n_seeds": len(runs), "interval": TWO_LEVEL})
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def paired_table(sweep: Sweep, checkpoints: Sequence[str | int] = ("final", "best"),
                 resampler: Resampler | None = None, n_flip: int = N_FLIP, seed: int = SEED,
                 alpha: float = ALPHA, control: str | None = None) -> pd.DataFrame:
    """Every pair of methods (a before b in pg, tis, sc, sc_tis order), per set and ``avg``.

    ``diff`` = mean over problems of a's seed-averaged per-problem score minus b's (for ``avg``:
    the mean of the sets' mean differences). Both methods with >= 2 seeds: ``se``, ``df``,
    ``ci_low/ci_high`` and ``p_value`` of the two-level t the design calls for
    (:func:`analysis.pairing.arm_design`): seed pairs -> :func:`analysis.seeds.diff_paired_two_level`,
    ``test`` = :data:`PAIRED_TWO_LEVEL`, ``pairs`` = the number of seed pairs; otherwise
    :func:`analysis.seeds.diff_two_level`, ``test`` = :data:`TWO_LEVEL`, ``pairs`` = 0; ``pairing``
    says which and why; ``seed_variance`` True, ``significant`` = p < ``alpha``, ``mde80`` the
    smallest true difference that test detects with 80% power (:func:`analysis.seeds.minimum_detectable`).
    Otherwise: problem-level se, paired (stratified for ``avg``) percentile bootstrap interval and
    two-sided sign-flip p-value (:func:`analysis.stats.sign_flip_pvalue`), ``df`` NaN, ``test`` =
    :data:`SINGLE_SEED`, ``seed_variance`` and ``significant`` False, ``pairs`` 0, ``pairing``
    :data:`SINGLE_SEED_PAIRING`, ``mde80`` NaN. Then ``planned``, ``adjustment`` and ``p_adjusted``
    (:func:`analysis.planned.plan`: the comparisons against ``control``, or every pair; Holm over the planned
    two-level rows of a checkpoint and set when a control is named or the sweep has more than four arms;
    rows against a control read ``arm - control``), and last ``verdict`` (:func:`paired_verdicts`, on the
    adjusted p; ``significant`` too). Columns :data:`PAIRED_COLUMNS`.
    """
    resampler = resampler or Resampler()
    labels, sizes = set_labels(sweep), set_sizes(sweep)
    weights = stratified_weights(sizes[:-1])
    rows = []
    for cp in checkpoints:
        cps = checkpoint_steps(sweep, [cp])
        arms = arm_scores(sweep, cps)
        methods = [m for m in sweep.methods if m in arms]
        label = cps["checkpoint"].iloc[0] if len(cps) else str(cp)
        for a, b in combinations(methods, 2):
            (runs_a, ya), (runs_b, yb) = arms[a], arms[b]
            base = {"method_a": a, "method_b": b, "checkpoint": label, "seeds_a": len(ya), "seeds_b": len(yb)}
            if len(ya) >= 2 and len(yb) >= 2:
                design = arm_design(sweep, runs_a, sweep, runs_b)
                t = compare(ya, yb, design, sweep.set_slices)
                mde = minimum_detectable(t["se"], t["df"])
                test = PAIRED_TWO_LEVEL if design.paired else TWO_LEVEL
                for j, ds in enumerate(labels):
                    rows.append({**base, "data_source": ds, "diff": t["estimate"][j], "ci_low": t["ci_low"][j],
                                 "ci_high": t["ci_high"][j], "p_value": t["p_value"][j], "n_problems": sizes[j],
                                 "se": t["se"][j], "df": t["df"][j], "test": test, "seed_variance": True,
                                 "significant": bool(t["p_value"][j] < alpha), "pairs": design.pairs,
                                 "pairing": design.reason, "mde80": mde[j]})
                continue
            d = ya.mean(axis=0) - yb.mean(axis=0)
            summ = set_summaries(d, sweep.set_slices, resampler)
            for j, ds in enumerate(labels):
                if ds == AVG:
                    p = sign_flip_pvalue(d, weights, n_flip=n_flip, seed=seed)
                else:
                    p = sign_flip_pvalue(d[sweep.set_slices[j]], n_flip=n_flip, seed=seed)
                rows.append({**base, "data_source": ds, "diff": summ["mean"][j], "ci_low": summ["ci_low"][j],
                             "ci_high": summ["ci_high"][j], "p_value": p, "n_problems": sizes[j],
                             "se": summ["se"][j], "df": np.nan, "test": SINGLE_SEED, "seed_variance": False,
                             "significant": False, "pairs": 0, "pairing": SINGLE_SEED_PAIRING, "mde80": np.nan})
    base = [c for c in PAIRED_COLUMNS if c not in ("verdict", "planned", "adjustment", "p_adjusted")]
    paired = plan(pd.DataFrame(rows, columns=base), list(sweep.methods), control)
    paired["significant"] = paired["seed_variance"].astype(bool) & (paired["p_adjusted"] < alpha)
    return paired.assign(verdict=paired_verdicts(paired, alpha))[PAIRED_COLUMNS]


def verdict(p: float, lo: float, hi: float, alpha: float = ALPHA, seed_variance: bool = True) -> str:
    """``distinguishable`` if p < alpha and the interval excludes 0; ``borderline`` if only one
    of the two holds; ``within noise`` otherwise. Without between-seed variance
    (``seed_variance=False``: a single seed in an arm) always :data:`SINGLE_SEED`."""
    if not seed_variance:
        return SINGLE_SEED
    significant, excludes = p < alpha, lo > 0 or hi < 0
    if significant and excludes:
        return "distinguishable"
    if significant or excludes:
        return "borderline"
    return "within noise"


def paired_verdicts(paired: pd.DataFrame, alpha: float = ALPHA) -> list[str]:
    """The ``verdict`` column of :func:`paired_table`: :func:`verdict` of each row (the one place it is
    computed; ``comparison.md`` and the notebook read the column)."""
    return [verdict(r.p_adjusted, r.ci_low, r.ci_high, alpha, seed_variance=bool(r.seed_variance))
            for r in paired.itertuples(index=False)]


def passk_table(sweep: Sweep, checkpoints: Sequence[str | int] = ("final", "best"),
                ks: Sequence[int] = (1, 2, 4, 8)) -> pd.DataFrame:
    """Unbiased pass@k per (run, set incl. ``avg``, checkpoint, k) from the same samples.

    pass@k of a set = mean over its problems of 1 - C(n-c, k)/C(n, k) (n = samples per problem,
    c = correct ones); ``avg`` = mean over sets. k larger than n is skipped. Methods with several
    seeds also get a row averaging the seeds (``seed`` NaN, ``run`` = :func:`aggregate_label`).
    Columns :data:`PASSK_COLUMNS`.
    """
    ks = [int(k) for k in ks if 1 <= int(k) <= sweep.k]
    cps = checkpoint_steps(sweep, checkpoints)
    labels = set_labels(sweep)
    rows = []
    for run, cp, step in cps.itertuples(index=False):
        counts = [np.rint(_scores_at(sweep, run, s) * sweep.k).astype(int) for s in window_steps(sweep, run, cp, step)]
        method, seed = sweep.runs.at[run, "method"], sweep.runs.at[run, "seed"]
        for k in ks:  # over a window: the mean of each evaluation's pass@k
            per_problem = np.mean([pass_at_k(c, sweep.k, k) for c in counts], axis=0)
            per_set = [per_problem[sl].mean() for sl in sweep.set_slices]
            for ds, value in zip(labels, [*per_set, np.mean(per_set)], strict=True):
                rows.append({"method": method, "seed": seed, "run": run, "data_source": ds, "checkpoint": cp,
                             "step": step, "n_samples": sweep.k, "k": k, "pass_at_k": value})
    table = pd.DataFrame(rows, columns=PASSK_COLUMNS)
    agg = []
    for (method, ds, cp, k), g in table.groupby(["method", "data_source", "checkpoint", "k"], sort=False):
        if len(g) >= 2:
            steps = g["step"].unique()
            agg.append({"method": method, "seed": np.nan, "run": aggregate_label(method, len(g)), "data_source": ds,
                        "checkpoint": cp, "step": steps[0] if len(steps) == 1 else np.nan, "n_samples": sweep.k,
                        "k": k, "pass_at_k": g["pass_at_k"].mean()})
    if agg:
        table = pd.concat([table, pd.DataFrame(agg, columns=PASSK_COLUMNS)], ignore_index=True)
    return table


def eval_curves_table(sweep: Sweep, resampler: Resampler | None = None, by: str = "run") -> pd.DataFrame:
    """mean@k with its per-point 95% band at every evaluated step, raw (no smoothing).

    ``by="run"``: one curve per run, band = bootstrap over problems. ``by="method"``: one curve
    per method on the per-problem scores averaged over its seeds, at the steps every seed has
    evaluated; with >= 2 seeds the band is the two-level interval (seeds and problems) of
    :func:`analysis.seeds.mean_two_level`, with one seed the bootstrap over problems.
    Columns :data:`EVAL_CURVE_COLUMNS` (data_source: the sets and ``avg``).
    """
    resampler = resampler or Resampler()
    labels = set_labels(sweep)
    columns: dict[str, list] = {c: [] for c in EVAL_CURVE_COLUMNS}

    def add(name: str, method: str, steps: np.ndarray, summ: dict[str, np.ndarray], mean_key: str, n: int) -> None:
        for j, ds in enumerate(labels):  # columns gathered as arrays, one frame at the end
            for col, value in (("curve", name), ("method", method), ("data_source", ds), ("n_seeds", n)):
                columns[col].append(np.full(len(steps), value, dtype=object if isinstance(value, str) else int))
            for col, value in (("step", steps), ("mean_at_k", summ[mean_key][j]), ("ci_low", summ["ci_low"][j]),
                               ("ci_high", summ["ci_high"][j])):
                columns[col].append(np.asarray(value))

    if by == "run":
        for run in sweep.evaluated_runs:
            steps, x = sweep.scores(run)
            add(run, sweep.runs.at[run, "method"], steps, set_summaries(x, sweep.set_slices, resampler), "mean", 1)
    elif by == "method":
        evaluated = set(sweep.evaluated_runs)
        for method in sweep.methods:
            runs = [r for r in sweep.runs_of(method) if r in evaluated]
            if not runs:
                continue
            common = sorted(set.intersection(*(set(sweep.steps(r).tolist()) for r in runs)))
            if not common:
                continue
            y = np.stack([x[np.isin(steps, common)] for steps, x in map(sweep.scores, runs)], axis=1)
            if len(runs) >= 2:  # y: (steps, seeds, problems)
                add(method, method, np.array(common), mean_two_level(y, sweep.set_slices), "estimate", len(runs))
            else:
                add(method, method, np.array(common), set_summaries(y[:, 0], sweep.set_slices, resampler), "mean", 1)
    else:
        raise ValueError(f"by must be 'run' or 'method', got {by!r}")
    return pd.DataFrame({c: np.concatenate(v) for c, v in columns.items()})


def retest_table(sweep: Sweep) -> pd.DataFrame:
    """Test-retest noise of one checkpoint, from repeated evaluations (``val/repeat_RR/``).

    One row per (run, step with >= 2 evaluations, data_source incl. ``avg``): ``n_repeats``
    evaluations R, ``mean_at_k`` their mean, ``sd`` their standard deviation (ddof 1), and
    ``predicted_sd`` the sd that sampling k responses alone predicts for one evaluation,
    ``sqrt(sum_j x_j (1 - x_j) / (k - 1)) / n`` per set (x_j = a problem's mean correctness,
    averaged over the repeats; the unbiased binomial variance), for ``avg`` the root of the mean
    of the sets' squares over m (sets independent); NaN for k = 1. Columns :data:`RETEST_COLUMNS`; empty
    without repeats.
    """
    counts = sweep.counts
    multi = counts.groupby(["run", "step"])["repeat"].transform("nunique") >= 2
    if not multi.any():
        return pd.DataFrame(columns=RETEST_COLUMNS)
    sel = counts[multi]
    rows = []
    for (run, step), g in sel.groupby(["run", "step"], sort=False):
        wide = g.set_index(["repeat", "data_source", "problem_id"])["correct"].unstack(["data_source", "problem_id"])
        x = wide.reindex(columns=sweep.columns).to_numpy(float) / sweep.k  # (R, problems)
        means, preds = [], []
        for sl in sweep.set_slices:
            xs = x[:, sl]
            means.append(xs.mean(axis=1))
            xbar = xs.mean(axis=0)
            var = xbar * (1 - xbar) / (sweep.k - 1) if sweep.k > 1 else np.full_like(xbar, np.nan)
            preds.append(np.sqrt(var.sum()) / xs.shape[1])
        m = len(sweep.sets)
        entries = [*zip(sweep.sets, means, preds, strict=True),
                   (AVG, sum(means) / m, np.sqrt(sum(p**2 for p in preds)) / m)]
        for ds, per_repeat, pred in entries:
            rows.append({"run": run, "method": sweep.runs.at[run, "method"], "step": int(step), "data_source": ds,
                         "n_repeats": len(per_repeat), "mean_at_k": float(np.mean(per_repeat)),
                         "sd": float(np.std(per_repeat, ddof=1)), "predicted_sd": float(pred)})
    return pd.DataFrame(rows, columns=RETEST_COLUMNS)


def retest_band(retest: pd.DataFrame) -> pd.DataFrame:
    """Pooled test-retest sd per (run, data_source): ``sqrt(mean over steps of sd^2)``.

    Columns run, data_source, n_steps, n_repeats (total evaluations), sd, predicted_sd (pooled alike).
    """
    if retest.empty:
        return pd.DataFrame(columns=["run", "data_source", "n_steps", "n_repeats", "sd", "predicted_sd"])
    g = retest.groupby(["run", "data_source"], sort=False)
    return pd.DataFrame({
        "n_steps": g.size(), "n_repeats": g["n_repeats"].sum(),
        "sd": np.sqrt(g["sd"].apply(lambda s: np.mean(s**2))),
        "predicted_sd": np.sqrt(g["predicted_sd"].apply(lambda s: np.mean(s**2))),
    }).reset_index()


def per_problem_table(sweep: Sweep, checkpoint: str | int = "final") -> pd.DataFrame:
    """Per-problem mean correctness at ``checkpoint``: one row per evaluated run, columns (set, problem)."""
    cps = checkpoint_steps(sweep, [checkpoint])
    x = np.stack([_scores_at(sweep, r, s, cp) for r, cp, s in cps.itertuples(index=False)])
    return pd.DataFrame(x, index=pd.Index(cps["run"], name="run"), columns=sweep.correct.columns)
