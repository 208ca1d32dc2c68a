"""analysis.plots: the figures hold the lines they promise (checked on the Figure objects)."""

from __future__ import annotations

import dataclasses

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
    """The lines of ``ax`` by gid: a run's line by its run name, a method's mean by the method."""
    return {line.get_gid(): line for line in ax.get_lines()}


def _legend(fig):
    return [t.get_text() for t in fig.legends[0].get_texts()]


def _bands(ax):
    return {c.get_gid(): c for c in ax.collections if (c.get_gid() or "").startswith("band:")}


def test_eval_curves_raw_values_and_bands(sweep):
    from analysis.tables import eval_curves_table

    fig = plots.eval_curves(sweep, Resampler(n_boot=300))
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == ["a (5 problems)", "b (4 problems)", "avg of 2 sets (9 problems)"]
    # the legend names methods, not runs; a method with a run still going says so
    assert _legend(fig) == ["pg: mean of 2 seeds", "tis: mean of 2 seeds", "sc: mean of 2 seeds (1 running)"]
    lines = _lines(axes[0])
    assert set(lines) == {"pg", "tis", "sc", *sweep.runs.index}
    assert all(lines[r].get_label().startswith("_") for r in sweep.runs.index)  # seeds: no legend entry
    # the per-seed line is the raw mean@k at each evaluated step (no smoothing)
    x, y = lines["pg-seed1"].get_data()
    steps, scores = sweep.scores("pg-seed1")
    assert np.array_equal(x, steps) and np.allclose(y, scores[:, :5].mean(axis=1))
    # the mean of the seeds' scores at the steps both evaluated, sc's ending with its running seed at step 10
    x, y = lines["sc"].get_data()
    assert list(x) == [0, 10] and np.allclose(y, [np.mean([sweep.scores(f"sc-seed{s}")[1][i, :5].mean()
                                                           for s in (1, 2)]) for i in (0, 1)])
    # one band per method, the two-level interval of the tables
    bands = _bands(axes[0])
    assert set(bands) == {"band:pg", "band:tis", "band:sc"}
    table = eval_curves_table(sweep, Resampler(n_boot=300), by="method").query("curve == 'pg' and data_source == 'a'")
    ys = bands["band:pg"].get_paths()[0].vertices[:, 1]
    assert ys.max() == pytest.approx(table["ci_high"].max()) and ys.min() == pytest.approx(table["ci_low"].min())


def test_train_curves_moving_average_and_missing_metrics(sweep):
    from scipy import stats

    fig = plots.train_curves(sweep)
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert "TIS clip fraction" in titles and "SC sampler head mass Q" in titles
    assert _legend(fig) == ["pg: mean of 2 seeds", "tis: mean of 2 seeds", "sc: mean of 2 seeds (1 running)"]
    by_title = {ax.get_title(): ax for ax in fig.axes}
    tis_panel = _lines(by_title["TIS clip fraction"])
    assert set(tis_panel) == {"tis-seed1", "tis-seed2", "tis"}  # arms without the metric are left out
    assert set(_lines(by_title["SC trainer head mass P"])) == {"sc-seed1", "sc-seed2", "sc"}
    reward = _lines(by_title["reward (critic/score/mean)"])
    smooth = {}
    for run in ("pg-seed1", "pg-seed2"):
        rows = sweep.train[sweep.train["run"] == run].set_index("step")["critic/score/mean"]
        x, y = reward[run].get_data()
        assert np.allclose(y, backward_moving_average(rows, 20).to_numpy())
        assert y[25] == pytest.approx(rows.loc[7:26].mean())  # step 26 averages steps 7..26
        smooth[run] = y
    # the method's line: the mean of its seeds; its band: mean -+ t(0.975, 1 df) sd / sqrt(2)
    x, y = reward["pg"].get_data()
    pair = np.stack([smooth["pg-seed1"], smooth["pg-seed2"]])
    assert np.allclose(y, pair.mean(axis=0))
    half = stats.t.ppf(0.975, 1) * pair.std(axis=0, ddof=1) / np.sqrt(2)
    band = _bands(by_title["reward (critic/score/mean)"])["band:pg"].get_paths()[0].vertices[:, 1]
    assert band.max() == pytest.approx((pair.mean(axis=0) + half).max())
    assert band.min() == pytest.approx((pair.mean(axis=0) - half).min())
    # sc's mean stops where its running seed stops (step 15): it never averages a changing set of seeds
    assert _lines(by_title["SC trainer head mass P"])["sc"].get_data()[0][-1] == 15


def test_train_curves_drop_panels_no_arm_logs(tmp_path):
    sweep = load_sweep(build_sweep(tmp_path / "s", methods=("pg",), total_steps=5, eval_every=5, sets={"a": 2}, k=1))
    titles = [ax.get_title() for ax in plots.train_curves(sweep).axes if ax.get_visible()]
    assert "TIS clip fraction" not in titles and "reward (critic/score/mean)" in titles and len(titles) == 9


def test_per_problem_matrix(sweep):
    from analysis.tables import per_problem_table

    fig = plots.per_problem(sweep, "final")
    means, runs = (ax.get_images()[0].get_array() for ax in fig.axes[:2])
    assert means.shape == (3, 9) and runs.shape == (6, 9)
    assert np.nanmin(runs) >= 0 and np.nanmax(runs) <= 1
    labels = [t.get_text() for t in fig.axes[1].get_yticklabels()]
    assert labels[0] == "pg-seed1 @ step 30" and labels[-1] == "sc-seed2 @ step 10 [running]"
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == [
        "pg: mean of 2 seeds", "tis: mean of 2 seeds", "sc: mean of 2 seeds (1 running)"]
    # a method's row is the mean of its seeds' rows (columns in the figure's order, the same for both blocks)
    table = per_problem_table(sweep, "final")
    assert np.allclose(np.sort(means[0]), np.sort(table.loc[["pg-seed1", "pg-seed2"]].mean(axis=0).to_numpy()))
    assert np.allclose(means[2], runs[4:6].mean(axis=0)) and np.allclose(means[0], runs[0:2].mean(axis=0))
    # run rows: each run's scores at its last evaluation; columns: each set's problems, hardest (lowest mean
    # over the runs) first, ties in problem order
    run_names = [label.split(" @ ")[0] for label in labels]
    final = np.stack([sweep.scores(run)[1][-1] for run in run_names])
    order = np.concatenate([sl.start + np.argsort(final[:, sl].mean(axis=0), kind="stable") for sl in sweep.set_slices])
    assert np.array_equal(np.asarray(runs), final[:, order])


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
    assert _legend(fig) == ["pg-seed1", "sc-seed1", "pg-seed1: test-retest ±1.96 sd"]  # one seed: runs


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
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert _legend(fig) == [f"{m}-seed1" for m in ("pg", "tis", "sc", "sc_tis")]  # one seed: the runs
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
    by_title = {" ".join(ax.get_title().split()): ax for ax in fig.axes if ax.get_visible()}  # titles wrap
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


def test_per_problem_ids_are_readable(sweep, twin_sweep):
    for fig, ax in ((plots.per_problem(sweep, "final"), 1), (plots.per_problem(twin_sweep, "final"), 0)):
        ticks = fig.axes[ax].get_xticklabels()
        assert len(ticks) == len(fig.axes[ax].get_images()[0].get_array()[0])
        assert all(t.get_fontsize() >= 9 and t.get_visible() for t in ticks)


# -- several seeds: notes counted over seeds, wrapped to the panel, train bands over seeds (issue 27) -------
def test_wrap_breaks_at_the_separators_and_keeps_line_breaks():
    from analysis.panel_text import chars_per_line, wrap

    assert chars_per_line(4.3, 10) == 56  # 4.3 in = 309.6 pt; 0.55 em at 10 pt = 5.5 pt a character
    note = ("coincide (same seed, from the start): pg = sc in all 16 seeds, median through step 40; "
            "tis = sc_tis in 14 of 16 seeds, median through step 20; +1 more")
    assert wrap(note, 4.3, 10).split("\n") == [
        "coincide (same seed, from the start):",
        "pg = sc in all 16 seeds, median through step 40;",
        "tis = sc_tis in 14 of 16 seeds, median through step 20;",
        "+1 more"]
    short = "coincide: pg = sc, steps 0-10; tis = sc_tis, steps 0-15"  # 55 characters: fits, unchanged
    assert wrap(short, 4.3, 10) == short and wrap("", 4.3, 10) == ""
    assert wrap("title line\n" + "x " * 40, 1.0, 10).split("\n")[0] == "title line"  # own breaks kept
    long = wrap("a-b " * 30, 2.0, 10).split("\n")  # no separator: broken at spaces, never at hyphens
    assert all(len(line) <= chars_per_line(2.0, 10) for line in long) and all("a-b" in line for line in long)


def test_seed_coincidences_count_seeds_coinciding_from_the_start():
    import pandas as pd

    from analysis.coincidence import SeedCoincidence, seed_coincidence_note, seed_coincidences

    steps = list(range(1, 9))
    base = pd.Series(np.linspace(0.0, 0.7, 8), index=steps)
    other = base + 0.3
    curves = {
        "pg": {s: base for s in (1, 2, 3, 4)},
        # seed 1-3: equal through steps 2, 4 and 6; seed 4 equal only over steps 5-6 (a crossing, not counted)
        "sc": {1: base.where(base.index <= 2, other), 2: base.where(base.index <= 4, other),
               3: base.where(base.index <= 6, other), 4: other.where(~base.index.isin([5, 6]), base)},
        "tis": {1: other, 2: other},  # two seeds only, never equal to pg
    }
    found = seed_coincidences(curves, tolerance=1e-9)
    assert found == [SeedCoincidence("pg", "sc", 3, 4, 4.0)]
    assert seed_coincidence_note(found) == ("coincide (same seed, from the start): pg = sc in 3 of 4 seeds, "
                                            "median through step 4")
    every = seed_coincidences({"a": {1: base, 2: base}, "b": {1: base, 2: base}, "c": {1: base}}, 1e-9)
    assert [(c.a, c.b, c.seeds, c.of, c.through) for c in every] == [("a", "b", 2, 2, 8.0), ("a", "c", 1, 1, 8.0),
                                                                     ("b", "c", 1, 1, 8.0)]
    assert seed_coincidence_note(every, limit=2).endswith("a = c in 1 of 1 seed, median through step 8; +1 more")
    assert seed_coincidence_note([]) == ""


def test_seed_band_is_the_t_interval_over_the_seeds_at_their_common_steps():
    import pandas as pd
    from scipy import stats

    from analysis.seed_curves import seed_band

    curves = {"r1": pd.Series([1.0, 2.0, 3.0], index=[1, 2, 3]),
              "r2": pd.Series([2.0, 2.0, 5.0, 6.0], index=[1, 2, 3, 4]),  # step 4: only this seed
              "r3": pd.Series([0.0, np.nan, 4.0], index=[1, 2, 3])}  # step 2: null in this seed
    band = seed_band(curves)
    assert band["step"].tolist() == [1, 3] and band["n_seeds"].tolist() == [3, 3]
    t = stats.t.ppf(0.975, 2)
    for row, values in zip(band.itertuples(), ([1.0, 2.0, 0.0], [3.0, 5.0, 4.0]), strict=True):
        half = t * np.std(values, ddof=1) / np.sqrt(3)
        assert row.mean == pytest.approx(np.mean(values))
        assert row.ci_low == pytest.approx(np.mean(values) - half) and row.ci_high == pytest.approx(np.mean(values) + half)
    with pytest.raises(ValueError, match=">= 2 seeds"):
        seed_band({"r1": curves["r1"]})


def test_one_seed_figures_keep_a_line_and_legend_entry_per_run(twin_sweep):
    fig = plots.train_curves(twin_sweep)
    assert _legend(fig) == [f"{m}-seed1" for m in ("pg", "tis", "sc", "sc_tis")]
    assert not [c for ax in fig.axes for c in ax.collections]  # no bands with one seed
    assert len(plots.per_problem(twin_sweep, "final").axes) == 2  # the matrix and its colour bar, no method block
