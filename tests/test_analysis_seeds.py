"""analysis.seeds: the two-level estimators against scipy's t-tests and a hand computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from analysis.seeds import diff_two_level, mean_two_level, residual_mean_square


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

    def ms(y):  # two-way residual mean square, written out with loops
        s, n = y.shape
        total = 0.0
        for i in range(s):
            for j in range(n):
                total += (y[i, j] - y[i].mean() - y[:, j].mean() + y.mean()) ** 2
        return total / ((s - 1) * (n - 1))

    assert residual_mean_square(ya) == pytest.approx(ms(ya))
    va, vb = ya.mean(1).var(ddof=1) / 3, yb.mean(1).var(ddof=1) / 4
    d = ya.mean(0) - yb.mean(0)
    v_prob = max(0.0, d.var(ddof=1) - ms(ya) / 3 - ms(yb) / 4) / 7
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
    y = rng.integers(0, 5, size=(3, 9)) / 4
    slices = [slice(0, 5), slice(5, 9)]
    m = mean_two_level(y, slices)
    for s, sl in enumerate(slices):
        ys = y[:, sl]
        n = ys.shape[1]
        v_seed = ys.mean(1).var(ddof=1) / 3
        v_prob = max(0.0, ys.mean(0).var(ddof=1) - residual_mean_square(ys) / 3) / n
        assert m["estimate"][s] == pytest.approx(ys.mean())
        assert m["se"][s] == pytest.approx(math.sqrt(v_seed + v_prob))
    run_avg = (y[:, :5].mean(1) + y[:, 5:].mean(1)) / 2
    assert m["estimate"][2] == pytest.approx(run_avg.mean())
    assert m["se_seed"][2] == pytest.approx(math.sqrt(run_avg.var(ddof=1) / 3))
    assert m["se_problem"][2] ** 2 == pytest.approx((m["se_problem"][0] ** 2 + m["se_problem"][1] ** 2) / 4)


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

    rng = np.random.default_rng(5)
    ya, yb = rng.integers(0, 9, size=(2, 3, 8)) / 8
    t = diff_paired_two_level(ya, yb, [slice(0, 5), slice(5, 8)])
    d = ya - yb
    for j, sl in enumerate([slice(0, 5), slice(5, 8)]):
        ds = d[:, sl]
        v_seed = ds.mean(1).var(ddof=1) / 3
        v_prob = max(0.0, ds.mean(0).var(ddof=1) - residual_mean_square(ds) / 3) / ds.shape[1]
        assert t["se"][j] == pytest.approx(math.sqrt(v_seed + v_prob))
        assert t["df"][j] == 2  # the seed pairs' df (S - 1), whatever the problem part
        sat = diff_paired_two_level(ya, yb, [slice(0, 5), slice(5, 8)], df_rule="satterthwaite")
        assert sat["df"][j] == pytest.approx((v_seed + v_prob) ** 2 / (v_seed**2 / 2 + v_prob**2 / (ds.shape[1] - 1)))
        assert sat["se"][j] == pytest.approx(t["se"][j]) and sat["p_value"][j] <= t["p_value"][j]
    run_d = (d[:, :5].mean(1) + d[:, 5:].mean(1)) / 2  # avg: seed part on the runs' avg differences
    assert t["se_seed"][2] == pytest.approx(math.sqrt(run_d.var(ddof=1) / 3))
    assert t["estimate"][2] == pytest.approx(run_d.mean())
    with pytest.raises(ValueError, match="seed pairs need"):
        diff_paired_two_level(ya, yb[:2], [slice(0, 8)])

