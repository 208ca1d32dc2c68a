"""The report's figures: evaluation curves, training curves and the per-problem matrix.

Each function returns a :class:`matplotlib.figure.Figure` built without pyplot (no global state,
no GUI backend: it renders with Agg wherever it runs); :func:`save` writes it as PNG. Colours are fixed
per method (pg blue, tis orange, sc green, sc_tis red, other methods further tab10 colours) and
shared by every figure; seeds of one method differ by line style.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.load import Sweep
from analysis.stats import MOVING_AVERAGE_WINDOW, Resampler, backward_moving_average
from analysis.tables import (
    AVG,
    checkpoint_steps,
    eval_curves_table,
    per_problem_table,
    retest_band,
    retest_table,
)

RETEST_Z = 1.96  # half-width of the test-retest band in pooled test-retest sds

METHOD_COLORS = {"pg": "tab:blue", "tis": "tab:orange", "sc": "tab:green", "sc_tis": "tab:red"}
_EXTRA_COLORS = ["tab:purple", "tab:brown", "tab:pink", "tab:gray", "tab:olive", "tab:cyan"]
LINESTYLES = ["-", "--", ":", "-."]

# (panel title, metric name) of train_curves.png, in reading order.
TRAIN_PANELS = [
    ("reward (critic/score/mean)", "critic/score/mean"),
    ("response length (mean tokens)", "response_length/mean"),
    ("truncation ratio", "response/truncation_ratio"),
    ("zero-variance group ratio", "batch/zero_variance_group_ratio"),
    ("entropy", "actor/entropy"),
    ("ppo_kl", "actor/ppo_kl"),
    ("grad norm", "actor/grad_norm"),
    ("staleness (mean, steps)", "training/off_policy/trajectory_staleness/mean"),
    ("TIS clip fraction", "actor/tis_clip_fraction"),
    ("SC sampler head mass Q", "actor/sc_sampler_head_mass"),
    ("SC trainer head mass P", "actor/sc_train_head_mass"),
    ("mismatch: sampled token in sampler head", "mismatch/sampled_in_head"),
    ("mismatch: sampler head mass Q (all arms)", "mismatch/sampler_head_mass"),
    ("mismatch: trainer head mass P (all arms)", "mismatch/train_head_mass"),
    ("||grad centering term|| / ||grad sampled-token term||", "diag/centering_grad_ratio"),
    ("cos(grad centering term, grad sampled-token term)", "diag/centering_grad_cos"),
    ("tail mass outside the head, sampler 1-Q", "diag/tail_mass_sampler"),
    ("tail mass outside the head, trainer 1-P", "diag/tail_mass_trainer"),
    ("tokens with a context shared by the whole group", "diag/shared_context_fraction"),
    ("step time (s)", "timing_s/step"),
]


def method_color(method: str, methods: list[str] | None = None) -> str:
    """The fixed colour of ``method`` (unknown methods take the next unused tab10 colour)."""
    if method in METHOD_COLORS:
        return METHOD_COLORS[method]
    others = sorted(m for m in (methods or [method]) if m not in METHOD_COLORS)
    i = others.index(method) if method in others else 0
    return _EXTRA_COLORS[i % len(_EXTRA_COLORS)]


def run_label(sweep: Sweep, run: str) -> str:
    """Legend label of a run: its name, plus its state when it is not finished."""
    r = sweep.runs.loc[run]
    if r["status"] == "running":
        return f"{run} (running, step {r['last_step']}/{r['total_steps']})"
    if r["status"] == "failed":
        return f"{run} (failed at step {r['last_step']})"
    return run


def _seed_styles(sweep: Sweep) -> dict[str, str]:
    styles = {}
    for method in sweep.methods:
        for i, run in enumerate(sweep.runs_of(method)):
            styles[run] = LINESTYLES[i % len(LINESTYLES)]
    return styles


def _grid(n: int, ncols: int) -> tuple[int, int]:
    ncols = min(ncols, n)
    return -(-n // ncols), ncols


def eval_curves(sweep: Sweep, resampler: Resampler | None = None, curves: pd.DataFrame | None = None,
                retest: pd.DataFrame | None = None, method_curves: pd.DataFrame | None = None) -> Figure:
    """mean@k against step, one panel per set and one for ``avg``, raw (no smoothing).

    One line per method with its per-point 95% band: with one seed the bootstrap over problems;
    when a method has several seeds the line is the seed-averaged per-problem scores (steps all
    its seeds evaluated) with the two-level band over seeds and problems, and each seed is also
    drawn thin, without that band. ``curves``/``method_curves``: the ``by="run"``/``by="method"``
    tables of :func:`analysis.tables.eval_curves_table` if already computed. A run with repeated evaluations (``retest``, default
    :func:`analysis.tables.retest_table`) gets a hatched test-retest band, its curve
    ``± RETEST_Z x`` the pooled test-retest sd of :func:`analysis.tables.retest_band`.
    """
    resampler = resampler or Resampler()
    band = retest_band(retest if retest is not None else retest_table(sweep)).set_index(["run", "data_source"])
    multi = any(len([r for r in sweep.runs_of(m) if r in sweep.evaluated_runs]) > 1 for m in sweep.methods)
    by_run = curves if curves is not None else eval_curves_table(sweep, resampler, by="run")
    if multi:
        main = method_curves if method_curves is not None else eval_curves_table(sweep, resampler, by="method")
    else:
        main = by_run
    labels = [*sweep.sets, AVG]
    nrows, ncols = _grid(len(labels), 3)
    fig = Figure(figsize=(5.2 * ncols, 3.9 * nrows + 0.6), layout="constrained")
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
    styles = _seed_styles(sweep)
    methods = sweep.methods
    for ax, ds in zip(axes, labels, strict=False):
        for name, g in main[main["data_source"] == ds].groupby("curve", sort=False):
            method = g["method"].iloc[0]
            color = method_color(method, methods)
            if multi:
                label = f"{method} (mean of {g['n_seeds'].iloc[0]} seeds)"
            else:
                label = run_label(sweep, name)
            ax.fill_between(g["step"], g["ci_low"], g["ci_high"], color=color, alpha=0.15, linewidth=0)
            ax.plot(g["step"], g["mean_at_k"], color=color, marker="o", markersize=3, linewidth=1.8, label=label)
        if multi:
            for name, g in by_run[by_run["data_source"] == ds].groupby("curve", sort=False):
                ax.plot(g["step"], g["mean_at_k"], color=method_color(g["method"].iloc[0], methods),
                        linestyle=styles.get(name, "-"), linewidth=0.8, alpha=0.6, label=run_label(sweep, name))
        for name, g in by_run[by_run["data_source"] == ds].groupby("curve", sort=False):
            if (name, ds) in band.index:
                half = RETEST_Z * band.at[(name, ds), "sd"]
                ax.fill_between(g["step"], g["mean_at_k"] - half, g["mean_at_k"] + half, facecolor="none",
                                edgecolor=method_color(g["method"].iloc[0], methods), hatch="///", linewidth=0,
                                alpha=0.5, label=f"{name}: test-retest ±{RETEST_Z} sd")
        n = sum(len(sweep.problems[s]) for s in sweep.sets) if ds == AVG else len(sweep.problems[ds])
        title = f"avg of {len(sweep.sets)} sets ({n} problems)" if ds == AVG else f"{ds} ({n} problems)"
        ax.set_title(title)
        ax.set_xlabel("training step")
        ax.set_ylabel(f"mean@{sweep.k}")
        ax.grid(alpha=0.3)
    for ax in axes[len(labels):]:
        ax.set_visible(False)
    handles, leg_labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, leg_labels, loc="outside lower center", ncols=min(4, len(leg_labels)), fontsize=9)
    what = "two-level over seeds and problems" if multi else "bootstrap over problems"
    fig.suptitle(f"{sweep.root.name}: mean@{sweep.k} per evaluation (raw, no smoothing; band = 95% {what}"
                 + ("; hatched = test-retest" if len(band) else "") + ")")
    return fig


def train_curves(sweep: Sweep, window: int = MOVING_AVERAGE_WINDOW, panels: list[tuple[str, str]] | None = None
                 ) -> Figure:
    """Training metrics as backward ``window``-step moving averages, one panel per metric.

    The value at step s is the mean of the non-null values of steps max(1, s-window+1)..s
    (:func:`analysis.stats.backward_moving_average`). Arms are overlaid; an arm that does not log
    a metric (absent or all null) is left out of that panel, and a panel no arm logs is dropped.
    """
    panels = panels or TRAIN_PANELS
    train = sweep.train
    present = []
    for title, metric in panels:
        runs = [r for r in sweep.runs.index
                if metric in train and train.loc[train["run"] == r, metric].notna().any()]
        if runs:
            present.append((title, metric, runs))
    nrows, ncols = _grid(max(len(present), 1), 3)
    legend_rows = -(-len(sweep.runs) // 4)
    height = 3.0 * nrows + 1.2 + 0.25 * legend_rows
    # fixed margins instead of a layout engine: this figure has many panels and constrained layout
    # would double its rendering time
    fig = Figure(figsize=(5.0 * ncols, height))
    fig.subplots_adjust(left=0.06, right=0.985, top=1 - 0.75 / height, bottom=(0.7 + 0.25 * legend_rows) / height,
                        hspace=0.42, wspace=0.2)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
    styles = _seed_styles(sweep)
    methods = sweep.methods
    handles: dict[str, object] = {}
    for ax, (title, metric, runs) in zip(axes, present, strict=False):
        for run in runs:
            rows = train[train["run"] == run]
            series = pd.Series(rows[metric].to_numpy(float), index=rows["step"].to_numpy())
            smooth = backward_moving_average(series, window)
            (line,) = ax.plot(smooth.index, smooth.to_numpy(), linewidth=1.3,
                              color=method_color(sweep.runs.at[run, "method"], methods),
                              linestyle=styles.get(run, "-"), label=run_label(sweep, run))
            handles.setdefault(run, line)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("training step", fontsize=9)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    for ax in axes[len(present):]:
        ax.set_visible(False)
    if not present:
        axes[0].set_visible(True)
        axes[0].text(0.5, 0.5, "no train metrics logged yet", ha="center", va="center")
    order = [r for r in sweep.runs.index if r in handles]
    fig.legend([handles[r] for r in order], [run_label(sweep, r) for r in order], loc="lower center",
               bbox_to_anchor=(0.5, 0.1 / height), ncols=min(4, max(len(order), 1)), fontsize=9)
    fig.suptitle(f"{sweep.root.name}: training metrics, backward {window}-step moving average "
                 f"(value at step s = mean of steps s-{window - 1}..s)")
    return fig


def per_problem(sweep: Sweep, checkpoint: str | int = "final") -> Figure:
    """Runs x problems matrix of per-problem mean correctness at ``checkpoint``.

    Problems are grouped by set and, within a set, ordered from hardest to easiest by their mean
    over runs, so problems that move between methods stand out as off-colour cells in a column.
    """
    table = per_problem_table(sweep, checkpoint)
    cps = checkpoint_steps(sweep, [checkpoint]).set_index("run")
    order = []
    for ds in sweep.sets:
        block = table[ds]
        order += [(ds, p) for p in block.mean(axis=0).sort_values(kind="stable").index]
    table = table[order]
    n_runs, n_problems = table.shape
    width = min(max(8.0, 0.17 * n_problems + 3), 40)
    fig = Figure(figsize=(width, 1.6 + 0.42 * n_runs), layout="constrained")
    ax = fig.subplots()
    im = ax.imshow(table.to_numpy(), aspect="auto", cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
    ylabels = [f"{r} @ step {cps.at[r, 'step']}" + (" [running]" if sweep.runs.at[r, "in_progress"] else "")
               for r in table.index]
    ax.set_yticks(range(n_runs), ylabels, fontsize=9)
    if n_problems <= 120:  # ids without their set prefix; the set is written above its block
        ax.set_xticks(range(n_problems), [p.removeprefix(f"{ds}-") for ds, p in order], rotation=90, fontsize=7)
    else:
        ax.set_xticks([])
    start = 0
    for ds in sweep.sets:
        n = len(sweep.problems[ds])
        if start:
            ax.axvline(start - 0.5, color="white", linewidth=2)
        ax.text(start + n / 2 - 0.5, -0.7, ds, ha="center", va="bottom", fontsize=10)
        start += n
    ax.set_ylim(n_runs - 0.5, -1.2)
    cb = fig.colorbar(im, ax=ax, fraction=0.03, pad=0.01)
    cb.set_label(f"mean@{sweep.k} of the problem")
    label = cps["checkpoint"].iloc[0]
    fig.suptitle(f"{sweep.root.name}: per-problem accuracy at the {label} checkpoint "
                 "(problems sorted hardest to easiest within each set)", fontsize=11)
    return fig


def save(fig: Figure, path: str | Path, dpi: int = 110) -> Path:
    """Write ``fig`` as PNG to ``path``."""
    path = Path(path)
    fig.savefig(path, dpi=dpi)
    return path
