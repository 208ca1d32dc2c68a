"""The report's figures: evaluation curves, training curves and the per-problem matrix.

Each function returns a :class:`matplotlib.figure.Figure` built without pyplot (no global state,
no GUI backend: it renders with Agg wherever it runs); :func:`save` writes it as PNG. How an arm is
drawn (colour, dash, marker, width, legend label) is :mod:`analysis.styles`.

One seed per method: each run is its own line in its method's style, labelled by run. Several seeds
(:func:`analysis.styles.several_seeds`): each panel shows each method's mean with its 95% band (the
evaluation curves: the two-level interval over seeds and problems the tables use; the training curves:
the t interval over seeds, :mod:`analysis.seed_curves`) and its seeds as thin unlabelled lines of its
colour, all methods in one panel so that their means and bands compare at a glance and the figure does
not grow with the seeds; the legend names methods, with their seed counts and any run still going.
The per-problem matrix gains a block of the methods' seed means above its run rows.

A panel where curves coincide over two or more consecutive points says so in a note under its x
label (:mod:`analysis.coincidence`): with one seed per pair of runs; with several seeds per pair of
methods, counting the seeds whose runs coincide from the start. Notes and titles are wrapped to
their panel's width (:mod:`analysis.panel_text`); ``fig.coincidence_notes`` maps each panel title
to its note as printed. Tick labels are plain numbers (no offset, no scientific multiplier).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.coincidence import (
    coincidence_note,
    coinciding_curves,
    panel_tolerance,
    seed_coincidence_note,
    seed_coincidences,
)
from analysis.load import Sweep
from analysis.panel_text import wrap
from analysis.seed_curves import seed_band
from analysis.stats import MOVING_AVERAGE_WINDOW, Resampler, backward_moving_average
from analysis.styles import (
    SEED_LINE,
    band_alpha,
    markevery,
    method_color,
    method_label,
    method_style,
    plain_ticks,
    run_label,
    seed_lines,
    seed_runs,
    several_seeds,
)
from analysis.tables import (
    AVG,
    checkpoint_steps,
    eval_curves_table,
    per_problem_table,
    retest_band,
    retest_table,
)

RETEST_Z = 1.96  # half-width of the test-retest band in pooled test-retest sds
PROBLEM_ID_FONTSIZE = 9.5

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

#: eval_curves.png: inches per panel slot, and of its axes' width within the slot (the rest holds the y
#: label and tick labels); the note's font size.
EVAL_PANEL_W, EVAL_PANEL_H, EVAL_AXES_W, EVAL_NOTE_FONTSIZE = 5.2, 3.9, 4.3, 10.0
#: train_curves.png: inches per panel slot, of an axes' height, of the gap between rows (title, ticks, x
#: label and a one-line note), of each further line of a note or title; margins and spacing.
TRAIN_PANEL_W, TRAIN_AXES_H, TRAIN_GAP_H, TRAIN_LINE_H = 5.0, 2.12, 1.3, 0.16
TRAIN_LEFT, TRAIN_RIGHT, TRAIN_WSPACE, TRAIN_NOTE_FONTSIZE = 0.06, 0.985, 0.22, 8.5
TRAIN_TOP_H, TRAIN_BOTTOM_H, TRAIN_LEGEND_ROW_H = 1.15, 0.8, 0.25  # top: room for a two-line suptitle
SUPTITLE_FONTSIZE, SUPTITLE_LINE_H = 12.0, 0.22


def _grid(n: int, ncols: int) -> tuple[int, int]:
    ncols = min(ncols, n)
    return -(-n // ncols), ncols


def _lines(text: str) -> int:
    return text.count("\n") + 1 if text else 0


def _curve_names(sweep: Sweep, runs: list[str]) -> dict[str, str]:
    """Names for coincidence notes: the method where each method has one run here, else the run."""
    methods = [sweep.runs.at[r, "method"] for r in runs]
    return dict(zip(runs, methods if len(set(methods)) == len(methods) else runs, strict=True))


def panel_note(sweep: Sweep, curves: dict[str, pd.Series], multi: bool,
               means: dict[str, pd.Series] | None = None) -> str:
    """The coincidence note of a panel whose runs draw ``curves`` (run -> values by step), unwrapped.

    One seed (``multi`` False): the coinciding runs, named by method where each method has one run.
    Several seeds: per pair of methods, the seeds whose runs coincide from the start; the tolerance
    counts the methods' ``means`` too, as drawn.
    """
    values = {**curves, **{f"mean:{m}": v for m, v in (means or {}).items()}}
    tolerance = panel_tolerance(values)
    if not multi:
        names = _curve_names(sweep, list(curves))
        named = {names[r]: v for r, v in curves.items()}
        return coincidence_note(coinciding_curves(named, tolerance), list(named), limit=2)
    by_method: dict[str, dict[int, pd.Series]] = {}
    for method, runs in seed_runs(sweep, list(curves)).items():
        for run in runs:
            by_method.setdefault(method, {}).setdefault(int(sweep.runs.at[run, "seed"]), curves[run])
    return seed_coincidence_note(seed_coincidences(by_method, tolerance))


def _series(g: pd.DataFrame, column: str = "mean_at_k") -> pd.Series:
    return pd.Series(g[column].to_numpy(float), index=g["step"].to_numpy())


def _suptitle(fig: Figure, text: str, width_in: float) -> None:
    fig.suptitle(wrap(text, width_in, SUPTITLE_FONTSIZE), fontsize=SUPTITLE_FONTSIZE)


def eval_curves(sweep: Sweep, resampler: Resampler | None = None, curves: pd.DataFrame | None = None,
                retest: pd.DataFrame | None = None, method_curves: pd.DataFrame | None = None) -> Figure:
    """mean@k against step, one panel per set and one for ``avg``, raw (no smoothing).

    One seed per method: one line per run with its per-point 95% bootstrap band over problems.
    Several seeds: per method the seed-averaged per-problem scores (steps all its seeds evaluated)
    with the two-level band over seeds and problems, and each seed thin, without band or legend
    entry. ``curves``/``method_curves``: the ``by="run"``/``by="method"`` tables of
    :func:`analysis.tables.eval_curves_table` if already computed. A run with repeated evaluations
    (``retest``, default :func:`analysis.tables.retest_table`) gets a hatched test-retest band, its
    curve ``± RETEST_Z x`` the pooled test-retest sd of :func:`analysis.tables.retest_band`.
    """
    resampler = resampler or Resampler()
    band = retest_band(retest if retest is not None else retest_table(sweep)).set_index(["run", "data_source"])
    multi = several_seeds(sweep)
    by_run = curves if curves is not None else eval_curves_table(sweep, resampler, by="run")
    if multi:
        main = method_curves if method_curves is not None else eval_curves_table(sweep, resampler, by="method")
    else:
        main = by_run
    labels = [*sweep.sets, AVG]
    methods = sweep.methods
    panels = []  # (set, its main curves, its run curves, its wrapped note): the notes size the figure
    for ds in labels:
        m, r = main[main["data_source"] == ds], by_run[by_run["data_source"] == ds]
        runs = {name: _series(g) for name, g in r.groupby("curve", sort=False)}
        means = {name: _series(g) for name, g in m.groupby("curve", sort=False)} if multi else None
        note = wrap(panel_note(sweep, runs, multi, means), EVAL_AXES_W, EVAL_NOTE_FONTSIZE)
        panels.append((ds, m, r, note))
    nrows, ncols = _grid(len(labels), 3)
    extra = max(_lines(note) for *_, note in panels) - 1
    fig = Figure(figsize=(EVAL_PANEL_W * ncols, (EVAL_PANEL_H + 0.18 * max(extra, 0)) * nrows + 0.6),
                 layout="constrained")
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
    fig.coincidence_notes = {}  # panel title -> its coincidence note (as printed)
    hatch_label = True
    for ax, (ds, m, r, note) in zip(axes, panels, strict=False):
        seeds = seed_runs(sweep, list(dict.fromkeys(r["curve"])))
        for name, g in m.groupby("curve", sort=False):
            method = g["method"].iloc[0]
            style = method_style(method, methods)
            label = method_label(sweep, method, seeds.get(method, [])) if multi else run_label(sweep, name)
            ax.fill_between(g["step"], g["ci_low"], g["ci_high"], color=style["color"], alpha=band_alpha(sweep),
                            linewidth=0, gid=f"band:{name}")
            ax.plot(g["step"], g["mean_at_k"], label=label, gid=name, **style)
        if seed_lines(sweep):
            for name, g in r.groupby("curve", sort=False):
                ax.plot(g["step"], g["mean_at_k"], color=method_color(g["method"].iloc[0], methods),
                        label="_seed", gid=name, **SEED_LINE)
        for name, g in r.groupby("curve", sort=False):
            if (name, ds) in band.index:
                half = RETEST_Z * band.at[(name, ds), "sd"]
                label = (f"{name}: test-retest ±{RETEST_Z} sd" if not multi
                         else f"test-retest ±{RETEST_Z} sd (runs with repeats)" if hatch_label else "_retest")
                hatch_label = hatch_label and not multi
                ax.fill_between(g["step"], g["mean_at_k"] - half, g["mean_at_k"] + half, facecolor="none",
                                edgecolor=method_color(g["method"].iloc[0], methods), hatch="///", linewidth=0,
                                alpha=0.5, label=label)
        n = sum(len(sweep.problems[s]) for s in sweep.sets) if ds == AVG else len(sweep.problems[ds])
        title = f"avg of {len(sweep.sets)} sets ({n} problems)" if ds == AVG else f"{ds} ({n} problems)"
        ax.set_title(title)
        ax.set_ylabel(f"mean@{sweep.k}")
        ax.grid(alpha=0.3)
        plain_ticks(ax)
        ax.set_xlabel(f"training step\n{note}" if note else "training step", fontsize=EVAL_NOTE_FONTSIZE)
        fig.coincidence_notes[title] = note
    for ax in axes[len(labels):]:
        ax.set_visible(False)
    handles, leg_labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, leg_labels, loc="outside lower center", ncols=min(4, max(len(leg_labels), 1)), fontsize=9)
    what = ("two-level over seeds and problems" + ("; thin lines: one seed each" if seed_lines(sweep) else "")
            if multi else "bootstrap over problems")
    coincide = ("\nwhere same-seed runs coincide (note under a panel) the later arm's line is drawn on top" if multi
                else "\nwhere lines coincide (note under a panel) the thinner line is drawn over the thicker one")
    _suptitle(fig, f"{sweep.root.name}: mean@{sweep.k} per evaluation (raw, no smoothing; band = 95% {what}"
              + ("; hatched = test-retest" if len(band) else "") + ")"
              + (coincide if any(fig.coincidence_notes.values()) else ""), EVAL_PANEL_W * ncols)
    return fig


def _smoothed(sweep: Sweep, panels: list[tuple[str, str]], window: int
              ) -> list[tuple[str, str, dict[str, pd.Series]]]:
    """Per panel a run logs: (title, metric, run -> its ``window``-step backward moving average)."""
    train = sweep.train
    counts = train.groupby("run", sort=False).count()  # non-null values per run and metric
    steps = {run: rows.to_numpy() for run, rows in train.groupby("run", sort=False)["step"]}
    out = []
    for title, metric in panels:
        if metric not in counts:
            continue
        logs = counts[metric] > 0
        if DUPLICATES.get(metric) in counts:
            logs &= counts[DUPLICATES[metric]] == 0
        runs = [r for r in sweep.runs.index if logs.get(r, False)]
        if not runs:
            continue
        scale = float(train[metric].median()) if metric in RELATIVE_TO_SWEEP_MEDIAN else 1.0
        # every run's moving average in one rolling window over a steps x runs frame: a run's missing steps
        # are NaN there as in its own series, so each column is backward_moving_average of that run
        wide = train.pivot(index="step", columns="run", values=metric)[runs].astype(float) / scale
        smooth = backward_moving_average(wide, window)
        values, at = smooth.to_numpy(), {r: np.searchsorted(smooth.index.to_numpy(), steps[r]) for r in runs}
        out.append((title, metric, {r: pd.Series(values[at[r], i], index=steps[r]) for i, r in enumerate(runs)}))
    return out


def _train_title_fontsize(title: str) -> float:
    return 10.0 if len(title) < 60 else 8.5


def train_curves(sweep: Sweep, window: int = MOVING_AVERAGE_WINDOW, panels: list[tuple[str, str]] | None = None
                 ) -> Figure:
    """Training metrics as backward ``window``-step moving averages, one panel per metric.

    The value at step s is the mean of the non-null values of steps max(1, s-window+1)..s
    (:func:`analysis.stats.backward_moving_average`). Arms are overlaid; an arm that does not log
    a metric (absent or all null) is left out of that panel, and a panel no arm logs is dropped.
    Several seeds: per method the mean of its seeds' moving averages (steps all of them have) with the
    95% t interval over seeds (:func:`analysis.seed_curves.seed_band`), and each seed thin.
    """
    multi = several_seeds(sweep)
    present = _smoothed(sweep, panels or TRAIN_PANELS, window)
    nrows, ncols = _grid(max(len(present), 1), 3)
    width = TRAIN_PANEL_W * ncols
    axes_w = (TRAIN_RIGHT - TRAIN_LEFT) * width / (ncols + TRAIN_WSPACE * (ncols - 1))
    methods = sweep.methods
    drawn = []  # (title, wrapped title, note, per method: (runs, band or None))
    for title, _, curves in present:
        groups = seed_runs(sweep, list(curves))
        bands = {m: seed_band({r: curves[r] for r in runs}) for m, runs in groups.items() if multi and len(runs) > 1}
        means = {m: pd.Series(b["mean"].to_numpy(float), index=b["step"].to_numpy()) for m, b in bands.items()}
        note = wrap(panel_note(sweep, curves, multi, means), axes_w, TRAIN_NOTE_FONTSIZE)
        drawn.append((title, wrap(title, axes_w, _train_title_fontsize(title)), note, curves, groups, bands))
    extra = max([_lines(d[2]) - 1 + _lines(d[1]) - 1 for d in drawn] or [0])
    gap = TRAIN_GAP_H + TRAIN_LINE_H * max(extra, 0)
    legend_entries = len(methods) if multi else len(sweep.runs)
    legend_rows = -(-legend_entries // 4)
    what = ("; per method the mean of its seeds with its 95% t interval over seeds"
            + (", thin lines: one seed each" if seed_lines(sweep) else "") if multi else "")
    coincide = ("\nwhere same-seed runs coincide (note under a panel) the later arm's line is drawn on top" if multi
                else "\nwhere lines coincide (note under a panel) the thinner line is drawn over the thicker one")
    suptitle = wrap(f"{sweep.root.name}: training metrics, backward {window}-step moving average "
                    f"(value at step s = mean of steps s-{window - 1}..s){what}"
                    + (coincide if any(d[2] for d in drawn) else ""), width, SUPTITLE_FONTSIZE)
    top = TRAIN_TOP_H + SUPTITLE_LINE_H * max(_lines(suptitle) - 2, 0)
    bottom = TRAIN_BOTTOM_H + TRAIN_LINE_H * max(extra, 0) + TRAIN_LEGEND_ROW_H * legend_rows
    height = top + nrows * TRAIN_AXES_H + (nrows - 1) * gap + bottom
    # fixed margins instead of a layout engine: this figure has many panels and constrained layout
    # would double its rendering time
    fig = Figure(figsize=(width, height))
    fig.subplots_adjust(left=TRAIN_LEFT, right=TRAIN_RIGHT, top=1 - top / height, bottom=bottom / height,
                        hspace=gap / TRAIN_AXES_H, wspace=TRAIN_WSPACE)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
    handles: dict[str, object] = {}
    labels: dict[str, str] = {}
    fig.coincidence_notes = {}  # panel title -> its coincidence note (as printed)
    for ax, (title, wrapped, note, curves, groups, bands) in zip(axes, drawn, strict=False):
        for method, runs in groups.items():
            style = method_style(method, methods)
            thin = {**style, "linewidth": style["linewidth"] * 0.8, "markersize": style["markersize"] * 0.8}
            position = methods.index(method)
            if not multi:
                for run in runs:
                    (line,) = ax.plot(curves[run].index, curves[run].to_numpy(), label=run_label(sweep, run),
                                      gid=run, markevery=markevery(len(curves[run]), position, len(methods)), **thin)
                    handles.setdefault(run, line)
                    labels.setdefault(run, run_label(sweep, run))
                continue
            for run in runs if len(runs) > 1 and seed_lines(sweep) else []:
                ax.plot(curves[run].index, curves[run].to_numpy(), color=style["color"], label="_seed", gid=run,
                        **SEED_LINE)
            if method in bands:
                b = bands[method]
                ax.fill_between(b["step"], b["ci_low"], b["ci_high"], color=style["color"], alpha=band_alpha(sweep),
                                linewidth=0, gid=f"band:{method}")
                x, y = b["step"].to_numpy(), b["mean"].to_numpy()
            else:
                x, y = curves[runs[0]].index, curves[runs[0]].to_numpy()
            label = method_label(sweep, method, sweep.runs_of(method))
            (line,) = ax.plot(x, y, label=label, gid=method, markevery=markevery(len(x), position, len(methods)),
                              **thin)
            handles.setdefault(method, line)
            labels.setdefault(method, label)
        ax.set_title(wrapped, fontsize=_train_title_fontsize(title))
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        plain_ticks(ax)
        ax.set_xlabel(f"training step\n{note}" if note else "training step", fontsize=TRAIN_NOTE_FONTSIZE)
        fig.coincidence_notes[title] = note
    for ax in axes[len(present):]:
        ax.set_visible(False)
    if not present:
        axes[0].set_visible(True)
        axes[0].text(0.5, 0.5, "no train metrics logged yet", ha="center", va="center")
    order = [m for m in methods if m in handles] if multi else [r for r in sweep.runs.index if r in handles]
    fig.legend([handles[k] for k in order], [labels[k] for k in order], loc="lower center",
               bbox_to_anchor=(0.5, 0.1 / height), ncols=min(4, max(len(order), 1)), fontsize=9)
    fig.suptitle(suptitle, fontsize=SUPTITLE_FONTSIZE)
    return fig


def _set_blocks(ax, sweep: Sweep, y_text: float) -> None:
    """White lines between the sets' column blocks, each set's name above its block at ``y_text``."""
    start = 0
    for ds in sweep.sets:
        n = len(sweep.problems[ds])
        if start:
            ax.axvline(start - 0.5, color="white", linewidth=2)
        ax.text(start + n / 2 - 0.5, y_text, ds, ha="center", va="bottom", fontsize=10)
        start += n


def _problem_ticks(ax, order: list[tuple[str, str]]) -> None:
    if len(order) <= 120:  # ids without their set prefix; the set is written above its block
        ax.set_xticks(range(len(order)), [p.removeprefix(f"{ds}-") for ds, p in order], rotation=90,
                      fontsize=PROBLEM_ID_FONTSIZE)
        ax.set_xlabel("problem id (within its set)", fontsize=10)
    else:
        ax.set_xticks([])


def _run_label(sweep: Sweep, run: str, cps: pd.DataFrame) -> str:
    return f"{run} @ step {cps.at[run, 'step']}" + (" [running]" if sweep.runs.at[run, "in_progress"] else "")


def per_problem(sweep: Sweep, checkpoint: str | int = "final") -> Figure:
    """Runs x problems matrix of per-problem mean correctness at ``checkpoint``.

    Problems are grouped by set and, within a set, ordered from hardest to easiest by their mean
    over runs, so problems that move between methods stand out as off-colour cells in a column.
    Several seeds: a block of one row per method (the mean over its seeds) above the run rows, which
    are grouped by method and get thinner with more runs (:func:`per_problem_row_height`); their
    labels are dropped below a readable font size, the method blocks then named at their middle.
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
    label = cps["checkpoint"].iloc[0]
    title = f"{sweep.root.name}: per-problem accuracy at the {label} checkpoint "
    if several_seeds(sweep):
        return _per_problem_by_method(sweep, table, cps, order, width, title)
    fig = Figure(figsize=(width, 2.0 + 0.45 * n_runs), layout="constrained")
    ax = fig.subplots()
    im = ax.imshow(table.to_numpy(), aspect="auto", cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
    ax.set_yticks(range(n_runs), [_run_label(sweep, r, cps) for r in table.index], fontsize=9)
    _problem_ticks(ax, order)
    _set_blocks(ax, sweep, -0.7)
    ax.set_ylim(n_runs - 0.5, -1.2)
    cb = fig.colorbar(im, ax=ax, fraction=0.03, pad=0.01)
    cb.set_label(f"mean@{sweep.k} of the problem")
    fig.suptitle(title + "(problems sorted hardest to easiest within each set)", fontsize=11)
    return fig


#: Inches of one method row and the most and least of one run row of the per-problem matrix with
#: several seeds; the run block aims at PER_PROBLEM_RUNS_H inches; run labels need RUN_LABEL_MIN_PT.
METHOD_ROW_H, RUN_ROW_MAX_H, RUN_ROW_MIN_H, PER_PROBLEM_RUNS_H, RUN_LABEL_MIN_PT = 0.45, 0.45, 0.06, 9.0, 6.0


def per_problem_row_height(n_runs: int) -> float:
    """Inches of one run's row with ``n_runs`` runs: PER_PROBLEM_RUNS_H / n_runs within the bounds above."""
    return min(RUN_ROW_MAX_H, max(RUN_ROW_MIN_H, PER_PROBLEM_RUNS_H / max(n_runs, 1)))


def _per_problem_by_method(sweep: Sweep, table: pd.DataFrame, cps: pd.DataFrame, order: list[tuple[str, str]],
                           width: float, title: str) -> Figure:
    groups = seed_runs(sweep, list(table.index))
    means = pd.DataFrame([table.loc[runs].mean(axis=0) for runs in groups.values()], index=list(groups))
    table = table.loc[[r for runs in groups.values() for r in runs]]
    n_runs, row_h = len(table), per_problem_row_height(len(table))
    methods_h, runs_h = METHOD_ROW_H * len(groups) + 0.5, row_h * n_runs
    fig = Figure(figsize=(width, 2.4 + methods_h + runs_h), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[methods_h, runs_h])
    kw = {"aspect": "auto", "cmap": "viridis", "vmin": 0, "vmax": 1, "interpolation": "nearest"}
    im = top.imshow(means.to_numpy(), **kw)
    bottom.imshow(table.to_numpy(), **kw)
    top.set_yticks(range(len(groups)), [method_label(sweep, m, rs) for m, rs in groups.items()], fontsize=9)
    top.set_ylim(len(groups) - 0.5, -1.2)
    top.tick_params(axis="x", bottom=False, labelbottom=False)
    _set_blocks(top, sweep, -0.7)
    starts = np.cumsum([0] + [len(rs) for rs in groups.values()])
    for y in starts[1:-1]:
        bottom.axhline(y - 0.5, color="white", linewidth=1.5)
    fontsize = min(9.0, row_h * 72 * 0.75)
    if fontsize >= RUN_LABEL_MIN_PT:
        bottom.set_yticks(range(n_runs), [_run_label(sweep, r, cps) for r in table.index], fontsize=fontsize)
    else:
        bottom.set_yticks((starts[:-1] + starts[1:] - 1) / 2,
                          [f"{m}: {len(rs)} runs" for m, rs in groups.items()], fontsize=9)
    bottom.set_ylabel("runs (by method, then seed)", fontsize=10)
    _problem_ticks(bottom, order)
    for ds_start in np.cumsum([len(sweep.problems[ds]) for ds in sweep.sets])[:-1]:
        bottom.axvline(ds_start - 0.5, color="white", linewidth=2)
    cb = fig.colorbar(im, ax=[top, bottom], fraction=0.03, pad=0.01)
    cb.set_label(f"mean@{sweep.k} of the problem")
    fig.suptitle(title + "(top: each method's mean over its seeds; below: every run; problems sorted hardest to "
                 "easiest within each set)", fontsize=11)
    return fig


def save(fig: Figure, path: str | Path, dpi: int = 110) -> Path:
    """Write ``fig`` as PNG to ``path``."""
    path = Path(path)
    fig.savefig(path, dpi=dpi)
    return path
