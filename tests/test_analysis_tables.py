"""Tables of analysis.tables on sweeps whose answers are known by construction."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis.load import load_sweep
from analysis.stats import Resampler, pass_at_k, sign_flip_pvalue
from analysis.synthetic import KNOWN_COUNTS, KNOWN_K, build_sweep, write_known_sweep
from analysis.tables import (
    COMPARISON_COLUMNS,
    PAIRED_COLUMNS,
    checkpoint_steps,
    comparison_table,
    eval_curves_table,
    paired_table,
    passk_table,
    per_problem_table,
    seed_aggregate_table,
)


@pytest.fixture(scope="module")
def known(tmp_path_factory):
    return load_sweep(write_known_sweep(tmp_path_factory.mktemp("known")))


@pytest.fixture(scope="module")
def resampler():
    return Resampler(n_boot=2000)


def _x(method, step, ds):
    return np.array(KNOWN_COUNTS[method][step][ds]) / KNOWN_K


def _percentile_interval(x, stream, n_boot=2000):
    """The 95% percentile interval of x's mean from the documented draw: default_rng([0, n, stream]) indices."""
    idx = np.random.default_rng([0, x.size, stream]).integers(0, x.size, size=(n_boot, x.size))
    return tuple(np.percentile(x[idx].mean(axis=1), [2.5, 97.5]))


def _row(table, **where):
    mask = np.ones(len(table), dtype=bool)
    for key, value in where.items():
        mask &= table[key] == value
    assert mask.sum() == 1, where
    return table[mask].iloc[0]


def test_loaded_counts_match_construction(known):
    assert known.k == 4 and known.sets == ("alpha", "beta")
    assert known.problems["alpha"] == ("alpha-00", "alpha-01", "alpha-02", "alpha-03")
    assert known.correct.loc[("sc-seed1", 10)].tolist() == [2, 2, 3, 4, 1, 2, 4]


def test_final_and_best_checkpoints(known):
    cps = checkpoint_steps(known).set_index(["run", "checkpoint"])["step"]
    assert cps[("pg-seed1", "final")] == 20 and cps[("sc-seed1", "final")] == 20
    assert cps[("pg-seed1", "best")] == 10  # avg ties at 10 and 20: the earlier step
    assert cps[("sc-seed1", "best")] == 10  # 0.6354 at 10 beats 0.625 at 20


def test_comparison_exact_mean_and_se(known, resampler):
    comp = comparison_table(known, resampler=resampler)
    assert list(comp.columns) == COMPARISON_COLUMNS
    assert len(comp) == 2 * 3 * 2  # runs x (2 sets + avg) x checkpoints
    a = _row(comp, run="pg-seed1", data_source="alpha", checkpoint="final")
    assert (a["step"], a["k"], a["n_problems"]) == (20, 4, 4)
    assert a["mean_at_k"] == 0.5  # (1 + 2 + 2 + 3) / 16
    assert a["se"] == pytest.approx(math.sqrt(1 / 24) / 2)
    b = _row(comp, run="pg-seed1", data_source="beta", checkpoint="final")
    xb = _x("pg", 20, "beta")
    assert b["mean_at_k"] == pytest.approx(5 / 12)
    assert b["se"] == pytest.approx(np.std(xb, ddof=1) / math.sqrt(3))
    avg = _row(comp, run="pg-seed1", data_source="avg", checkpoint="final")
    assert avg["n_problems"] == 7
    assert avg["mean_at_k"] == pytest.approx((0.5 + 5 / 12) / 2)
    assert avg["se"] == pytest.approx(math.sqrt(a["se"] ** 2 + b["se"] ** 2) / 2)
    best = _row(comp, run="sc-seed1", data_source="avg", checkpoint="best")
    assert best["step"] == 10 and best["mean_at_k"] == pytest.approx((11 / 16 + 7 / 12) / 2)
    assert (a["ci_low"], a["ci_high"]) == pytest.approx(_percentile_interval(_x("pg", 20, "alpha"), stream=0))
    assert (b["ci_low"], b["ci_high"]) == pytest.approx(_percentile_interval(xb, stream=1))
    # every interval contains its estimate
    assert (comp["ci_low"] <= comp["mean_at_k"]).all() and (comp["mean_at_k"] <= comp["ci_high"]).all()


def test_comparison_intervals_reproducible_with_fixed_seed(tmp_path):
    sweep = load_sweep(build_sweep(tmp_path / "s", methods=("pg", "sc"), total_steps=20, eval_every=20,
                                   sets={"a": 30, "b": 25}, k=4))
    one = comparison_table(sweep, resampler=Resampler(seed=0))
    two = comparison_table(sweep, resampler=Resampler(seed=0))
    pd.testing.assert_frame_equal(one, two)
    assert (one["ci_low"] < one["mean_at_k"]).all() and (one["mean_at_k"] < one["ci_high"]).all()
    other = comparison_table(sweep, resampler=Resampler(seed=7))
    assert not np.allclose(one["ci_low"], other["ci_low"])
    # another seed moves the bounds only by Monte Carlo error
    assert np.allclose(one["ci_low"], other["ci_low"], atol=0.01)


def test_paired_exact_differences_and_pvalues(known, resampler):
    paired = paired_table(known, resampler=resampler)
    assert list(paired.columns) == PAIRED_COLUMNS
    assert set(zip(paired["method_a"], paired["method_b"], strict=True)) == {("pg", "sc")}
    a = _row(paired, data_source="alpha", checkpoint="final")
    # d = pg - sc at step 20: every alpha problem is 0.25 lower for pg
    assert a["diff"] == -0.25 and a["ci_low"] == pytest.approx(-0.25) and a["ci_high"] == pytest.approx(-0.25)
    assert a["p_value"] == 0.125 and a["n_problems"] == 4  # 2 of 16 sign patterns
    b = _row(paired, data_source="beta", checkpoint="final")
    assert b["diff"] == pytest.approx(-0.25 / 3) and b["p_value"] == 1.0  # one non-zero difference
    avg = _row(paired, data_source="avg", checkpoint="final")
    assert avg["diff"] == pytest.approx((-0.25 - 0.25 / 3) / 2)
    assert avg["p_value"] == pytest.approx(2 / 32) and avg["n_problems"] == 7
    # best: pg at step 10 vs sc at step 10
    d = np.concatenate([_x("pg", 10, ds) - _x("sc", 10, ds) for ds in ("alpha", "beta")])
    best = _row(paired, data_source="alpha", checkpoint="best")
    assert best["diff"] == pytest.approx(d[:4].mean())
    assert best["p_value"] == pytest.approx(sign_flip_pvalue(d[:4]))
    assert (best["ci_low"], best["ci_high"]) == pytest.approx(_percentile_interval(d[:4], stream=0))


def test_passk_exact(known):
    pk = passk_table(known, ks=(1, 2, 4, 8))
    assert sorted(pk["k"].unique()) == [1, 2, 4]  # 8 > 4 samples is skipped
    c = np.array(KNOWN_COUNTS["sc"][20]["beta"])
    row = _row(pk, run="sc-seed1", data_source="beta", checkpoint="final", k=2)
    assert row["pass_at_k"] == pytest.approx(pass_at_k(c, 4, 2).mean())
    # c = [1, 1, 4]: pass@2 = 1 - C(3,2)/C(4,2) = 1/2 for the first two, 1 for the last
    assert row["pass_at_k"] == pytest.approx((0.5 + 0.5 + 1) / 3)
    comp = comparison_table(known, resampler=Resampler(n_boot=100))
    m1 = pk[pk["k"] == 1].set_index(["run", "data_source", "checkpoint"])["pass_at_k"]
    m = comp.set_index(["run", "data_source", "checkpoint"])["mean_at_k"]
    assert np.allclose(m1.sort_index(), m.sort_index())  # pass@1 = mean@k


def test_seed_aggregates_and_per_method_curves(tmp_path):
    sweep = load_sweep(build_sweep(tmp_path / "s", methods=("pg", "sc"), seeds=(1, 2), total_steps=20,
                                   eval_every=10, sets={"a": 5, "b": 4}, k=2, running={"sc-seed2": 10}))
    comp = comparison_table(sweep, resampler=Resampler(n_boot=200))
    agg = seed_aggregate_table(sweep)
    assert set(agg["run"]) == {"pg (mean of 2 seeds)", "sc (mean of 2 seeds)"}
    cps = checkpoint_steps(sweep).set_index(["run", "checkpoint"])["step"]
    for (method, ds, cp), g in comp.groupby(["method", "data_source", "checkpoint"]):
        r = _row(agg, method=method, data_source=ds, checkpoint=cp)
        values = g["mean_at_k"].to_numpy()
        assert r["mean_at_k"] == pytest.approx(values.mean())
        assert r["n_seeds"] == 2 and r["interval"] == "two-level t (seeds and problems)" and pd.isna(r["seed"])
        if ds == "a":  # the two-level se by hand: seed part + truncated problem part (analysis.seeds)
            y = np.stack([sweep.correct.loc[(run, cps[(run, cp)])]["a"].to_numpy() / 2 for run in g["run"]])
            resid = y - y.mean(1, keepdims=True) - y.mean(0, keepdims=True) + y.mean()
            ms = (resid**2).sum() / (1 * 4)
            v_seed = y.mean(1).var(ddof=1) / 2
            v_prob = max(0.0, y.mean(0).var(ddof=1) - ms / 2) / 5
            assert r["se"] == pytest.approx(math.sqrt(v_seed + v_prob))
            df = (v_seed + v_prob) ** 2 / (v_seed**2 / 1 + v_prob**2 / 4)
            assert r["ci_high"] - r["mean_at_k"] == pytest.approx(stats.t.ppf(0.975, df) * r["se"])
    sc_final = _row(agg, method="sc", data_source="avg", checkpoint="final")
    assert pd.isna(sc_final["step"])  # seeds at different final steps (20 and 10)
    curves = eval_curves_table(sweep, Resampler(n_boot=200), by="method")
    sc = curves[(curves["curve"] == "sc") & (curves["data_source"] == "a")]
    assert sc["step"].tolist() == [0, 10]  # the steps both seeds evaluated
    x = np.mean([sweep.correct.loc[(r, 10)]["a"].to_numpy() / 2 for r in ("sc-seed1", "sc-seed2")], axis=0)
    assert sc["mean_at_k"].iloc[-1] == pytest.approx(x.mean())
    assert (sc["n_seeds"] == 2).all()


def test_explicit_checkpoint_step_and_per_problem(known):
    cps = checkpoint_steps(known, [10])
    assert set(cps["checkpoint"]) == {"step_10"} and set(cps["step"]) == {10}
    from analysis.load import SweepError
    with pytest.raises(SweepError, match="no evaluation at that step"):
        checkpoint_steps(known, [15])
    pp = per_problem_table(known, "final")
    assert pp.loc["sc-seed1", ("alpha", "alpha-01")] == 0.75
    assert pp.shape == (2, 7)


def test_retest_table_from_repeated_evaluations(tmp_path):
    from analysis.synthetic import counts_to_acc, write_run
    from analysis.tables import RETEST_COLUMNS, retest_band, retest_table

    k = 4
    main = {"a": [0, 2, 4], "b": [1, 3]}
    reps = [{"a": [1, 2, 4], "b": [1, 1]}, {"a": [0, 3, 4], "b": [2, 3]}]
    acc = lambda c: {ds: counts_to_acc(v, k) for ds, v in c.items()}  # noqa: E731
    write_run(tmp_path / "s" / "pg-seed1", method="pg", seed=1, evals={0: acc(main), 10: acc(main)},
              total_steps=10, repeat_evals={10: [acc(r) for r in reps]})
    sweep = load_sweep(tmp_path / "s")
    assert sweep.repeats == 3
    assert sweep.correct.loc[("pg-seed1", 10)].tolist() == [0, 2, 4, 1, 3]  # statistics read repeat 0
    rt = retest_table(sweep)
    assert list(rt.columns) == RETEST_COLUMNS and set(rt["step"]) == {10}  # step 0 has no repeats
    a = _row(rt, data_source="a")
    evals = [np.mean(c["a"]) / k for c in (main, *reps)]  # mean@k of each evaluation: 0.5, 7/12, 7/12
    assert a["n_repeats"] == 3 and a["mean_at_k"] == pytest.approx(np.mean(evals))
    assert a["sd"] == pytest.approx(np.std(evals, ddof=1))
    xbar = np.array([1, 7, 12]) / 3 / k  # per-problem means over the three evaluations
    assert a["predicted_sd"] == pytest.approx(math.sqrt((xbar * (1 - xbar) / (k - 1)).sum()) / 3)
    avg = _row(rt, data_source="avg")
    b = _row(rt, data_source="b")
    assert avg["predicted_sd"] == pytest.approx(math.sqrt(a["predicted_sd"] ** 2 + b["predicted_sd"] ** 2) / 2)
    band = retest_band(rt).set_index(["run", "data_source"])
    assert band.at[("pg-seed1", "a"), "sd"] == pytest.approx(a["sd"]) and band.at[("pg-seed1", "a"), "n_repeats"] == 3


# -- the late-window endpoint (--checkpoint last_quarter) ----------------------------------------------------
WINDOW_COUNTS = {  # correct samples out of 4 per problem; evaluations at 0, 10, 15, 20 -> the window is {15, 20}
    "pg": {0: [0, 1, 2], 10: [4, 4, 4], 15: [1, 2, 3], 20: [3, 2, 1]},
    "sc": {0: [0, 1, 2], 10: [0, 0, 0], 15: [4, 4, 0], 20: [2, 4, 0]},
}


@pytest.fixture(scope="module")
def windowed(tmp_path_factory):
    from analysis.synthetic import counts_to_acc, write_run

    root = tmp_path_factory.mktemp("windowed")
    for method, evals in WINDOW_COUNTS.items():
        acc = {step: {"alpha": counts_to_acc(c, 4)} for step, c in evals.items()}
        write_run(root / f"{method}-seed1", method=method, seed=1, evals=acc, total_steps=20)
    return load_sweep(root)


def test_last_quarter_averages_the_window_per_problem(windowed):
    from analysis.tables import LAST_QUARTER, window_steps

    cps = checkpoint_steps(windowed, [LAST_QUARTER])
    assert set(cps["checkpoint"]) == {LAST_QUARTER} and set(cps["step"]) == {20}
    assert window_steps(windowed, "pg-seed1", LAST_QUARTER, 20) == [15, 20]  # 10 < 0.75 * 20 is left out
    table = per_problem_table(windowed, LAST_QUARTER)
    for method, evals in WINDOW_COUNTS.items():
        expected = (np.array(evals[15]) + np.array(evals[20])) / 2 / 4
        assert np.allclose(table.loc[f"{method}-seed1"].to_numpy(), expected)
    comp = comparison_table(windowed, [LAST_QUARTER], resampler=Resampler(n_boot=100))
    row = _row(comp, run="sc-seed1", data_source="alpha", checkpoint=LAST_QUARTER)
    assert row["mean_at_k"] == pytest.approx(np.mean((np.array([4, 4, 0]) + np.array([2, 4, 0])) / 8))
    final = _row(comparison_table(windowed, ["final"], resampler=Resampler(n_boot=100)),
                 run="sc-seed1", data_source="alpha", checkpoint="final")
    assert final["mean_at_k"] != pytest.approx(row["mean_at_k"])  # the window is not the last step alone


def test_last_quarter_pass_at_k_is_the_window_mean(windowed):
    from analysis.tables import LAST_QUARTER

    pk = passk_table(windowed, [LAST_QUARTER], ks=(2,))
    row = _row(pk, run="pg-seed1", data_source="alpha", checkpoint=LAST_QUARTER, k=2)
    per_step = [pass_at_k(np.array(WINDOW_COUNTS["pg"][s]), 4, 2).mean() for s in (15, 20)]
    assert row["pass_at_k"] == pytest.approx(np.mean(per_step))


def test_last_quarter_is_a_checkpoint_the_command_line_takes():
    from analysis.report import parse_checkpoints

    assert parse_checkpoints("final,last_quarter") == ["final", "last_quarter"]
    with pytest.raises(ValueError, match="last_quarter"):
        parse_checkpoints("late")
