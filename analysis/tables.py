"""The report's tables as pandas frames, computed from the per-sample results of a :class:`Sweep`.

Checkpoints: ``final`` is a run's last evaluated step; ``best`` the evaluated step with the
highest ``avg`` mean@k (the earliest on ties; step 0, before training, counts). ``best`` is
selected on the very sets it is reported on, so it is optimistic. An integer step ``N`` (label
``step_N``) picks that evaluated step in every run.

Methods with several seeds: a method's per-problem score is the mean over its seeds of each
seed's per-problem mean at that seed's checkpoint; paired comparisons are between methods on
these scores. Aggregate rows of :func:`seed_aggregate_table` summarise the seeds' mean@k:
mean over seeds, ``se`` = std over seeds (ddof 1) / sqrt(seeds), ``ci`` = mean +- t_{0.975, seeds-1} se.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import numpy as np
import pandas as pd

from analysis.load import Sweep, SweepError
from analysis.stats import (
    N_FLIP,
    SEED,
    Resampler,
    pass_at_k,
    set_summaries,
    sign_flip_pvalue,
    stratified_weights,
    t_quantile_975,
)

AVG = "avg"
COMPARISON_COLUMNS = ["method", "seed", "run", "data_source", "checkpoint", "step", "k", "n_problems",
                      "mean_at_k", "se", "ci_low", "ci_high"]
PAIRED_COLUMNS = ["method_a", "method_b", "data_source", "checkpoint", "diff", "ci_low", "ci_high", "p_value",
                  "n_problems"]
PASSK_COLUMNS = ["method", "seed", "run", "data_source", "checkpoint", "step", "n_samples", "k", "pass_at_k"]
CHECKPOINT_NOTES = {
    "final": "the last evaluated step of each run",
    "best": "the step with the highest avg mean@k of each run — selected on the test sets, optimistic",
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
    steps, x = sweep.scores(run)
    means = np.stack([x[:, sl].mean(axis=1) for sl in sweep.set_slices])
    return pd.Series(means.mean(axis=0), index=pd.Index(steps, name="step"), name=run)


def checkpoint_steps(sweep: Sweep, checkpoints: Sequence[str | int] = ("final", "best")) -> pd.DataFrame:
    """One row per (evaluated run, checkpoint): run, checkpoint (label), step."""
    rows = []
    for cp in checkpoints:
        for run in sweep.evaluated_runs:
            curve = avg_curve(sweep, run)
            if cp == "final":
                rows.append((run, "final", int(curve.index[-1])))
            elif cp == "best":
                rows.append((run, "best", int(curve.idxmax())))  # idxmax: first maximum
            else:
                step = int(cp)
                if step not in curve.index:
                    raise SweepError(f"checkpoint step {step}: run {run} ({sweep.runs.at[run, 'path']}) has no "
                                     f"evaluation at that step; evaluated steps: {list(curve.index)}")
                rows.append((run, f"step_{step}", step))
    return pd.DataFrame(rows, columns=["run", "checkpoint", "step"])


def _scores_at(sweep: Sweep, run: str, step: int) -> np.ndarray:
    return sweep.correct.loc[(run, step)].to_numpy(dtype=float) / sweep.k


def comparison_table(sweep: Sweep, checkpoints: Sequence[str | int] = ("final", "best"),
                     resampler: Resampler | None = None) -> pd.DataFrame:
    """Per (run, data_source incl. ``avg``, checkpoint): mean@k, se and 95% bootstrap interval.

    Columns :data:`COMPARISON_COLUMNS` (run_contract.md, "report/").
    """
    resampler = resampler or Resampler()
    cps = checkpoint_steps(sweep, checkpoints)
    labels, sizes = set_labels(sweep), set_sizes(sweep)
    rows = []
    if cps.empty:
        return pd.DataFrame(columns=COMPARISON_COLUMNS)
    x = np.stack([_scores_at(sweep, r, s) for r, s in zip(cps["run"], cps["step"], strict=True)])
    summ = set_summaries(x, sweep.set_slices, resampler)
    for i, (run, cp, step) in enumerate(cps.itertuples(index=False)):
        method, seed = sweep.runs.at[run, "method"], sweep.runs.at[run, "seed"]
        for j, ds in enumerate(labels):
            rows.append({"method": method, "seed": seed, "run": run, "data_source": ds, "checkpoint": cp,
                         "step": step, "k": sweep.k, "n_problems": sizes[j], "mean_at_k": summ["mean"][j, i],
                         "se": summ["se"][j, i], "ci_low": summ["ci_low"][j, i], "ci_high": summ["ci_high"][j, i]})
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def seeds_per_method(sweep: Sweep) -> dict[str, int]:
    """Number of evaluated runs (seeds) of each method."""
    return {m: sum(1 for r in sweep.evaluated_runs if sweep.runs.at[r, "method"] == m) for m in sweep.methods}


def seed_aggregate_table(comparison: pd.DataFrame) -> pd.DataFrame:
    """One row per (method with >= 2 seeds, data_source, checkpoint), in :data:`COMPARISON_COLUMNS`.

    ``mean_at_k`` = mean of the seeds' mean@k; ``se`` = their std (ddof 1) / sqrt(seeds);
    ``ci_low/ci_high`` = mean -+ t_{0.975, seeds-1} * se; ``step`` is the seeds' common step or
    NaN; ``seed`` is NaN and ``run`` names the aggregate (:func:`aggregate_label`).
    """
    rows = []
    for (method, ds, cp), g in comparison.groupby(["method", "data_source", "checkpoint"], sort=False):
        n = g["run"].nunique()
        if n < 2:
            continue
        mean = g["mean_at_k"].mean()
        se = g["mean_at_k"].std(ddof=1) / np.sqrt(n)
        half = t_quantile_975(n - 1) * se
        steps = g["step"].unique()
        rows.append({"method": method, "seed": np.nan, "run": aggregate_label(method, n), "data_source": ds,
                     "checkpoint": cp, "step": steps[0] if len(steps) == 1 else np.nan, "k": g["k"].iloc[0],
                     "n_problems": g["n_problems"].iloc[0], "mean_at_k": mean, "se": se,
                     "ci_low": mean - half, "ci_high": mean + half})
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def method_scores(sweep: Sweep, checkpoint: str | int) -> dict[str, np.ndarray]:
    """Per method: per-problem scores at ``checkpoint``, averaged over the method's seeds."""
    cps = checkpoint_steps(sweep, [checkpoint])
    out: dict[str, list[np.ndarray]] = {}
    for run, _, step in cps.itertuples(index=False):
        out.setdefault(sweep.runs.at[run, "method"], []).append(_scores_at(sweep, run, step))
    return {m: np.mean(v, axis=0) for m, v in out.items()}


def paired_table(sweep: Sweep, checkpoints: Sequence[str | int] = ("final", "best"),
                 resampler: Resampler | None = None, n_flip: int = N_FLIP, seed: int = SEED) -> pd.DataFrame:
    """Every pair of methods (a before b in pg, tis, sc, sc_tis order), per set and ``avg``.

    ``diff`` = mean over problems of a's per-problem score minus b's (for ``avg``: the mean of the
    sets' mean differences); ``ci_low/ci_high`` = paired (stratified for ``avg``) percentile
    bootstrap; ``p_value`` = two-sided sign-flip permutation test
    (:func:`analysis.stats.sign_flip_pvalue`; for ``avg`` on the stratified statistic).
    Columns :data:`PAIRED_COLUMNS`.
    """
    resampler = resampler or Resampler()
    labels, sizes = set_labels(sweep), set_sizes(sweep)
    weights = stratified_weights(sizes[:-1])
    rows = []
    for cp in checkpoints:
        scores = method_scores(sweep, cp)
        methods = [m for m in sweep.methods if m in scores]
        pairs = list(combinations(methods, 2))
        if not pairs:
            continue
        d = np.stack([scores[a] - scores[b] for a, b in pairs])
        summ = set_summaries(d, sweep.set_slices, resampler)
        label = checkpoint_steps(sweep, [cp])["checkpoint"].iloc[0]
        for i, (a, b) in enumerate(pairs):
            for j, ds in enumerate(labels):
                if ds == AVG:
                    p = sign_flip_pvalue(d[i], weights, n_flip=n_flip, seed=seed)
                else:
                    p = sign_flip_pvalue(d[i, sweep.set_slices[j]], n_flip=n_flip, seed=seed)
                rows.append({"method_a": a, "method_b": b, "data_source": ds, "checkpoint": label,
                             "diff": summ["mean"][j, i], "ci_low": summ["ci_low"][j, i],
                             "ci_high": summ["ci_high"][j, i], "p_value": p, "n_problems": sizes[j]})
    return pd.DataFrame(rows, columns=PAIRED_COLUMNS)


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
        c = sweep.correct.loc[(run, step)].to_numpy()
        method, seed = sweep.runs.at[run, "method"], sweep.runs.at[run, "seed"]
        for k in ks:
            per_problem = pass_at_k(c, sweep.k, k)
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
    """mean@k with its per-point 95% bootstrap band at every evaluated step, raw (no smoothing).

    ``by="run"``: one curve per run. ``by="method"``: one curve per method, on the per-problem
    scores averaged over the method's seeds, at the steps every seed has evaluated.
    Columns: curve, method, step, data_source (sets and ``avg``), mean_at_k, ci_low, ci_high, n_seeds.
    """
    resampler = resampler or Resampler()
    labels = set_labels(sweep)
    curves: list[tuple[str, str, np.ndarray, np.ndarray, int]] = []
    if by == "run":
        for run in sweep.evaluated_runs:
            steps, x = sweep.scores(run)
            curves.append((run, sweep.runs.at[run, "method"], steps, x, 1))
    elif by == "method":
        for method in sweep.methods:
            runs = [r for r in sweep.runs_of(method) if r in sweep.evaluated_runs]
            if not runs:
                continue
            common = sorted(set.intersection(*(set(sweep.steps(r).tolist()) for r in runs)))
            if not common:
                continue
            x = np.mean([sweep.correct.loc[[(r, s) for s in common]].to_numpy(float) / sweep.k for r in runs], axis=0)
            curves.append((method, method, np.array(common), x, len(runs)))
    else:
        raise ValueError(f"by must be 'run' or 'method', got {by!r}")
    frames = []
    for name, method, steps, x, n_seeds in curves:
        summ = set_summaries(x, sweep.set_slices, resampler)
        for j, ds in enumerate(labels):
            frames.append(pd.DataFrame({"curve": name, "method": method, "step": steps, "data_source": ds,
                                        "mean_at_k": summ["mean"][j], "ci_low": summ["ci_low"][j],
                                        "ci_high": summ["ci_high"][j], "n_seeds": n_seeds}))
    return pd.concat(frames, ignore_index=True)


def per_problem_table(sweep: Sweep, checkpoint: str | int = "final") -> pd.DataFrame:
    """Per-problem mean correctness at ``checkpoint``: one row per evaluated run, columns (set, problem)."""
    cps = checkpoint_steps(sweep, [checkpoint])
    x = np.stack([_scores_at(sweep, r, s) for r, s in zip(cps["run"], cps["step"], strict=True)])
    return pd.DataFrame(x, index=pd.Index(cps["run"], name="run"), columns=sweep.correct.columns)
