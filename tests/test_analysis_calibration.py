"""Calibration of the report's paired comparisons, measured on null and shifted sweeps.

Sweeps of two arms (30 problems x 8 samples, solve rates Beta(0.6, 0.9), a seed effect on the
logit; :func:`analysis.synthetic.two_arm_counts`). A few are written as run folders and go through
``load_sweep`` + ``paired_table`` (the report's code path); the many sweeps of the rate estimates
go through the same function ``paired_table`` calls, :func:`analysis.seeds.diff_two_level`, on
the counts in memory, and the first test checks that both give the same numbers.

Asserted: under the null (truly equal arms) the rejection rate at nominal 5% lies in the central
99.9% binomial band around 5% for N = 2,000 sweeps (3.45%-6.65%), at 3 and 5 seeds and seed
sds of run accuracy about 0.05 and 0.07 (the method is slightly conservative, 4.4-5.1% in 20,000
sweeps, so the band is wide enough not to fail by chance and narrow enough to catch 7%); with one seed nothing is ever significant; the
problem-only test the report used before (seed-averaged scores, sign flips over problems) rejects
far above 5% (so the band has teeth); power against a true +0.10 (logit shift 0.7, seed sd 0.05)
is at least 0.55 with 5 seeds and 0.30 with 3 (measured 0.70 and 0.42 with 2,000 sweeps;
``docs/statistics.md``); the aggregate rows' interval of one method's mean covers its accuracy over
problem sets and seeds 92-97.5% of the time.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from analysis.load import load_sweep
from analysis.seeds import diff_two_level
from analysis.stats import sign_flip_pvalue
from analysis.synthetic import run_accuracy_sd, true_difference, two_arm_counts, write_two_arm_sweep
from analysis.tables import SINGLE_SEED, TWO_LEVEL, paired_table

K, N_PROBLEMS, N_SWEEPS, ALPHA = 8, 30, 2000, 0.05
BAND = 0.999  # central binomial band of the null rejection rate
SLICES = [slice(0, N_PROBLEMS)]
SEED_SD_LOGIT = {0.05: 0.35, 0.07: 0.5}  # run-accuracy sd -> seed effect sd on the logit


def _rejections(seeds: int, seed_sd_logit: float, shift_logit: float = 0.0, n: int = N_SWEEPS, seed: int = 0):
    ca, cb = two_arm_counts(np.random.default_rng([seed, seeds]), n, seeds, n_problems=N_PROBLEMS, k=K,
                            seed_sd_logit=seed_sd_logit, shift_logit=shift_logit)
    t = diff_two_level(cb / K, ca / K, SLICES)  # B - A: positive under a positive shift
    return t["p_value"][-1] < ALPHA, t


def test_seed_sizes_are_realistic():
    for sd, logit in SEED_SD_LOGIT.items():
        assert run_accuracy_sd(logit) == pytest.approx(sd, abs=0.005)
    assert true_difference(0.7) == pytest.approx(0.10, abs=0.005)


def test_report_path_equals_in_memory_statistics(tmp_path):
    ca, cb = two_arm_counts(np.random.default_rng(7), 2, 3, n_problems=N_PROBLEMS, k=K)
    for i in range(2):
        sweep = load_sweep(write_two_arm_sweep(tmp_path / f"s{i}", ca[i], cb[i], K))
        row = paired_table(sweep, ["final"]).set_index("data_source").loc["avg"]
        t = diff_two_level(ca[i] / K, cb[i] / K, SLICES)
        assert row["test"] == TWO_LEVEL and bool(row["seed_variance"]) and (row["seeds_a"], row["seeds_b"]) == (3, 3)
        for col, key in (("diff", "estimate"), ("se", "se"), ("df", "df"), ("p_value", "p_value"),
                         ("ci_low", "ci_low"), ("ci_high", "ci_high")):
            assert row[col] == pytest.approx(t[key][-1], rel=1e-12, abs=1e-15), col
        assert bool(row["significant"]) == bool(t["p_value"][-1] < ALPHA)


@pytest.mark.parametrize("seeds", [3, 5])
@pytest.mark.parametrize("run_sd", sorted(SEED_SD_LOGIT))
def test_null_rejection_rate_is_nominal(seeds, run_sd):
    rejected, _ = _rejections(seeds, SEED_SD_LOGIT[run_sd])
    lo, hi = stats.binom.interval(BAND, N_SWEEPS, ALPHA)
    assert lo / N_SWEEPS <= rejected.mean() <= hi / N_SWEEPS, (seeds, run_sd, rejected.mean())


def test_single_seed_is_never_significant(tmp_path):
    ca, cb = two_arm_counts(np.random.default_rng(11), 6, 1, n_problems=N_PROBLEMS, k=K,
                            seed_sd_logit=SEED_SD_LOGIT[0.07])
    for i in range(6):
        paired = paired_table(load_sweep(write_two_arm_sweep(tmp_path / f"s{i}", ca[i], cb[i], K)), ["final"],
                              n_flip=500)
        assert (paired["test"] == SINGLE_SEED).all() and not paired["significant"].any()
        assert not paired["seed_variance"].any() and paired["df"].isna().all()


def test_problem_only_test_is_overconfident_with_seed_effects():
    ca, cb = two_arm_counts(np.random.default_rng(3), 300, 3, n_problems=N_PROBLEMS, k=K,
                            seed_sd_logit=SEED_SD_LOGIT[0.07])
    d = (ca / K).mean(axis=1) - (cb / K).mean(axis=1)  # seed-averaged per-problem differences
    p = np.array([sign_flip_pvalue(row, n_flip=1000) for row in d])
    assert (p < ALPHA).mean() > 0.25  # measured about 0.5 (issue 10's table); nominal would be 0.05


@pytest.mark.parametrize(("seeds", "floor"), [(3, 0.30), (5, 0.55)])
def test_power_against_a_true_difference(seeds, floor):
    rejected, t = _rejections(seeds, SEED_SD_LOGIT[0.05], shift_logit=0.7)
    assert rejected.mean() >= floor
    assert t["estimate"][-1].mean() == pytest.approx(true_difference(0.7), abs=0.01)
    # coverage of the true difference by the 95% interval
    covered = (t["ci_low"][-1] <= true_difference(0.7)) & (true_difference(0.7) <= t["ci_high"][-1])
    assert covered.mean() >= 0.93


@pytest.fixture(scope="module")
def population_accuracy() -> float:
    """Expected accuracy of one arm over problem sets and seed effects (Monte Carlo, 1.2M draws)."""
    rng = np.random.default_rng(9)
    p = np.clip(rng.beta(0.6, 0.9, size=(1000, 1, 40)), 1e-3, 1 - 1e-3)
    u = rng.normal(0.0, SEED_SD_LOGIT[0.07], size=(1, 30, 1))
    return float((1 / (1 + np.exp(-(np.log(p / (1 - p)) + u)))).mean())


@pytest.mark.parametrize("seeds", [3, 5])
def test_method_mean_interval_covers_the_population_accuracy(seeds, population_accuracy):
    """The aggregate rows' two-level interval: coverage of the accuracy over problem sets and seeds."""
    from analysis.seeds import mean_two_level

    true = population_accuracy
    ca, _ = two_arm_counts(np.random.default_rng([1, seeds]), N_SWEEPS, seeds, n_problems=N_PROBLEMS, k=K,
                           seed_sd_logit=SEED_SD_LOGIT[0.07])
    m = mean_two_level(ca / K, SLICES)
    covered = (m["ci_low"][0] <= true) & (true <= m["ci_high"][0])
    assert 0.92 <= covered.mean() <= 0.975  # measured 0.94 at 3 and 5 seeds (4,000 sweeps)


# -- seed pairs (issue 20): arms sharing their seeds, seed effects correlated at rho ------------------
def _paired_rejections(seeds: int, rho: float, shift_logit: float = 0.0, df_rule: str = "seeds", n: int = N_SWEEPS):
    from analysis.seeds import diff_paired_two_level

    ca, cb = two_arm_counts(np.random.default_rng([20, seeds, round(rho * 100)]), n, seeds, n_problems=N_PROBLEMS,
                            k=K, seed_sd_logit=SEED_SD_LOGIT[0.07], shift_logit=shift_logit, seed_corr=rho)
    paired = diff_paired_two_level(cb / K, ca / K, SLICES, df_rule=df_rule)["p_value"][-1] < ALPHA
    unpaired = diff_two_level(cb / K, ca / K, SLICES)["p_value"][-1] < ALPHA
    return paired, unpaired


@pytest.mark.parametrize("seeds", [3, 5])
@pytest.mark.parametrize("rho", [0.0, 0.6, 0.9])
def test_paired_and_unpaired_tests_stay_at_or_below_nominal_with_shared_seeds(seeds, rho):
    """Both tests under the null at any seed-effect correlation: not above the 99.9% band's top (6.65%).

    The paired test (S - 1 df) is conservative (measured 2.9-4.6% at 3-10 seeds, docs/statistics.md),
    the unpaired one more so as rho grows (it counts the shared seed effect as noise twice)."""
    paired, unpaired = _paired_rejections(seeds, rho)
    hi = stats.binom.interval(BAND, N_SWEEPS, ALPHA)[1] / N_SWEEPS
    assert paired.mean() <= hi and unpaired.mean() <= hi, (seeds, rho, paired.mean(), unpaired.mean())
    if rho >= 0.6:
        assert unpaired.mean() < 0.035  # the unpaired test over-counts a shared seed effect (0.2-2.5% measured)


def test_satterthwaite_df_would_make_the_paired_test_liberal():
    """Why the paired test uses the seed pairs' df: Satterthwaite's rejects 9-10% at 2 seeds (so the check has teeth)."""
    paired, _ = _paired_rejections(2, 0.0, df_rule="satterthwaite")
    assert paired.mean() > stats.binom.interval(BAND, N_SWEEPS, ALPHA)[1] / N_SWEEPS


@pytest.mark.parametrize(("rho", "gain"), [(0.57, 0.08), (0.9, 0.3)])
def test_pairing_gains_power_at_the_measured_correlation(rho, gain):
    """5 seed pairs against a true +0.10 (run sd 0.07): measured 0.60 vs 0.44 at rho 0.57, 0.92 vs 0.47 at 0.9."""
    paired, unpaired = _paired_rejections(5, rho, shift_logit=0.7)  # +0.10 at seed sd 0.5 (shift_for)
    assert paired.mean() >= unpaired.mean() + gain, (paired.mean(), unpaired.mean())
