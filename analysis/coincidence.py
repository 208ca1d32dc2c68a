"""Which curves of a panel coincide, and over which steps: the note the figures print when lines hide each other.

With one seed, arms often follow the same trajectory for a while (PG and SC until the first sampled
token differs), so on a figure one line lies exactly on another. :func:`coinciding_curves` finds,
for the curves of one panel, the maximal runs of consecutive common steps over which curves are
equal within ``tolerance``; :func:`coincidence_note` words them for the figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd

#: Curves closer than this share of the panel's value span are drawn on top of each other.
VISUAL_TOLERANCE = 0.005


@dataclass(frozen=True)
class Coincidence:
    """Curves ``names`` (two or more, in the given curve order) equal from ``first`` to ``last`` step."""

    names: tuple[str, ...]
    first: int
    last: int


def _equal_runs(a: pd.Series, b: pd.Series, tolerance: float, min_points: int) -> list[tuple[int, int]]:
    """(first, last) step of each maximal run of >= min_points consecutive common steps where |a - b| <= tol."""
    common = a.index.intersection(b.index).sort_values()
    x, y = a.loc[common].to_numpy(float), b.loc[common].to_numpy(float)
    equal = (np.abs(x - y) <= tolerance) | (np.isnan(x) & np.isnan(y))
    runs, start = [], None
    for i, same in enumerate([*equal, False]):
        if same and start is None:
            start = i
        elif not same and start is not None:
            if i - start >= min_points:
                runs.append((int(common[start]), int(common[i - 1])))
            start = None
    return runs


def coinciding_curves(curves: Mapping[str, pd.Series], tolerance: float, min_points: int = 2
                      ) -> list[Coincidence]:
    """The coincidences among ``curves`` (name -> values indexed by step).

    Two curves coincide over a range of their common steps when every value in it differs by at most
    ``tolerance`` (both NaN counts as equal), over at least ``min_points`` consecutive common steps.
    Pairs that coincide over the same range are joined into one group (a = b and b = c: a, b, c).
    Sorted by first step, then by the curves' order in ``curves``.
    """
    order = {name: i for i, name in enumerate(curves)}
    ranges: dict[tuple[int, int], list[tuple[str, str]]] = {}
    for a, b in combinations(curves, 2):
        for span in _equal_runs(curves[a].dropna(), curves[b].dropna(), tolerance, min_points):
            ranges.setdefault(span, []).append((a, b))
    found = []
    for (first, last), pairs in ranges.items():
        groups: list[set[str]] = []
        for a, b in pairs:
            joined = [g for g in groups if a in g or b in g]
            merged = {a, b}.union(*joined)
            groups = [g for g in groups if g not in joined] + [merged]
        found += [Coincidence(tuple(sorted(g, key=order.__getitem__)), first, last) for g in groups]
    return sorted(found, key=lambda c: (c.first, [order[n] for n in c.names], c.last))


def panel_tolerance(curves: Mapping[str, pd.Series], share: float = VISUAL_TOLERANCE) -> float:
    """``share`` of the span of all values of a panel's curves (what is indistinguishable on that panel)."""
    values = np.concatenate([np.asarray(s, dtype=float) for s in curves.values()] or [np.zeros(0)])
    values = values[np.isfinite(values)]
    if values.size == 0:
        return 0.0
    span = float(values.max() - values.min())
    return share * span if span > 0 else share * max(abs(float(values.max())), 1e-12)


def coincidence_note(found: Sequence[Coincidence], every: Sequence[str] | None = None, limit: int = 3) -> str:
    """One line for a panel, e.g. ``coincide: pg = sc, steps 0-10``; "" when nothing coincides.

    A group holding every curve of ``every`` is written ``all``; past ``limit`` groups, "+N more".
    """
    if not found:
        return ""
    parts = []
    for c in found[:limit]:
        who = "all" if every is not None and len(every) > 2 and set(c.names) == set(every) else " = ".join(c.names)
        parts.append(f"{who}, steps {c.first}-{c.last}")
    more = f"; +{len(found) - limit} more" if len(found) > limit else ""
    return "coincide: " + "; ".join(parts) + more
