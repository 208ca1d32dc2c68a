"""Seed-aware intervals and tests: two levels of noise, training seeds (runs) and problems.

Data. For an arm ``a`` with S_a runs (seeds) evaluated on the same n problems, ``Y_a`` is the
(S_a, n) matrix of per-problem mean correctness, ``Y_a[s, j] = c / k``. Runs of different arms
share the problems (paired by ``problem_id``).

Model. ``Y_a[s, j] = mu + alpha_a + beta_j + gamma_aj + u_as + e_asj`` with beta_j the problem's
difficulty (the set is a sample of problems), gamma_aj an arm x problem interaction, u_as the
run's seed effect (training randomness), e_asj the rest (sampling k responses, seed x problem
interaction); independent, mean zero. Estimators (method of moments of the two-way layout
runs x problems, one observation per cell):

- run scores ``r_as = mean_j Y_a[s, j]``; column means ``c_aj = mean_s Y_a[s, j]``;
  residual mean square ``MS_a = sum_sj (Y - r_s - c_j + mean Y)^2 / ((S_a - 1)(n - 1))``;
- seed part ``V_seed,a = var(r_a, ddof=1) / S_a``: conditional on the problem set this is the
  whole variance of the arm's mean (it holds Var(u)/S and the sampling noise Var(e)/(nS));
- arm mean ``m_a = mean(Y_a)``: ``V = V_seed,a + V_prob,a`` with
  ``V_prob,a = max(0, var_j(c_aj) - MS_a / S_a) / n`` (estimates Var(beta)/n);
- paired difference ``D = mean_j (c_Aj - c_Bj)``: ``V = V_seed,A + V_seed,B + V_prob`` with
  ``V_prob = max(0, var_j(c_Aj - c_Bj) - MS_A/S_A - MS_B/S_B) / n`` (estimates Var(gamma_A -
  gamma_B)/n, zero when the arms differ by the same amount on every problem);
- degrees of freedom: Satterthwaite over the components, ``df = V^2 / sum_i V_i^2 / df_i``, with
  the problem part at ``n - 1`` df (``n - m`` for ``avg``) and the seed part at ``S - 1`` for a
  mean; for a difference with S_A = S_B the two seed parts are one component at ``S_A + S_B - 2``
  df (it equals the pooled-variance estimate; the t reference is then exact for equal seed
  variances and robust to unequal ones in a balanced design), else two components at
  ``S_A - 1`` and ``S_B - 1`` (Welch). Welch's df alone is conservative at 2-3 seeds (3.3%
  instead of 5% at 3 seeds in a trial calibration), hence the pooled df for balanced designs;
- interval ``estimate -+ t_{(1+level)/2, df} sqrt(V)``, two-sided ``p = 2 P(T_df > |estimate| /
  sqrt(V))`` (``scipy.stats.t``). With V_prob = 0 the test is Student's (S_A = S_B) or Welch's
  t-test on the run scores (``scipy.stats.ttest_ind``, checked in the tests). V_prob is truncated
  at 0, so when the arms do not interact with the problems it adds a little variance: the test
  is slightly conservative (measured rejection rates under the null in ``docs/statistics.md``).
- ``avg`` over m sets (the mean of the set means): the seed part is computed on the runs' avg
  scores (a seed effect is shared by the sets), the problem part is ``sum_s V_prob,s / m^2``.

Seed pairs (:func:`diff_paired_two_level`). When run s of arm A and run s of arm B share their seed
and the seed fixes common random numbers (the same prompts in the same order, the same sampler
draws: ``run.seed_fixes``, :mod:`analysis.pairing`), ``u_As`` and ``u_Bs`` are correlated and the
per-seed differences ``D[s, j] = Y_A[s, j] - Y_B[s, j]`` are the observations: ``D`` is analysed as
one arm's matrix by :func:`mean_two_level`. Estimate ``mean(D)`` (the same as the unpaired one for
equal seed counts); seed part ``var_s(d_s, ddof=1) / S`` of the per-seed run differences
``d_s = mean_j D[s, j]``, at ``S - 1`` df: it equals ``V_seed,A + V_seed,B - 2 cov_s(r_A, r_B) / S``,
so whatever the shared seed explains leaves the variance, and a negative or zero correlation costs
only the ``S - 1`` df lost against ``2S - 2``. Problem part as for the unpaired difference,
``max(0, var_j(mean_s D[:, j]) - MS_D / S) / n``, with the noise ``MS_D`` the residual mean square of
``D`` itself (the noise of a difference of paired runs; ``MS_A + MS_B`` would count the shared part
twice). Degrees of freedom: ``S - 1``, those of the seed pairs, whatever the problem part (the
containment rule for a contrast that varies between seeds): Satterthwaite's df, as for the
unpaired test, made the paired test liberal at few seeds, because with a 1-2 df seed part the
runs that reject are those whose seed part came out small, when the problem part dominates and
the df jump (FPR 0.096 at 2 seeds and 0.067 at 3, seed-effect correlation 0, run sd 0.07;
``python benchmarks/report/calibration.py --paired-only --paired-df satterthwaite``). With ``S - 1`` df
the test can only be conservative (the problem part adds variance) and is the paired t-test on the
run scores when V_prob = 0 (``scipy.stats.ttest_rel``, checked in the tests). Which of the two
tests a comparison uses is fixed by the design (are the runs seed pairs? :mod:`analysis.pairing`),
never by the data.

Why this method. Between-seed variance is the largest noise in RL fine-tuning on AIME-sized sets
("A Sober Look at Progress in LM Reasoning", Hochlehnert et al. 2025: single-seed swings of
several points), and it can only be estimated from several runs, so the test statistic's
variance must come from the spread of the runs, not of the problems (Agarwal et al. 2021, "Deep
RL at the edge of the statistical precipice": a run is the unit of replication). With the 3-5
seeds RL studies afford, a bootstrap over seeds is a poor variance estimate (3 seeds give 10
distinct resamples and a variance shrunk by (S-1)/S; its percentile interval under-covers), and
a cluster-robust standard error with a normal reference is anti-conservative with so few
clusters; the seed-level t with Satterthwaite df is the small-sample version of clustering by
run. The problem part is Miller 2024 ("Adding error bars to evals"): the questions are a sample,
the comparison is paired by question, and the within-question sampling noise (k responses) is
subtracted so it is not counted twice. Calibration is measured, not assumed:
``benchmarks/report/calibration.py`` and ``docs/statistics.md``; ``tests/test_analysis_calibration.py``.

With one seed in an arm V_seed cannot be estimated: these functions refuse (``ValueError``) and
:mod:`analysis.tables` reports the problem-level interval, labelled, never significant.
All functions are vectorised over leading axes (``Y`` of shape ``(..., S, n)``), so the
calibration runs thousands of sweeps through the same code as the report.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import stats

LEVEL = 0.95
FIELDS = ("estimate", "se", "se_seed", "se_problem", "df", "ci_low", "ci_high", "p_value")


def _check(y: np.ndarray, name: str) -> np.ndarray:
    y = np.asarray(y, dtype=float)
    if y.ndim < 2:
        raise ValueError(f"{name} must have shape (..., seeds, problems), got {y.shape}")
    if y.shape[-2] < 2:
        raise ValueError(f"{name} has {y.shape[-2]} seed(s): the between-seed variance needs >= 2 seeds per arm")
    return y


def seed_variance(run_scores: np.ndarray) -> np.ndarray:
    """``var(r, ddof=1) / S`` along the last axis (the seed part of a mean's variance)."""
    r = np.asarray(run_scores, dtype=float)
    return r.var(axis=-1, ddof=1) / r.shape[-1]


def residual_mean_square(y: np.ndarray) -> np.ndarray:
    """Two-way residual mean square of ``y`` (..., S, n): sum (y - row - col + grand)^2 / ((S-1)(n-1)).

    NaN-free: 0 when n < 2 (no residual degrees of freedom; the problem part is then 0 too).
    """
    y = np.asarray(y, dtype=float)
    s, n = y.shape[-2:]
    if n < 2:
        return np.zeros(y.shape[:-2])
    resid = y - y.mean(axis=-1, keepdims=True) - y.mean(axis=-2, keepdims=True) + y.mean(axis=(-2, -1), keepdims=True)
    return (resid**2).sum(axis=(-2, -1)) / ((s - 1) * (n - 1))


def _problem_part(col: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """``max(0, var_j(col, ddof=1) - noise) / n`` (0 for a single problem)."""
    n = col.shape[-1]
    if n < 2:
        return np.zeros(col.shape[:-1])
    return np.maximum(col.var(axis=-1, ddof=1) - noise, 0.0) / n


def _df(v_prob: np.ndarray, df_prob: int, va: np.ndarray, sa: int, vb: np.ndarray | None = None,
        sb: int | None = None) -> np.ndarray:
    """Satterthwaite df of ``V = seed part(s) + v_prob`` (module docstring)."""
    if vb is None:
        parts = [(va, sa - 1)]
    elif sa == sb:
        parts = [(va + vb, sa + sb - 2)]
    else:
        parts = [(va, sa - 1), (vb, sb - 1)]
    parts.append((v_prob, max(df_prob, 1)))
    num = sum(v for v, _ in parts) ** 2
    den = sum(v**2 / d for v, d in parts)
    with np.errstate(invalid="ignore", divide="ignore"):
        df = num / den
    seed_df = sum(d for _, d in parts[:-1])
    return np.where(den > 0, df, float(seed_df))  # no variance at all: df of the seeds


def _finish(est: np.ndarray, v_seed: np.ndarray, v_prob: np.ndarray, df: np.ndarray, level: float
            ) -> dict[str, np.ndarray]:
    se = np.sqrt(v_seed + v_prob)
    half = stats.t.ppf((1 + level) / 2, df) * se
    with np.errstate(invalid="ignore", divide="ignore"):
        tstat = np.abs(est) / se
    p = 2 * stats.t.sf(tstat, df)
    p = np.where(se > 0, p, np.where(est == 0, 1.0, 0.0))  # no variance at all: equal is p = 1
    return {"estimate": est, "se": se, "se_seed": np.sqrt(v_seed), "se_problem": np.sqrt(v_prob), "df": df,
            "ci_low": est - half, "ci_high": est + half, "p_value": np.minimum(p, 1.0)}


def _stack(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {f: np.stack([p[f] for p in parts]) for f in FIELDS}


def mean_two_level(y: np.ndarray, slices: Sequence[slice], level: float = LEVEL) -> dict[str, np.ndarray]:
    """Two-level interval of one arm's mean@k per set and for ``avg`` (module docstring).

    ``y`` (..., S, n) with S >= 2; set s owns the columns ``slices[s]``. Returns the arrays of
    :data:`FIELDS`, each of shape ``(len(slices) + 1,) + y.shape[:-2]`` (sets, then ``avg``).
    ``p_value`` tests mean = 0 and is of no use for a mean; it is returned for symmetry.
    """
    y = _check(y, "y")
    s = y.shape[-2]
    parts, v_probs, run_avg = [], [], 0.0
    for sl in slices:
        ys = y[..., sl]
        runs = ys.mean(axis=-1)
        run_avg = run_avg + runs / len(slices)
        v_seed = seed_variance(runs)
        v_prob = _problem_part(ys.mean(axis=-2), residual_mean_square(ys) / s)
        v_probs.append(v_prob)
        df_prob = ys.shape[-1] - 1
        parts.append(_finish(runs.mean(axis=-1), v_seed, v_prob, _df(v_prob, df_prob, v_seed, s), level))
    v_seed, v_prob = seed_variance(run_avg), sum(v_probs) / len(slices) ** 2
    df_prob = y.shape[-1] - len(slices)
    parts.append(_finish(run_avg.mean(axis=-1), v_seed, v_prob, _df(v_prob, df_prob, v_seed, s), level))
    return _stack(parts)


def diff_two_level(ya: np.ndarray, yb: np.ndarray, slices: Sequence[slice], level: float = LEVEL
                   ) -> dict[str, np.ndarray]:
    """Two-level interval and test of ``mean(A) - mean(B)`` per set and for ``avg`` (module docstring).

    ``ya`` (..., S_A, n) and ``yb`` (..., S_B, n), both with >= 2 seeds, the same problems in the
    same columns. Returns the arrays of :data:`FIELDS`, shape ``(len(slices) + 1,) + leading``.
    """
    ya, yb = _check(ya, "ya"), _check(yb, "yb")
    if ya.shape[-1] != yb.shape[-1]:
        raise ValueError(f"arms must share the problems: {ya.shape[-1]} vs {yb.shape[-1]} columns")
    sa, sb = ya.shape[-2], yb.shape[-2]
    parts, v_probs, avg_a, avg_b = [], [], 0.0, 0.0
    for sl in slices:
        a, b = ya[..., sl], yb[..., sl]
        ra, rb = a.mean(axis=-1), b.mean(axis=-1)
        avg_a, avg_b = avg_a + ra / len(slices), avg_b + rb / len(slices)
        va, vb = seed_variance(ra), seed_variance(rb)
        noise = residual_mean_square(a) / sa + residual_mean_square(b) / sb
        v_prob = _problem_part(a.mean(axis=-2) - b.mean(axis=-2), noise)
        v_probs.append(v_prob)
        df = _df(v_prob, a.shape[-1] - 1, va, sa, vb, sb)
        parts.append(_finish(ra.mean(axis=-1) - rb.mean(axis=-1), va + vb, v_prob, df, level))
    va, vb = seed_variance(avg_a), seed_variance(avg_b)
    v_prob = sum(v_probs) / len(slices) ** 2
    df = _df(v_prob, ya.shape[-1] - len(slices), va, sa, vb, sb)
    parts.append(_finish(avg_a.mean(axis=-1) - avg_b.mean(axis=-1), va + vb, v_prob, df, level))
    return _stack(parts)


def diff_paired_two_level(ya: np.ndarray, yb: np.ndarray, slices: Sequence[slice], level: float = LEVEL,
                          df_rule: str = "seeds") -> dict[str, np.ndarray]:
    """Two-level interval and test of ``mean(A) - mean(B)`` for seed pairs (module docstring, "Seed pairs").

    ``ya``, ``yb`` (..., S, n) with S >= 2 and row s of both arms the runs of one seed, the same
    problems in the same columns: the estimate and variance of :func:`mean_two_level` of ``ya - yb``.
    ``df_rule="seeds"`` (the report's): the t reference has ``S - 1`` df, the seed pairs' (module
    docstring); ``"satterthwaite"``: :func:`mean_two_level`'s df, kept to reproduce the calibration
    that rejected it. Returns the arrays of :data:`FIELDS`, shape ``(len(slices) + 1,) + leading``.
    """
    ya, yb = _check(ya, "ya"), _check(yb, "yb")
    if ya.shape != yb.shape:
        raise ValueError(f"seed pairs need one run of each arm per seed and the same problems: {ya.shape} vs "
                         f"{yb.shape}")
    if df_rule not in ("seeds", "satterthwaite"):
        raise ValueError(f"df_rule must be 'seeds' or 'satterthwaite', got {df_rule!r}")
    t = mean_two_level(ya - yb, slices, level)
    if df_rule == "satterthwaite":
        return t
    df = np.full(t["estimate"].shape, float(ya.shape[-2] - 1))
    return _finish(t["estimate"], t["se_seed"] ** 2, t["se_problem"] ** 2, df, level)


def minimum_detectable(se: np.ndarray, df: np.ndarray, power: float = 0.8, level: float = LEVEL) -> np.ndarray:
    """Smallest true difference a two-sided t test at ``level`` detects with probability ``power``:
    ``(t_{(1+level)/2, df} + t_{power, df}) x se``."""
    return (stats.t.ppf((1 + level) / 2, df) + stats.t.ppf(power, df)) * se
