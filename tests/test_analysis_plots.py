"""analysis.plots: the figures hold the lines they promise (checked on the Figure objects)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from analysis import plots
from analysis.load import load_sweep
from analysis.seeds import mean_two_level
from analysis.stats import Resampler, backward_moving_average
from analysis.synthetic import build_sweep


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("p") / "sweep"
    return load_sweep(build_sweep(root, methods=("pg", "tis", "sc"), seeds=(1, 2), total_steps=30,
                                  eval_every=10, sets={"a": 5, "b": 4}, k=2, running={"sc-seed2": 15}))


def _lines(ax):
    return {line.get_label(): line for line in ax.get_lines()}


def test_eval_curves_raw_values_and_bands(sweep):
    fig = plots.eval_curves(sweep, Resampler(n_boot=300))
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == ["a (5 problems)", "b (4 problems)", "avg of 2 sets (9 problems)"]
    lines = _lines(axes[0])
    assert "pg (mean of 2 seeds)" in lines and "sc-seed2 (running, step 15/30)" in lines
    # the per-seed line is the raw mean@k at each evaluated step (no smoothing)
    x, y = lines["pg-seed1"].get_data()
    steps, scores = sweep.scores("pg-seed1")
    assert np.array_equal(x, steps) and np.allclose(y, scores[:, :5].mean(axis=1))
    assert len(axes[0].collections) == 3  # one band per method
    # the method's line: the seeds' mean; its band: the two-level interval over seeds and problems
    (x1, y1), (x2, y2) = (sweep.scores(f"pg-seed{s}") for s in (1, 2))
    x, y = lines["pg (mean of 2 seeds)"].get_data()
    assert np.array_equal(x, x1) and np.array_equal(x1, x2)
    assert np.allclose(y, (y1[:, :5].mean(axis=1) + y2[:, :5].mean(axis=1)) / 2)
    band = mean_two_level(np.stack([y1[-1, :5], y2[-1, :5]]), [slice(0, 5)])
    edge = axes[0].collections[0].get_paths()[0].vertices
    at_30 = edge[edge[:, 0] == 30, 1]
    assert (at_30.min(), at_30.max()) == pytest.approx((band["ci_low"][0], band["ci_high"][0]))


def test_train_curves_moving_average_and_missing_metrics(sweep):
    fig = plots.train_curves(sweep)
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert "TIS clip fraction" in titles and "SC sampler head mass Q" in titles
    by_title = {ax.get_title(): ax for ax in fig.axes}
    tis_panel = _lines(by_title["TIS clip fraction"])
    assert set(tis_panel) == {"tis-seed1", "tis-seed2"}  # arms without the metric are left out
    assert set(_lines(by_title["SC trainer head mass P"])) == {"sc-seed1", "sc-seed2 (running, step 15/30)"}
    reward = _lines(by_title["reward (critic/score/mean)"])["pg-seed1"]
    rows = sweep.train[sweep.train["run"] == "pg-seed1"].set_index("step")["critic/score/mean"]
    x, y = reward.get_data()
    assert np.allclose(y, backward_moving_average(rows, 20).to_numpy())
    assert y[25] == pytest.approx(rows.loc[7:26].mean())  # step 26 averages steps 7..26


def test_train_curves_drop_panels_no_arm_logs(tmp_path):
    sweep = load_sweep(build_sweep(tmp_path / "s", methods=("pg",), total_steps=5, eval_every=5, sets={"a": 2}, k=1))
    titles = [ax.get_title() for ax in plots.train_curves(sweep).axes if ax.get_visible()]
    assert "TIS clip fraction" not in titles and "reward (critic/score/mean)" in titles and len(titles) == 9


def test_per_problem_matrix(sweep):
    fig = plots.per_problem(sweep, "final")
    image = np.asarray(fig.axes[0].get_images()[0].get_array())
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[0] == "pg-seed1 @ step 30" and labels[-1] == "sc-seed2 @ step 10 [running]"
    # row: the run's scores at its last evaluation; columns: each set's problems, hardest (lowest mean
    # over the runs) first, ties in problem order
    runs = [label.split(" @ ")[0] for label in labels]
    final = np.stack([sweep.scores(run)[1][-1] for run in runs])
    order = np.concatenate([sl.start + np.argsort(final[:, sl].mean(axis=0), kind="stable") for sl in sweep.set_slices])
    assert image.shape == (6, 9) and np.array_equal(image, final[:, order])


def test_eval_curves_draw_the_test_retest_band(tmp_path):
    from analysis.synthetic import counts_to_acc, write_run

    evals = {s: {"a": counts_to_acc([0, 1, 2, 2], 2)} for s in (0, 5, 10)}
    reps = {s: [{"a": counts_to_acc(c, 2)} for c in ([1, 1, 2, 2], [0, 0, 2, 1])] for s in (0, 10)}
    write_run(tmp_path / "s" / "pg-seed1", method="pg", seed=1, evals=evals, total_steps=10, repeat_evals=reps)
    write_run(tmp_path / "s" / "sc-seed1", method="sc", seed=1, evals=evals, total_steps=10)
    sweep = load_sweep(tmp_path / "s")
    fig = plots.eval_curves(sweep, Resampler(n_boot=100))
    ax = fig.axes[0]
    hatched = [c for c in ax.collections if c.get_hatch()]
    assert [c.get_label() for c in hatched] == ["pg-seed1: test-retest ±1.96 sd"]  # only the run with repeats
    from analysis.tables import retest_band, retest_table
    sd = retest_band(retest_table(sweep)).set_index(["run", "data_source"]).at[("pg-seed1", "a"), "sd"]
    ys = hatched[0].get_paths()[0].vertices[:, 1]
    mean = 5 / 8  # mean@2 of the repeat-0 curve at every step
    assert ys.max() == pytest.approx(mean + 1.96 * sd) and ys.min() == pytest.approx(mean - 1.96 * sd)


# -- arms that coincide, timing, duplicates, tick labels, problem ids (issue 19) ---------------------------
def test_coinciding_curves_groups_and_ranges():
    import pandas as pd

    from analysis.coincidence import Coincidence, coincidence_note, coinciding_curves

    steps = range(0, 50, 10)
    pg = pd.Series([0.5, 0.6, 0.7, 0.8, 0.9], index=steps)
    sc = pd.Series([0.5, 0.6, 0.7, 0.75, 0.7], index=steps)  # equal to pg over steps 0-20
    tis = pd.Series([0.5, 0.55, 0.65, 0.7, 0.8], index=steps)
    sc_tis = pd.Series([0.5, 0.55, 0.65, 0.7, 0.8], index=steps) + 1e-9  # equal to tis everywhere
    found = coinciding_curves({"pg": pg, "tis": tis, "sc": sc, "sc_tis": sc_tis}, tolerance=1e-6)
    assert found == [Coincidence(("pg", "sc"), 0, 20), Coincidence(("tis", "sc_tis"), 0, 40)]
    assert coincidence_note(found) == "coincide: pg = sc, steps 0-20; tis = sc_tis, steps 0-40"
    # step 0 alone (every arm starts from the same model) is one point: not a coincidence
    assert coinciding_curves({"pg": pg, "tis": tis}, tolerance=1e-6) == []
    # three curves equal over one range form one group; every curve of the panel reads "all"
    same = coinciding_curves({"a": pg, "b": pg.copy(), "c": pg.copy()}, tolerance=0.0)
    assert same == [Coincidence(("a", "b", "c"), 0, 40)]
    assert coincidence_note(same, every=["a", "b", "c"]) == "coincide: all, steps 0-40"
    assert coincidence_note([]) == ""


@pytest.fixture(scope="module")
def twin_sweep(tmp_path_factory):
    """One seed; sc's evaluations equal pg's up to step 10, sc_tis's equal tis's throughout."""
    from analysis.synthetic import counts_to_acc, write_run

    root = tmp_path_factory.mktemp("twin") / "sweep"
    base = {0: [1, 2, 0, 1], 5: [2, 2, 1, 1], 10: [2, 2, 2, 1], 15: [2, 2, 2, 2]}
    other = {0: [1, 2, 0, 1], 5: [1, 1, 1, 1], 10: [0, 2, 1, 1], 15: [1, 1, 1, 2]}
    evals = {
        "pg": base,
        "sc": {**base, 15: [0, 0, 1, 0]},
        "tis": other,
        "sc_tis": other,
    }
    for method, counts in evals.items():
        write_run(root / f"{method}-seed1", method=method, seed=1, total_steps=15,
                  evals={s: {"a": counts_to_acc(c, 2)} for s, c in counts.items()})
    return load_sweep(root)


def test_eval_curves_give_each_arm_a_style_and_note_where_arms_coincide(twin_sweep):
    fig = plots.eval_curves(twin_sweep, Resampler(n_boot=50))
    ax = fig.axes[0]
    lines = _lines(ax)
    styles = {run: (line.get_linestyle(), line.get_marker(), line.get_linewidth(), line.get_zorder())
              for run, line in lines.items()}
    assert len({(ls, m) for ls, m, _, _ in styles.values()}) == 4  # dash pattern and marker differ per arm
    widths = [styles[f"{m}-seed1"][2] for m in ("pg", "tis", "sc", "sc_tis")]
    zorders = [styles[f"{m}-seed1"][3] for m in ("pg", "tis", "sc", "sc_tis")]
    assert widths == sorted(widths, reverse=True) and zorders == sorted(zorders)  # later = thinner, on top
    note = fig.coincidence_notes[ax.get_title()]
    assert note == "coincide: pg = sc, steps 0-10; tis = sc_tis, steps 0-15"
    assert ax.get_xlabel() == f"training step\n{note}"


def test_axis_labels_are_plain_numbers(tmp_path):
    """A metric varying in the 5th decimal near 1 (the offset label 1e-5+9.995e-1) is labelled plainly."""
    sweep = load_sweep(build_sweep(tmp_path / "s", methods=("pg",), total_steps=30, eval_every=10,
                                   sets={"a": 3}, k=2))
    sweep.train["critic/score/mean"] = 0.9995 + 1e-5 * np.arange(len(sweep.train))
    fig = plots.train_curves(sweep, panels=[("near one", "critic/score/mean")])
    fig.canvas.draw()
    ax = fig.axes[0]
    assert ax.yaxis.get_offset_text().get_text() == ""
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert labels and all("e" not in label for label in labels) and float(labels[0]) > 0.99, labels


def test_timing_panels_are_cpu_time_and_wall_time_relative_to_the_sweep_median(sweep):
    fig = plots.train_curves(sweep)
    by_title = {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}
    wall = [t for t in by_title if t.startswith("wall time per step / sweep median")]
    assert wall and "not a cost of the method" in wall[0] and "step time (s)" not in by_title
    median = float(sweep.train["timing_s/step"].median())
    rows = sweep.train[sweep.train["run"] == "pg-seed1"].set_index("step")["timing_s/step"] / median
    _, y = _lines(by_title[wall[0]])["pg-seed1"].get_data()
    assert np.allclose(y, backward_moving_average(rows, 20).to_numpy())


def test_sc_head_mass_panels_only_for_runs_without_the_mismatch_metrics(sweep):
    train = sweep.train.copy()
    sweep_with = dataclasses.replace(sweep, train=train.assign(**{"mismatch/sampler_head_mass": 0.9,
                                                                  "mismatch/train_head_mass": 0.9}))
    titles = [ax.get_title() for ax in plots.train_curves(sweep_with).axes if ax.get_visible()]
    assert "SC sampler head mass Q" not in titles and "SC trainer head mass P" not in titles
    assert "mismatch: sampler head mass Q (all arms)" in titles


def test_per_problem_ids_are_readable(sweep):
    fig = plots.per_problem(sweep, "final")
    ticks = fig.axes[0].get_xticklabels()
    assert ticks and all(t.get_fontsize() >= 9 for t in ticks)
