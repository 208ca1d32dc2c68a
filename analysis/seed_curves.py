"""A method's curve over its seeds, for the figures: the mean of the seeds' curves and its band.

The evaluation curves have problems as well as seeds, and their band is the two-level interval of
:func:`analysis.seeds.mean_two_level` (:func:`analysis.tables.eval_curves_table`, ``by="method"``).
A training metric has one value per run and step, so only the seed level is left: :func:`seed_band`
treats each step's values of the S seeds as one arm's (S, 1) matrix of
:func:`analysis.seeds.mean_two_level`, whose problem part is then 0 and whose interval is the t
interval over the seeds, ``mean -+ t_{0.975, S-1} sd / sqrt(S)``: the same code as the tables'
seed part. As the evaluation curves do, the mean is drawn at the steps every seed has a value, so
it never averages a changing set of seeds (a seed still running ends the mean at its last step).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from analysis.seeds import LEVEL, mean_two_level

BAND_COLUMNS = ["step", "mean", "ci_low", "ci_high", "n_seeds"]


def seed_band(curves: Mapping[int, pd.Series], level: float = LEVEL) -> pd.DataFrame:
    """Mean over the seeds' ``curves`` (seed -> values indexed by step) at the steps where every seed has a
    finite value, with the ``level`` t interval over the seeds (module docstring); needs >= 2 seeds.

    Columns :data:`BAND_COLUMNS`, one row per such step in ascending order (empty when there is none).
    """
    if len(curves) < 2:
        raise ValueError(f"a band over seeds needs >= 2 seeds, got {len(curves)}")
    wide = pd.concat([c.astype(float).rename(seed) for seed, c in curves.items()], axis=1).sort_index()
    wide = wide[np.isfinite(wide.to_numpy()).all(axis=1)]
    if wide.empty:
        return pd.DataFrame(columns=BAND_COLUMNS)
    summary = mean_two_level(wide.to_numpy()[:, :, None], [slice(0, 1)], level)  # (steps, seeds, 1 "problem")
    return pd.DataFrame({"step": wide.index.to_numpy(), "mean": summary["estimate"][0],
                         "ci_low": summary["ci_low"][0], "ci_high": summary["ci_high"][0],
                         "n_seeds": len(curves)})
