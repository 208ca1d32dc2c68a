"""The report's figures: evaluation curves, training curves and the per-problem matrix.

Each function returns a :class:`matplotlib.figure.Figure` built without pyplot (no global state,
no GUI backend: it renders with Agg wherever it runs); :func:`save` writes it as PNG.

Arms stay distinguishable where their lines coincide (one seed: PG and SC follow the same trajectory
until the first sampled token differs): each method has a fixed colour, dash pattern and marker
(pg blue solid circles, tis orange dashed squares, sc green dotted triangles, sc_tis red dash-dot
diamonds; other methods further tab10 colours), shared by every figure and by all seeds of the
method; methods are drawn in the sweep's order, each thinner and on top of the one before, so a line
drawn over another leaves it visible on both sides; markers are staggered along the curve. A panel
where curves coincide over two or more consecutive points says so in a note under its x label
(:mod:`analysis.coincidence`; ``fig.coincidence_notes`` maps each panel title to its note). Tick labels are plain numbers (no offset, no scientific multiplier).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, ScalarFormatter

from analysis.coincidence import coincidence_note, coinciding_curves, panel_tolerance
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

RETEST_Z = 1.96
PROBLEM_ID_FONTSIZE = 9.5  # half-width of the test-retest band in pooled test-retest sds

METHOD_COLORS = {"pg": "tab:blue", "tis": "tab:orange", "sc": "tab:green", "sc_tis": "tab:red"}
_EXTRA_COLORS = ["tab:purple", "tab:brown", "tab:pink", "tab:gray", "tab:olive", "tab:cyan"]
LINESTYLES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
METHOD_ORDER = ["pg", "tis", "sc", "sc_tis"]
#: Line width of the first, second, ... method drawn (each drawn over the ones before).
LINE_WIDTHS = [3.2, 2.4, 1.7, 1.1]
MARKER_SIZES = [8.0, 6.5, 5.0, 3.6]

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
    ("SC sampler head mass Q", "actor/sc_sampler_head_mass"),  # only runs without mismatch/* (DUPLICATES)
    ("SC trainer head mass P", "actor/sc_train_head_mass"),
    ("mismatch: sampled token in sampler head", "mismatch/sampled_in_head"),
    ("mismatch: sampler head mass Q (all arms)", "mismatch/sampler_head_mass"),
    ("mismatch: trainer head mass P (all arms)", "mismatch/train_head_mass"),
    ("||grad centering term|| / ||grad sampled-token term||", "diag/centering_grad_ratio"),
    ("cos(grad centering term, grad sampled-token term)", "diag/centering_grad_cos"),
    ("tail mass outside the head, sampler 1-Q", "diag/tail_mass_sampler"),
    ("tail mass outside the head, trainer 1-P", "diag/tail_mass_trainer"),
    ("tokens with a context shared by the whole group", "diag/shared_context_fraction"),
    ("CPU time per step (s, this process; embedded backend)", "timing_s/step_cpu"),
    ("wall time per step / sweep median (includes machine load: not a cost of the method)", "timing_s/step"),
]
#: A run that logs the value (metric) is drawn in that panel, not in the duplicate's (key): the SC arms'
#: own head masses are the mismatch head masses every embedded arm logs.
DUPLICATES = {"actor/sc_sampler_head_mass": "mismatch/sampler_head_mass",
              "actor/sc_train_head_mass": "mismatch/train_head_mass"}
#: Metrics drawn divided by their median over every step of every run of the sweep.
RELATIVE_TO_SWEEP_MEDIAN = frozenset({"timing_s/step"})


def method_color(method: str, methods: list[str] | None = None) -> str:
    """The fixed colour of ``method`` (unknown methods take the next unused tab10 colour)."""
    if method in METHOD_COLORS:
        return METHOD_COLORS[method]
    others = sorted(m for m in (methods or [method]) if m not in METHOD_COLORS)
    i = others.index(method) if method in others else 0
    return _EXTRA_COLORS[i % len(_EXTRA_COLORS)]


def method_style(method: str, methods: list[str]) -> dict:
    """Line keywords of ``method``: colour, dash pattern, marker, and a width and marker size that
    shrink with its drawing position in ``methods`` (drawn later = thinner and on top)."""
    known = [m for m in METHOD_ORDER if m in methods] + [m for m in methods if m not in METHOD_ORDER]
    fixed = METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER) + known.index(method)
    position = known.index(method) if method in known else 0
    return {"color": method_color(method, methods), "linestyle": LINESTYLES[fixed % len(LINESTYLES)],
            "marker": MARKERS[fixed % len(MARKERS)], "linewidth": LINE_WIDTHS[min(position, len(LINE_WIDTHS) - 1)],
            "markersize": MARKER_SIZES[min(position, len(MARKER_SIZES) - 1)], "zorder": 2 + position}


def _markevery(n_points: int, position: int, n_methods: int, marks: int = 6) -> int | tuple[int, int]:
    """Every point for short curves; else about ``marks`` markers, staggered between methods."""
    if n_points <= 12:
        return 1
    every = max(n_points // marks, 1)
    return (position * every // max(n_methods, 1), every)


def plain_ticks(ax) -> None:
    """Tick labels as plain numbers: no offset (``1e-5+9.995e-1``) and no scientific multiplier; the
    x axis (training steps) at integers."""
    for axis in (ax.xaxis, ax.yaxis):
        formatter = ScalarFormatter(useOffset=False)
        formatter.set_scientific(False)
        axis.set_major_formatter(formatter)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _note(ax, curves: dict[str, pd.Series], xlabel: str, fontsize: float) -> str:
    """Write the coincidence note of a panel's ``curves`` under its x label; return it ("" when none)."""
    note = coincidence_note(coinciding_curves(curves, panel_tolerance(curves)), list(curves), limit=2)
    ax.set_xlabel(f"{xlabel}\n{note}" if note else xlabel, fontsize=fontsize)
    return note


def _curve_names(sweep: Sweep, runs: list[str]) -> dict[str, str]:
    """Names for coincidence notes: the method where each method has one run here, else the run."""
    methods = [sweep.runs.at[r, "method"] for r in runs]
    return dict(zip(runs, methods if len(set(methods)) == len(methods) else runs, strict=True))


def run_label(sweep: Sweep, run: str) -> str:
    """Legend label of a run: its name, plus its state when it is not finished."""
    r = sweep.runs.loc[run]
    if r["status"] == "running":
        return f"{run} (running, step {r['last_step']}/{r['total_steps']})"
    if r["status"] == "failed":
        return f"{run} (failed at step {r['last_step']})"
    return run


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
    methods = sweep.methods
    fig.coincidence_notes = {}  # panel title -> its coincidence note
    for ax, ds in zip(axes, labels, strict=False):
        drawn: dict[str, pd.Series] = {}
        for name, g in main[main["data_source"] == ds].groupby("curve", sort=False):
            method = g["method"].iloc[0]
            style = method_style(method, methods)
            if multi:
                label = f"{method} (mean of {g['n_seeds'].iloc[0]} seeds)"
            else:
                label = run_label(sweep, name)
            ax.fill_between(g["step"], g["ci_low"], g["ci_high"], color=style["color"], alpha=0.12, linewidth=0)
            ax.plot(g["step"], g["mean_at_k"], label=label, **style)
            drawn[method if multi else name] = pd.Series(g["mean_at_k"].to_numpy(float), index=g["step"].to_numpy())
        if multi:
            for name, g in by_run[by_run["data_source"] == ds].groupby("curve", sort=False):
                style = method_style(g["method"].iloc[0], methods)
                ax.plot(g["step"], g["mean_at_k"], color=style["color"], linestyle=style["linestyle"],
                        linewidth=0.8, alpha=0.6, label=run_label(sweep, name))
        for name, g in by_run[by_run["data_source"] == ds].groupby("curve", sort=False):
            if (name, ds) in band.index:
                half = RETEST_Z * band.at[(name, ds), "sd"]
                ax.fill_between(g["step"], g["mean_at_k"] - half, g["mean_at_k"] + half, facecolor="none",
                                edgecolor=method_color(g["method"].iloc[0], methods), hatch="///", linewidth=0,
                                alpha=0.5, label=f"{name}: test-retest ±{RETEST_Z} sd")
        n = sum(len(sweep.problems[s]) for s in sweep.sets) if ds == AVG else len(sweep.problems[ds])
        title = f"avg of {len(sweep.sets)} sets ({n} problems)" if ds == AVG else f"{ds} ({n} problems)"
        ax.set_title(title)
        ax.set_ylabel(f"mean@{sweep.k}")
        ax.grid(alpha=0.3)
        plain_ticks(ax)
        if not multi:
            drawn = {_curve_names(sweep, list(drawn))[run]: values for run, values in drawn.items()}
        fig.coincidence_notes[title] = _note(ax, drawn, "training step", 10)
    for ax in axes[len(labels):]:
        ax.set_visible(False)
    handles, leg_labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, leg_labels, loc="outside lower center", ncols=min(4, len(leg_labels)), fontsize=9)
    what = "two-level over seeds and problems" if multi else "bootstrap over problems"
    fig.suptitle(f"{sweep.root.name}: mean@{sweep.k} per evaluation (raw, no smoothing; band = 95% {what}"
                 + ("; hatched = test-retest" if len(band) else "") + ")"
                 + ("\nwhere lines coincide (note under a panel) the thinner line is drawn over the thicker one"
                    if any(fig.coincidence_notes.values()) else ""))
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

    def logs(run: str, metric: str) -> bool:
        return metric in train and bool(train.loc[train["run"] == run, metric].notna().any())

    present = []
    for title, metric in panels:
        runs = [r for r in sweep.runs.index if logs(r, metric) and not logs(r, DUPLICATES.get(metric, ""))]
        if runs:
            present.append((title, metric, runs))
    nrows, ncols = _grid(max(len(present), 1), 3)
    legend_rows = -(-len(sweep.runs) // 4)
    height = 3.3 * nrows + 1.3 + 0.25 * legend_rows
    # fixed margins instead of a layout engine: this figure has many panels and constrained layout
    # would double its rendering time
    fig = Figure(figsize=(5.0 * ncols, height))
    fig.subplots_adjust(left=0.06, right=0.985, top=1 - 1.15 / height, bottom=(0.8 + 0.25 * legend_rows) / height,
                        hspace=0.62, wspace=0.22)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
    methods = sweep.methods
    handles: dict[str, object] = {}
    fig.coincidence_notes = {}  # panel title -> its coincidence note
    for ax, (title, metric, runs) in zip(axes, present, strict=False):
        scale = float(train[metric].median()) if metric in RELATIVE_TO_SWEEP_MEDIAN else 1.0
        drawn: dict[str, pd.Series] = {}
        for run in runs:
            rows = train[train["run"] == run]
            series = pd.Series(rows[metric].to_numpy(float) / scale, index=rows["step"].to_numpy())
            smooth = backward_moving_average(series, window)
            method = sweep.runs.at[run, "method"]
            style = method_style(method, methods)
            every = _markevery(len(smooth), methods.index(method) if method in methods else 0, len(methods))
            (line,) = ax.plot(smooth.index, smooth.to_numpy(), label=run_label(sweep, run), markevery=every,
                              **{**style, "linewidth": style["linewidth"] * 0.8, "markersize": style["markersize"] * 0.8})
            handles.setdefault(run, line)
            drawn[run] = smooth
        ax.set_title(title, fontsize=10 if len(title) < 60 else 8.5)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        plain_ticks(ax)
        names = _curve_names(sweep, list(drawn))
        fig.coincidence_notes[title] = _note(ax, {names[r]: v for r, v in drawn.items()}, "training step", 8.5)
    for ax in axes[len(present):]:
        ax.set_visible(False)
    if not present:
        axes[0].set_visible(True)
        axes[0].text(0.5, 0.5, "no train metrics logged yet", ha="center", va="center")
    order = [r for r in sweep.runs.index if r in handles]
    fig.legend([handles[r] for r in order], [run_label(sweep, r) for r in order], loc="lower center",
               bbox_to_anchor=(0.5, 0.1 / height), ncols=min(4, max(len(order), 1)), fontsize=9)
    fig.suptitle(f"{sweep.root.name}: training metrics, backward {window}-step moving average "
                 f"(value at step s = mean of steps s-{window - 1}..s)"
                 + ("\nwhere lines coincide (note under a panel) the thinner line is drawn over the thicker one"
                    if any(fig.coincidence_notes.values()) else ""))
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
    width = min(max(8.0, 0.26 * n_problems + 4), 48)
    fig = Figure(figsize=(width, 2.0 + 0.45 * n_runs), layout="constrained")
    ax = fig.subplots()
    im = ax.imshow(table.to_numpy(), aspect="auto", cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
    ylabels = [f"{r} @ step {cps.at[r, 'step']}" + (" [running]" if sweep.runs.at[r, "in_progress"] else "")
               for r in table.index]
    ax.set_yticks(range(n_runs), ylabels, fontsize=9)
    if n_problems <= 120:  # ids without their set prefix; the set is written above its block
        ax.set_xticks(range(n_problems), [p.removeprefix(f"{ds}-") for ds, p in order], rotation=90,
                      fontsize=PROBLEM_ID_FONTSIZE)
        ax.set_xlabel("problem id (within its set)", fontsize=10)
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
