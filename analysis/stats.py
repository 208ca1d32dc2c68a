"""Problem-level estimators and uncertainty of one run's (or one seed-average's) evaluation results.

These intervals describe the noise of the problems and sampled responses of the runs at hand;
they do not contain between-seed variance. Intervals over seeds and problems are in
:mod:`analysis.seeds`.

Notation: a set has n problems, each sampled k times; ``x_j`` is problem j's mean correctness
(``c_j / k`` with ``c_j`` the number of correct samples).

- mean@k = (1/n) sum_j x_j; se = std(x, ddof=1) / sqrt(n).
- ``avg`` over m sets = (1/m) sum_s mean@k_s, with se_avg = sqrt(sum_s se_s^2) / m (sets are
  independent).
- Percentile bootstrap: B resamples of the problems with replacement; the 95% interval is the
  2.5th and 97.5th percentiles (numpy's linear interpolation) of the resampled means. For
  ``avg`` each set is resampled on its own (stratified) and the resampled set means averaged.
- Paired comparison of two arms on the same problems: d_j = x_j(a) - x_j(b); the paired bootstrap
  resamples problems (so d_j stays paired); the two-sided sign-flip permutation test flips the
  sign of each d_j independently (the null: a and b are exchangeable on every problem).
- pass@k, unbiased (Chen et al. 2021): with n samples of which c are correct,
  pass@k = 1 - C(n-c, k) / C(n, k), averaged over problems.

Own code where no library does the job (everything else is numpy, pandas, scipy.stats):
``Resampler`` (one fixed resample matrix per set position shared by every run, pair and step, so
the stratified ``avg`` interval is built from exactly the per-set resamples and a whole stack of
score vectors is resampled with one matrix product; ``scipy.stats.bootstrap`` draws anew for each
call and has no stratification), ``sign_flip_pvalue`` (exact enumeration over the non-zero
differences and the |T| >= |T_obs| two-sided rule, tested against brute force;
``scipy.stats.permutation_test`` forms two-sided p-values as twice the smaller one-sided one and
enumerates exactly only below ``n_resamples`` patterns of all values), ``pass_at_k`` (the exact
binomial formula with ``math.comb``), ``backward_moving_average`` (pandas ``rolling`` over a
step-indexed frame).

Reproducibility: the resamples come from ``numpy.random.default_rng([seed, n, stream])``, one
stream per set position, so the same sweep gives the same intervals on every run, two sets of
equal size are still resampled independently, and the ``avg`` interval is built from exactly the
resamples of the per-set intervals. All resampling is vectorised: a (B, n) matrix of resample
counts W (W[b, j] = times problem j is drawn in resample b) turns a whole stack of score vectors
into their B resampled means with one matrix product, ``X @ W.T / n``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from itertools import product

import numpy as np
import pandas as pd

N_BOOT = 10_000
N_FLIP = 10_000
SEED = 0
EXACT_FLIP_MAX = 16  # up to 2**16 sign patterns are enumerated exactly
MOVING_AVERAGE_WINDOW = 20


def mean_se(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error ``std(ddof=1) / sqrt(n)`` along the last axis (se is NaN for n < 2)."""
    x = np.asarray(x, dtype=float)
    n = x.shape[-1]
    mean = x.mean(axis=-1)
    if n < 2:
        return mean, np.full_like(mean, np.nan)
    return mean, x.std(axis=-1, ddof=1) / math.sqrt(n)


def combine_se(ses: Sequence[np.ndarray]) -> np.ndarray:
    """Standard error of the arithmetic mean of m independent estimates: sqrt(sum se^2) / m."""
    ses = [np.asarray(s, dtype=float) for s in ses]
    return np.sqrt(sum(s**2 for s in ses)) / len(ses)


def percentile_interval(boot: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval ``(q_{(1-level)/2}, q_{(1+level)/2})`` of resampled statistics (last axis)."""
    alpha = (1 - level) / 2
    lo, hi = np.percentile(boot, [100 * alpha, 100 * (1 - alpha)], axis=-1)
    return lo, hi


class Resampler:
    """Fixed-seed bootstrap resamples, drawn once per (problem count, stream) and reused.

    ``counts(n, stream)`` is the (B, n) matrix W of how often each problem is drawn in each
    resample, from ``default_rng([seed, n, stream])``; ``means(X, stream)`` returns the resampled
    means ``X @ W.T / n`` for every row of X at once.
    """

    def __init__(self, n_boot: int = N_BOOT, seed: int = SEED):
        self.n_boot = int(n_boot)
        self.seed = int(seed)
        self._cache: dict[tuple[int, int], np.ndarray] = {}

    def counts(self, n: int, stream: int = 0) -> np.ndarray:
        """(n_boot, n) resample counts; every row sums to n."""
        key = (int(n), int(stream))
        if key not in self._cache:
            rng = np.random.default_rng([self.seed, key[0], key[1]])
            idx = rng.integers(0, n, size=(self.n_boot, n))
            flat = (idx + (np.arange(self.n_boot) * n)[:, None]).ravel()
            self._cache[key] = np.bincount(flat, minlength=self.n_boot * n).reshape(self.n_boot, n).astype(float)
        return self._cache[key]

    def means(self, x: np.ndarray, stream: int = 0) -> np.ndarray:
        """Bootstrap means of the last axis: shape ``x.shape[:-1] + (n_boot,)``."""
        x = np.asarray(x, dtype=float)
        n = x.shape[-1]
        return x @ self.counts(n, stream).T / n


def set_summaries(x: np.ndarray, slices: Sequence[slice], resampler: Resampler, level: float = 0.95
                  ) -> dict[str, np.ndarray]:
    """mean, se, ci_low, ci_high for each set and for their average, vectorised over leading axes.

    ``x[..., j]`` is problem j's score (a per-problem mean, or a paired difference); set s owns
    the columns ``slices[s]`` and is resampled with stream s. Returns arrays of shape
    ``(len(slices) + 1,) + x.shape[:-1]``: rows 0..m-1 are the sets, row m is ``avg`` (mean of the
    set means, se combined by :func:`combine_se`, stratified bootstrap).
    """
    x = np.asarray(x, dtype=float)
    means, ses, los, his, boots = [], [], [], [], []
    for s, sl in enumerate(slices):
        m, se = mean_se(x[..., sl])
        b = resampler.means(x[..., sl], stream=s)
        lo, hi = percentile_interval(b, level)
        means.append(m)
        ses.append(se)
        los.append(lo)
        his.append(hi)
        boots.append(b)
    avg_boot = sum(boots) / len(boots)
    lo, hi = percentile_interval(avg_boot, level)
    return {
        "mean": np.stack([*means, sum(means) / len(means)]),
        "se": np.stack([*ses, combine_se(ses)]),
        "ci_low": np.stack([*los, lo]),
        "ci_high": np.stack([*his, hi]),
    }


def sign_flip_pvalue(d: np.ndarray, weights: np.ndarray | None = None, n_flip: int = N_FLIP, seed: int = SEED,
                     exact_max: int = EXACT_FLIP_MAX) -> float:
    """Two-sided paired sign-flip permutation p-value for ``T = sum_j w_j d_j`` (default w_j = 1/n).

    Under the null each d_j is equally likely to be +d_j or -d_j. Problems with d_j = 0 do not
    change T under flipping; when at most ``exact_max`` are non-zero every sign pattern is
    enumerated and p = #{patterns with |T*| >= |T|} / 2^n_nonzero (exact; the observed pattern is
    one of them). Otherwise ``n_flip`` random patterns from ``default_rng([seed, n])`` are used
    and p = (1 + #{|T*| >= |T|}) / (1 + n_flip). Ties are counted with a 1e-12 relative tolerance.
    """
    d = np.asarray(d, dtype=float)
    w = np.full(d.shape, 1.0 / d.size) if weights is None else np.asarray(weights, dtype=float)
    wd = w * d
    nz = wd[wd != 0]
    t_obs = abs(nz.sum())
    if nz.size == 0:
        return 1.0
    tol = 1e-12 * max(np.abs(nz).sum(), 1e-300)
    if nz.size <= exact_max:
        signs = np.array(list(product((1.0, -1.0), repeat=nz.size)))
        t = np.abs(signs @ nz)
        return float(np.mean(t >= t_obs - tol))
    t = np.abs(_random_signs(seed, d.size, n_flip) @ wd)
    return float((1 + np.count_nonzero(t >= t_obs - tol)) / (1 + n_flip))


@lru_cache(maxsize=64)
def _random_signs(seed: int, n: int, n_flip: int) -> np.ndarray:
    """(n_flip, n) matrix of random +-1 from ``default_rng([seed, n])``, cached (read-only)."""
    signs = np.random.default_rng([seed, n]).integers(0, 2, size=(n_flip, n)) * 2.0 - 1.0
    signs.flags.writeable = False
    return signs


def stratified_weights(sizes: Sequence[int]) -> np.ndarray:
    """Weights w_j = 1 / (m * n_s(j)) that make ``sum_j w_j d_j`` the mean of the m set means."""
    return np.concatenate([np.full(n, 1.0 / (len(sizes) * n)) for n in sizes])


def pass_at_k(c: np.ndarray, n: int, k: int) -> np.ndarray:
    """Unbiased pass@k per problem: ``1 - C(n-c, k) / C(n, k)`` for c correct out of n samples.

    Exact binomials (``math.comb``) are tabulated for c = 0..n and looked up; needs 1 <= k <= n.
    """
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n samples, got k={k}, n={n}")
    table = np.array([1.0 - math.comb(n - c_, k) / math.comb(n, k) for c_ in range(n + 1)])
    return table[np.asarray(c, dtype=int)]


def backward_moving_average(values: pd.Series | pd.DataFrame, window: int = MOVING_AVERAGE_WINDOW
                            ) -> pd.Series | pd.DataFrame:
    """Backward moving average over training steps, skipping nulls.

    ``values`` is indexed by step. The result at step s is the mean of the non-null values at the
    steps max(1, s - window + 1) .. s (the window is counted in steps, not rows, so a missing row
    shortens the window rather than reaching further back); NaN where the window holds no value.
    Only the steps of ``values`` are returned. A frame is averaged column by column (a column's
    nulls count as missing steps, so each column is what its own series would give at its steps).
    """
    values = values.astype(float)
    if values.empty:
        return values
    steps = values.index.to_numpy()
    full = values.reindex(range(int(steps.min()), int(steps.max()) + 1))
    return full.rolling(window=window, min_periods=1).mean().reindex(values.index)
