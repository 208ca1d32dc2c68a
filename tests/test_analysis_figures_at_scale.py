"""The figures of a 4 x 16 sweep (64 runs): a legend by method, one band per method, thin seeds, and notes
that summarise the seeds and fit under their panel (issue 27)."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from analysis import plots
from analysis.load import load_sweep
from analysis.panel_text import chars_per_line
from analysis.stats import Resampler
from analysis.styles import SEED_LINE
from analysis.synthetic import build_sweep, divergence_steps

METHODS = ("pg", "tis", "sc", "sc_tis")
SEEDS = tuple(range(1, 17))
EVERY = 10
LEGEND = ["pg: mean of 16 seeds", "tis: mean of 16 seeds", "sc: mean of 16 seeds (1 running)",
          "sc_tis: mean of 16 seeds"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """sc follows pg and sc_tis follows tis, per seed, through a divergence step drawn by the synthetic sweep."""
    root = tmp_path_factory.mktemp("scale") / "sweep"
    build_sweep(root, methods=METHODS, seeds=SEEDS, total_steps=40, eval_every=EVERY, sets={"a": 6, "b": 5}, k=2,
                running={"sc-seed16": 20}, coincide={"sc": ("pg", 20), "sc_tis": ("tis", 10)})
    return load_sweep(root)


@pytest.fixture(scope="module")
def figures(sweep):
    figs = {"eval": plots.eval_curves(sweep, Resampler(n_boot=100)), "train": plots.train_curves(sweep)}
    for fig in figs.values():
        FigureCanvasAgg(fig).draw()
    return figs


def _legend(fig):
    return [t.get_text() for t in fig.legends[0].get_texts()]


def _panels(fig):
    return [ax for ax in fig.axes if ax.get_visible()]


def test_the_legend_names_the_methods_not_the_64_runs(sweep, figures):
    assert len(sweep.runs) == 64
    for fig in figures.values():
        assert _legend(fig) == LEGEND  # 4 entries (the report had 68 and 64)


def test_one_band_and_sixteen_thin_unlabelled_seeds_per_method(sweep, figures):
    for ax in _panels(figures["eval"]):
        bands = [c.get_gid() for c in ax.collections if (c.get_gid() or "").startswith("band:")]
        assert sorted(bands) == sorted(f"band:{m}" for m in METHODS)
        seeds = [line for line in ax.get_lines() if line.get_gid() in sweep.runs.index]
        assert len(seeds) == 64 and all(line.get_label().startswith("_") for line in seeds)
        assert {line.get_linewidth() for line in seeds} == {SEED_LINE["linewidth"]}
    by_title = {ax.get_title(): ax for ax in _panels(figures["train"])}
    for title, methods in (("reward (critic/score/mean)", METHODS), ("TIS clip fraction", ("tis", "sc_tis"))):
        ax = by_title[title]
        bands = sorted(c.get_gid() for c in ax.collections if (c.get_gid() or "").startswith("band:"))
        assert bands == sorted(f"band:{m}" for m in methods)
        seeds = [line.get_gid() for line in ax.get_lines() if line.get_gid() in sweep.runs.index]
        assert len(seeds) == 16 * len(methods)


def _through_by_hand(sweep, a: str, b: str, ds: str) -> list[int]:
    """Per seed whose runs of ``a`` and ``b`` have equal mean@k at their first two or more common evaluations
    of set ``ds`` (or avg), the last step of that equal stretch (mean@k on 6 or 5 problems at k = 2 takes values
    1/12 or 1/10 apart, far above the panel's tolerance, so equal within it means equal)."""
    cols = {"a": slice(0, 6), "b": slice(6, 11)}
    out = []
    for seed in SEEDS:
        (sa, xa), (sb, xb) = sweep.scores(f"{a}-seed{seed}"), sweep.scores(f"{b}-seed{seed}")
        common = sorted(set(sa) & set(sb))
        ia, ib = [list(sa).index(s) for s in common], [list(sb).index(s) for s in common]
        if ds == "avg":
            va = (xa[ia][:, cols["a"]].mean(1) + xa[ia][:, cols["b"]].mean(1)) / 2
            vb = (xb[ib][:, cols["a"]].mean(1) + xb[ib][:, cols["b"]].mean(1)) / 2
        else:
            va, vb = xa[ia][:, cols[ds]].mean(1), xb[ib][:, cols[ds]].mean(1)
        n = next((i for i, same in enumerate(np.isclose(va, vb, rtol=0, atol=1e-12)) if not same), len(common))
        if n >= 2:
            out.append(common[n - 1])
    return out


def test_eval_notes_count_the_seeds_whose_runs_coincide_from_the_start(sweep, figures):
    from itertools import combinations

    for ax in _panels(figures["eval"]):
        ds = ax.get_title().split()[0]
        note = " ".join(figures["eval"].coincidence_notes[ax.get_title()].split())
        counts = {pair: _through_by_hand(sweep, *pair, ds) for pair in combinations(METHODS, 2)}
        assert len(counts["pg", "sc"]) == 16  # every seed follows pg through step 10 at least (divergence 10..30)
        found = sorted((pair for pair in counts if counts[pair]), key=lambda pair: -len(counts[pair]))  # stable
        parts = [f"{a} = {b} in {'all 16' if len(counts[a, b]) == 16 else f'{len(counts[a, b])} of 16'} seeds, "
                 f"median through step {np.median(counts[a, b]):g}" for a, b in found[:3]]
        more = f"; +{len(found) - 3} more" if len(found) > 3 else ""
        assert note == "coincide (same seed, from the start): " + "; ".join(parts) + more


def test_train_notes_follow_the_divergence_of_each_seed(sweep, figures):
    divergence = divergence_steps(20, 16, [0, METHODS.index("sc")])
    assert divergence.min() >= 10 and divergence.max() <= 30
    divergence = np.minimum(divergence, sweep.runs.loc[[f"sc-seed{s}" for s in SEEDS], "last_step"].to_numpy())
    for title in ("reward (critic/score/mean)", "entropy", "grad norm"):
        note = " ".join(figures["train"].coincidence_notes[title].split())
        found = note.split("pg = sc in all 16 seeds, median through step ")
        assert len(found) == 2, note
        # the moving averages of one trajectory stay equal through the divergence and a little after it
        assert float(found[1].split(";")[0]) >= np.median(divergence)


def test_notes_and_titles_fit_under_their_panel(figures):
    for name, fontsize in (("eval", plots.EVAL_NOTE_FONTSIZE), ("train", plots.TRAIN_NOTE_FONTSIZE)):
        fig = figures[name]
        renderer = fig.canvas.get_renderer()
        axes = _panels(fig)
        wrapped = 0
        for ax in axes:
            box = ax.get_window_extent(renderer)
            note = fig.coincidence_notes[" ".join(ax.get_title().split())] if name == "eval" else None
            label = ax.xaxis.label
            lines = label.get_text().split("\n")
            limit = chars_per_line(box.width / fig.dpi, fontsize)
            assert all(len(line) <= limit for line in lines), (lines, limit)
            wrapped += len(lines) > 2
            assert label.get_window_extent(renderer).width <= box.width, label.get_text()
            assert ax.title.get_window_extent(renderer).width <= box.width, ax.get_title()
            if note is not None:
                assert label.get_text() == f"training step\n{note}"
        assert wrapped >= 1  # the notes are long enough here to need their wrap
        # notes of neighbouring panels do not run into each other
        for left, right in zip(axes, axes[1:], strict=False):
            a, b = left.xaxis.label.get_window_extent(renderer), right.xaxis.label.get_window_extent(renderer)
            if abs(a.y1 - b.y1) < 1:  # same row
                assert a.x1 < b.x0


def test_per_problem_at_64_runs_stays_readable(sweep, monkeypatch):
    fig = plots.per_problem(sweep, "final")
    top, bottom = fig.axes[:2]
    assert top.get_images()[0].get_array().shape == (4, 11) and bottom.get_images()[0].get_array().shape == (64, 11)
    assert [t.get_text() for t in top.get_yticklabels()] == LEGEND
    labels = bottom.get_yticklabels()
    assert len(labels) == 64 and labels[-1].get_text() == "sc_tis-seed16 @ step 40"
    assert "sc-seed16 @ step 20 [running]" in [t.get_text() for t in labels]
    assert min(t.get_fontsize() for t in labels) >= plots.RUN_LABEL_MIN_PT
    assert fig.get_figheight() <= 2.4 + 4 * plots.METHOD_ROW_H + 0.5 + plots.PER_PROBLEM_RUNS_H + 1e-9
    # with rows too thin for a label, the method blocks are named instead
    monkeypatch.setattr(plots, "RUN_LABEL_MIN_PT", 20.0)
    ticks = plots.per_problem(sweep, "final").axes[1].get_yticklabels()
    assert [t.get_text() for t in ticks] == [f"{m}: 16 runs" for m in METHODS]
    assert plots.per_problem_row_height(256) == plots.RUN_ROW_MIN_H and plots.per_problem_row_height(4) == 0.45
