"""analysis.seeds: the two-level estimators against scipy's t-tests and a hand computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from analysis.seeds import diff_two_level, mean_two_level, residual_mean_square


def _ms(y):
    """Two-way residual mean square, written out with loops (the reference for residual_mean_square)."""
    s, n = y.shape
    total = 0.0
    for i in range(s):
        for j in range(n):
            total += (y[i, j] - y[i].mean() - y[:, j].mean() + y.mean()) ** 2
    return total / ((s - 1) * (n - 1))


def _t_interval(estimate, v, df, level=0.95):
    """(ci_low, ci_high, two-sided p) of a t statistic with variance ``v`` on ``df`` degrees of freedom."""
    half = stats.t.ppf((1 + level) / 2, df) * math.sqrt(v)
    return estimate - half, estimate + half, 2 * stats.t.sf(abs(estimate) / math.sqrt(v), df)


def _additive(rng, seeds, n, shift=0.0):
    """Y[s, j] = b_j + u_s + shift: no residual and no arm x problem interaction (V_prob = 0)."""
    b = rng.uniform(0.2, 0.8, size=n)
    return b[None, :] + rng.normal(0, 0.05, size=(seeds, 1)) + shift, b


def test_without_problem_part_it_is_students_or_welchs_t_test():
    rng = np.random.default_rng(0)
    b = rng.uniform(0.2, 0.8, size=12)
    for sa, sb, equal_var in ((3, 3, True), (5, 5, True), (3, 5, False)):
        ya = b + rng.normal(0, 0.05, size=(sa, 1))
        yb = b + rng.normal(0, 0.08, size=(sb, 1)) + 0.07
        t = diff_two_level(ya, yb, [slice(0, 12)])
        ref = stats.ttest_ind(ya.mean(1), yb.mean(1), equal_var=equal_var)
        ci = ref.confidence_interval(0.95)
        assert t["se_problem"][0] == 0.0
        assert t["estimate"][0] == pytest.approx(ya.mean() - yb.mean())
        assert t["p_value"][0] == pytest.approx(ref.pvalue, rel=1e-9)
        assert (t["ci_low"][0], t["ci_high"][0]) == pytest.approx((ci.low, ci.high), rel=1e-9)
        assert t["df"][0] == pytest.approx(ref.df, rel=1e-9)
        assert np.allclose([t[f][1] for f in ("estimate", "se", "p_value")],
                           [t[f][0] for f in ("estimate", "se", "p_value")])  # one set: avg = that set


def test_two_level_difference_by_hand():
    rng = np.random.default_rng(1)
    ya = rng.integers(0, 9, size=(3, 7)) / 8
    yb = rng.integers(0, 9, size=(4, 7)) / 8
    t = diff_two_level(ya, yb, [slice(0, 7)])

    assert residual_mean_square(ya) == pytest.approx(_ms(ya))
    va, vb = ya.mean(1).var(ddof=1) / 3, yb.mean(1).var(ddof=1) / 4
    d = ya.mean(0) - yb.mean(0)
    v_prob = max(0.0, d.var(ddof=1) - _ms(ya) / 3 - _ms(yb) / 4) / 7
    v = va + vb + v_prob
    df = v**2 / (va**2 / 2 + vb**2 / 3 + v_prob**2 / 6)
    assert t["se"][0] == pytest.approx(math.sqrt(v))
    assert t["se_problem"][0] == pytest.approx(math.sqrt(v_prob))
    assert t["df"][0] == pytest.approx(df)
    assert t["p_value"][0] == pytest.approx(2 * stats.t.sf(abs(d.mean()) / math.sqrt(v), df))
    assert t["ci_high"][0] - t["estimate"][0] == pytest.approx(stats.t.ppf(0.975, df) * math.sqrt(v))


def test_problem_part_catches_an_arm_by_problem_interaction():
    rng = np.random.default_rng(2)
    ya, b = _additive(rng, 4, 20)
    yb = ya + np.where(np.arange(20) % 2 == 0, 0.2, -0.2)  # same mean, opposite effects per problem
    t = diff_two_level(ya, yb, [slice(0, 20)])
    # d_j = -+0.2 exactly: var_j(d) = 0.04 * 20/19, no residual, so V_prob = var / n
    assert t["se_problem"][0] ** 2 == pytest.approx(0.04 * 20 / 19 / 20)
    assert t["estimate"][0] == pytest.approx(0.0, abs=1e-12)


def test_arm_mean_two_levels_and_avg_over_sets():
    rng = np.random.default_rng(3)
    p = np.linspace(0.1, 0.9, 9)[rng.permutation(9)]  # problems of different difficulty: V_prob > 0
    y = rng.binomial(4, p, size=(3, 9)) / 4
    slices = [slice(0, 5), slice(5, 9)]
    m = mean_two_level(y, slices)
    v_probs = []
    for s, sl in enumerate(slices):
        ys = y[:, sl]
        n = ys.shape[1]
        v_seed = ys.mean(1).var(ddof=1) / 3
        v_prob = max(0.0, ys.mean(0).var(ddof=1) - _ms(ys) / 3) / n
        v_probs.append(v_prob)
        v = v_seed + v_prob
        df = v**2 / (v_seed**2 / 2 + v_prob**2 / (n - 1))  # Satterthwaite: seeds 2 df, problems n - 1
        low, high, p = _t_interval(ys.mean(), v, df)
        got = [m[f][s] for f in ("estimate", "se", "se_seed", "se_problem", "df", "ci_low", "ci_high", "p_value")]
        assert got == pytest.approx([ys.mean(), math.sqrt(v), math.sqrt(v_seed), math.sqrt(v_prob), df, low, high, p])
    assert min(v_probs) > 0  # both parts enter, so the df are not the seeds' alone
    # avg: the seed part on the runs' avg scores, the problem part the sets' over m^2, 9 - 2 problem df
    run_avg = (y[:, :5].mean(1) + y[:, 5:].mean(1)) / 2
    v_seed, v_prob = run_avg.var(ddof=1) / 3, sum(v_probs) / 4
    v = v_seed + v_prob
    df = v**2 / (v_seed**2 / 2 + v_prob**2 / 7)
    low, high, p = _t_interval(run_avg.mean(), v, df)
    got = [m[f][2] for f in ("estimate", "se", "se_seed", "se_problem", "df", "ci_low", "ci_high", "p_value")]
    assert got == pytest.approx([run_avg.mean(), math.sqrt(v), math.sqrt(v_seed), math.sqrt(v_prob), df, low, high, p])


def test_vectorised_over_sweeps_and_refuses_one_seed():
    rng = np.random.default_rng(4)
    ya, yb = rng.random((5, 3, 10)), rng.random((5, 3, 10))
    batch = diff_two_level(ya, yb, [slice(0, 10)])
    one = diff_two_level(ya[2], yb[2], [slice(0, 10)])
    assert batch["p_value"].shape == (2, 5)
    assert batch["p_value"][:, 2] == pytest.approx(one["p_value"])
    with pytest.raises(ValueError, match="1 seed"):
        diff_two_level(ya[:, :1], yb, [slice(0, 10)])
    with pytest.raises(ValueError, match="share the problems"):
        diff_two_level(ya, yb[..., :9], [slice(0, 9)])


def test_no_variance_at_all():
    y = np.full((3, 4), 0.5)
    t = diff_two_level(y, y.copy(), [slice(0, 4)])
    assert t["p_value"][0] == 1.0 and t["se"][0] == 0.0
    t = diff_two_level(y, y + 0.25, [slice(0, 4)])
    assert t["p_value"][0] == 0.0 and t["estimate"][0] == pytest.approx(-0.25)


def test_paired_without_problem_part_is_the_paired_t_test():
    """Seed pairs, no arm x problem interaction: scipy's ttest_rel on the run scores."""
    from analysis.seeds import diff_paired_two_level

    rng = np.random.default_rng(4)
    b = rng.uniform(0.2, 0.8, size=10)
    for seeds in (2, 3, 5):
        u = rng.normal(0, 0.08, size=(seeds, 1))  # the shared seed effect
        ya = b + u + rng.normal(0, 0.02, size=(seeds, 1))
        yb = b + u + rng.normal(0, 0.02, size=(seeds, 1)) + 0.03
        t = diff_paired_two_level(ya, yb, [slice(0, 10)])
        ref = stats.ttest_rel(ya.mean(1), yb.mean(1))
        ci = ref.confidence_interval(0.95)
        assert t["se_problem"][0] == pytest.approx(0.0, abs=1e-9) and t["df"][0] == pytest.approx(seeds - 1)
        assert t["estimate"][0] == pytest.approx(ya.mean() - yb.mean())
        assert t["p_value"][0] == pytest.approx(ref.pvalue, rel=1e-9)
        assert (t["ci_low"][0], t["ci_high"][0]) == pytest.approx((ci.low, ci.high), rel=1e-9)
        unpaired = diff_two_level(ya, yb, [slice(0, 10)])
        assert t["se"][0] < unpaired["se"][0]  # the shared seed effect left the variance


def test_paired_difference_by_hand():
    from analysis.seeds import diff_paired_two_level

    rng = np.random.default_rng(8)
    pa, pb = rng.uniform(0.05, 0.95, size=(2, 8))  # an arm x problem interaction: V_prob > 0 in both sets
    ya, yb = rng.binomial(8, pa, size=(3, 8)) / 8, rng.binomial(8, pb, size=(3, 8)) / 8
    slices = [slice(0, 5), slice(5, 8)]
    t = diff_paired_two_level(ya, yb, slices)
    sat = diff_paired_two_level(ya, yb, slices, df_rule="satterthwaite")
    d = ya - yb
    for j, sl in enumerate(slices):
        ds = d[:, sl]
        n = ds.shape[1]
        v_seed = ds.mean(1).var(ddof=1) / 3
        v_prob = max(0.0, ds.mean(0).var(ddof=1) - _ms(ds) / 3) / n
        v = v_seed + v_prob
        assert v_prob > 0  # so the two df rules differ
        # the report's rule: the seed pairs' df (S - 1 = 2), whatever the problem part
        low, high, p = _t_interval(ds.mean(), v, 2)
        got = [t[f][j] for f in ("estimate", "se", "se_seed", "se_problem", "df", "ci_low", "ci_high", "p_value")]
        assert got == pytest.approx([ds.mean(), math.sqrt(v), math.sqrt(v_seed), math.sqrt(v_prob), 2, low, high, p])
        df_sat = v**2 / (v_seed**2 / 2 + v_prob**2 / (n - 1))
        low, high, p = _t_interval(ds.mean(), v, df_sat)
        assert [sat[f][j] for f in ("se", "df", "ci_low", "ci_high", "p_value")] == pytest.approx(
            [math.sqrt(v), df_sat, low, high, p])
    run_d = (d[:, :5].mean(1) + d[:, 5:].mean(1)) / 2  # avg: seed part on the runs' avg differences
    v_prob = sum(max(0.0, d[:, sl].mean(0).var(ddof=1) - _ms(d[:, sl]) / 3) / (sl.stop - sl.start)
                 for sl in slices) / 4
    v = run_d.var(ddof=1) / 3 + v_prob
    low, high, p = _t_interval(run_d.mean(), v, 2)
    assert [t[f][2] for f in ("estimate", "se", "se_seed", "df", "ci_low", "ci_high", "p_value")] == pytest.approx(
        [run_d.mean(), math.sqrt(v), math.sqrt(run_d.var(ddof=1) / 3), 2, low, high, p])
    with pytest.raises(ValueError, match="seed pairs need"):
        diff_paired_two_level(ya, yb[:2], [slice(0, 8)])
