"""analysis.plots: the figures hold the lines they promise (checked on the Figure objects)."""

from __future__ import annotations

import numpy as np
import pytest

from analysis import plots
from analysis.load import load_sweep
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
    assert len(axes[0].collections) == 3  # one bootstrap band per method


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
    image = fig.axes[0].get_images()[0].get_array()
    assert image.shape == (6, 9)
    assert np.nanmin(image) >= 0 and np.nanmax(image) <= 1
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[0] == "pg-seed1 @ step 30" and labels[-1] == "sc-seed2 @ step 10 [running]"


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
