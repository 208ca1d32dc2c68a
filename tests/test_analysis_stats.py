"""Estimators of analysis.stats against hand computations and brute-force enumeration."""

from __future__ import annotations

import math
from itertools import combinations, product

import numpy as np
import pandas as pd
import pytest

from analysis.stats import (
    Resampler,
    backward_moving_average,
    combine_se,
    mean_se,
    pass_at_k,
    percentile_interval,
    set_summaries,
    sign_flip_pvalue,
    stratified_weights,
)


def test_mean_se_exact():
    x = np.array([0.25, 0.5, 0.5, 0.75])
    mean, se = mean_se(x)
    assert mean == 0.5
    # std(ddof=1) = sqrt((0.25^2 + 0 + 0 + 0.25^2) / 3) = sqrt(1/24); se = that / sqrt(4)
    assert se == pytest.approx(math.sqrt(1 / 24) / 2, abs=1e-15)
    assert np.isnan(mean_se(np.array([0.3]))[1])


def test_combine_se_is_se_of_mean_of_sets():
    assert combine_se([np.array(0.3), np.array(0.4)]) == pytest.approx(0.25)  # sqrt(0.09 + 0.16) / 2


def test_resampler_counts_are_reproducible_multinomial_draws():
    r = Resampler(n_boot=500, seed=0)
    w = r.counts(7, stream=0)
    assert w.shape == (500, 7) and np.all(w.sum(axis=1) == 7) and np.all(w >= 0)
    assert np.array_equal(w, Resampler(n_boot=500, seed=0).counts(7, stream=0))
    assert not np.array_equal(w, r.counts(7, stream=1))  # another set of equal size: independent
    assert not np.array_equal(w, Resampler(n_boot=500, seed=1).counts(7, stream=0))
    # the documented draw: indices from default_rng([seed, n, stream])
    idx = np.random.default_rng([0, 7, 0]).integers(0, 7, size=(500, 7))
    x = np.arange(7.0) ** 2
    assert np.allclose(r.means(x), x[idx].mean(axis=1))


def test_bootstrap_interval_contains_estimate_and_is_fixed():
    rng = np.random.default_rng(123)
    x = rng.integers(0, 9, size=40) / 8
    r = Resampler()
    lo, hi = percentile_interval(r.means(x))
    assert lo < x.mean() < hi
    lo2, hi2 = percentile_interval(Resampler().means(x))
    assert (lo, hi) == (lo2, hi2)
    # roughly mean +- 1.96 se for a sample this size
    se = x.std(ddof=1) / math.sqrt(x.size)
    assert hi - lo == pytest.approx(2 * 1.96 * se, rel=0.15)


def test_constant_scores_have_degenerate_interval():
    lo, hi = percentile_interval(Resampler().means(np.full(5, 0.25)))
    assert lo == pytest.approx(0.25) and hi == pytest.approx(0.25)


def test_set_summaries_avg_is_stratified_mean_of_set_resamples():
    r = Resampler(n_boot=2000)
    x = np.array([0.0, 0.5, 1.0, 0.25, 0.75, 1.0, 0.0])
    slices = [slice(0, 3), slice(3, 7)]
    s = set_summaries(x, slices, r)
    assert list(s["mean"]) == pytest.approx([0.5, 0.5, 0.5])
    # se by hand: set 0 has sd 0.5 over 3 problems; set 1 squared deviations 0.625 over 3 df, 4 problems
    se0, se1 = 0.5 / math.sqrt(3), math.sqrt(0.625 / 3 / 4)
    assert list(s["se"]) == pytest.approx([se0, se1, math.sqrt(se0**2 + se1**2) / 2])
    # the documented draw, by index: set s resamples its problems with default_rng([seed, n_s, s])
    means = []
    for stream, part in enumerate((x[0:3], x[3:7])):
        idx = np.random.default_rng([0, part.size, stream]).integers(0, part.size, size=(2000, part.size))
        means.append(part[idx].mean(axis=1))
    expected = [np.percentile(b, [2.5, 97.5]) for b in (*means, (means[0] + means[1]) / 2)]
    assert np.allclose(np.stack([s["ci_low"], s["ci_high"]], axis=1), expected, rtol=0, atol=1e-12)
    # vectorised over a leading axis: a stack of two score vectors gives the same as one at a time
    stack = set_summaries(np.stack([x, x[::-1]]), slices, r)
    assert np.allclose(stack["ci_low"][:, 0], s["ci_low"])
    assert np.allclose(stack["ci_low"][:, 1], set_summaries(x[::-1], slices, r)["ci_low"])


def _brute_force_sign_flip(d, w):
    t_obs = abs(np.dot(w, d))
    ts = [abs(np.dot(w, np.array(signs) * d)) for signs in product((1, -1), repeat=len(d))]
    return np.mean([t >= t_obs - 1e-12 for t in ts])


@pytest.mark.parametrize("d", [
    [0.25, 0.25, 0.25, 0.25],
    [0.5, -0.25, 0.125, 0.0, 0.75],
    [0.1, 0.2, -0.3, 0.4, -0.5, 0.6, 0.7],
    [0.0, 0.0],
])
def test_sign_flip_exact_matches_enumeration(d):
    d = np.array(d)
    w = np.full(d.size, 1 / d.size)
    assert sign_flip_pvalue(d) == pytest.approx(_brute_force_sign_flip(d, w))


def test_sign_flip_known_values_and_weights():
    assert sign_flip_pvalue(np.full(4, -0.25)) == 0.125  # only the two all-equal sign patterns reach |T|
    w = stratified_weights([4, 3])
    assert np.allclose(w, [1 / 8] * 4 + [1 / 6] * 3)
    d = np.array([-0.25] * 4 + [-0.25, 0, 0])
    assert sign_flip_pvalue(d, w) == pytest.approx(2 / 32)
    assert sign_flip_pvalue(d, w) == pytest.approx(_brute_force_sign_flip(d, w))


def test_sign_flip_random_has_plus_one_correction_and_fixed_seed():
    d = np.full(40, 0.5)  # 40 non-zero differences: random flips; none reaches the observed |T|
    assert sign_flip_pvalue(d, n_flip=10_000) == pytest.approx(1 / 10_001)
    rng = np.random.default_rng(5)
    d = rng.normal(0.05, 1, size=30)
    p = sign_flip_pvalue(d)
    assert p == sign_flip_pvalue(d)  # fixed seed
    assert 0 < p <= 1
    # close to the exact answer (Monte Carlo error of 10,000 flips is about 0.005)
    small = d[:14]
    exact = sign_flip_pvalue(small)
    assert sign_flip_pvalue(small, exact_max=0) == pytest.approx(exact, abs=0.02)


def _brute_force_pass_at_k(n, c, k):
    samples = [1] * c + [0] * (n - c)
    subsets = list(combinations(range(n), k))
    return sum(max(samples[i] for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_matches_enumeration_of_subsets():
    for n in range(1, 7):
        for k in range(1, n + 1):
            c = np.arange(n + 1)
            expected = [_brute_force_pass_at_k(n, int(ci), k) for ci in c]
            assert np.allclose(pass_at_k(c, n, k), expected), (n, k)


def test_pass_at_1_is_mean_correctness_and_rejects_large_k():
    c = np.array([0, 3, 8, 5])
    assert np.allclose(pass_at_k(c, 8, 1), c / 8)
    with pytest.raises(ValueError, match="k=9"):
        pass_at_k(c, 8, 9)


def test_backward_moving_average_definition():
    steps = np.arange(1, 51)
    s = pd.Series(steps.astype(float), index=steps)
    ma = backward_moving_average(s, window=20)
    # value at step s = mean of steps max(1, s-19)..s = (max(1, s-19) + s) / 2 for values equal to steps
    assert np.allclose(ma.to_numpy(), [(max(1, t - 19) + t) / 2 for t in steps])
    assert ma[1] == 1.0 and ma[20] == 10.5 and ma[21] == 11.5


def test_backward_moving_average_skips_nulls_and_counts_steps_not_rows():
    s = pd.Series([1.0, np.nan, 3.0, 5.0], index=[1, 2, 3, 4])
    ma = backward_moving_average(s, window=2)
    assert np.allclose(ma.to_numpy(), [1.0, 1.0, 3.0, 4.0])
    # a missing row (step 3 absent) shortens the window instead of reaching further back
    s = pd.Series([2.0, 4.0, 10.0], index=[1, 2, 4])
    ma = backward_moving_average(s, window=2)
    assert list(ma.index) == [1, 2, 4]
    assert np.allclose(ma.to_numpy(), [2.0, 3.0, 10.0])
    all_null = backward_moving_average(pd.Series([np.nan, np.nan], index=[1, 2]))
    assert all_null.isna().all()
