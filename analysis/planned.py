"""Which paired comparisons were planned, and the Holm adjustment over them (docs/statistics.md).

With the user's four arms every pair is a planned comparison and the report adjusts nothing (as it always
has). With more arms the pairs multiply (28 at eight arms), so the report asks which comparisons were
planned: against a control the user names (``python -m analysis SWEEP --control tis``: every arm against
it, each row ``arm - control``), or, with more than four arms and no control, every pair. The
two-level rows of the planned comparisons of one checkpoint and one set form one family, whose p-values
are Holm-adjusted (step-down, strong control of the family-wise error rate at ``alpha``); the verdict reads
the adjusted p. Pairs outside the plan stay in ``paired.csv`` (``planned`` False), unadjusted, and
comparison.md leaves them out of its table.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: Arms a sweep may hold before its pairs are adjusted for their number even without a named control.
UNADJUSTED_ARMS = 4
NO_ADJUSTMENT = "none"
HOLM = "holm"


def holm(p_values: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values: ``p_(i) -> max_{j <= i} min(1, (m - j + 1) p_(j))`` in ascending
    order, returned in the input order (NaN stays NaN and is not counted in ``m``)."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(~np.isnan(p))
    order = ok[np.argsort(p[ok], kind="stable")]
    m = len(order)
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[index]))
        out[index] = running
    return out


def orient_to_control(paired: pd.DataFrame, control: str) -> pd.DataFrame:
    """Rows with ``control`` as ``method_a`` flipped to ``other - control`` (diff and interval negated,
    the seeds' columns swapped); other rows as they are."""
    flip = paired["method_a"] == control
    out = paired.copy()
    for a, b in (("method_a", "method_b"), ("seeds_a", "seeds_b")):
        out.loc[flip, [a, b]] = paired.loc[flip, [b, a]].to_numpy()
    out.loc[flip, "diff"] = -paired.loc[flip, "diff"]
    out.loc[flip, "ci_low"] = -paired.loc[flip, "ci_high"]
    out.loc[flip, "ci_high"] = -paired.loc[flip, "ci_low"]
    return out


def plan(paired: pd.DataFrame, methods: list[str], control: str | None) -> pd.DataFrame:
    """``paired`` with ``planned`` (bool), ``adjustment`` and ``p_adjusted`` added (see the module doc).

    Raises ValueError naming the arms when ``control`` is not one of ``methods``."""
    if control is not None and control not in methods:
        raise ValueError(f"--control {control}: no such arm in this sweep; its arms: {', '.join(methods)}")
    out = orient_to_control(paired, control) if control is not None else paired.copy()
    if control is not None:
        out["planned"] = out["method_b"] == control
    else:
        out["planned"] = True
    adjust = control is not None or len(methods) > UNADJUSTED_ARMS
    out["adjustment"] = HOLM if adjust else NO_ADJUSTMENT
    out["p_adjusted"] = out["p_value"].astype(float)
    if adjust:
        family = out["planned"] & out["seed_variance"].astype(bool)
        for _, index in out[family].groupby(["checkpoint", "data_source"], sort=False).groups.items():
            out.loc[index, "p_adjusted"] = holm(out.loc[index, "p_value"].to_numpy(dtype=float))
        out.loc[~out["planned"], "adjustment"] = NO_ADJUSTMENT
    return out
