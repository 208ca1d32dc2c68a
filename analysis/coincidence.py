"""Which curves of a panel coincide, and over which steps: the note the figures print when lines hide each other.

With one seed, arms often follow the same trajectory for a while (PG and SC until the first sampled
token differs), so on a figure one line lies exactly on another. :func:`coinciding_curves` finds,
for the curves of one panel, the maximal runs of consecutive common steps over which curves are
equal within ``tolerance``; :func:`coincidence_note` words them for the figure.

With several seeds per arm, the lines that hide each other are the runs of one seed in two arms, and a
note per pair of runs would not fit: :func:`seed_coincidences` counts, for each pair of arms, the
seeds whose two runs coincide from their first common step (the shared start of arms that follow one
trajectory until they diverge; a chance crossing later on hides nothing), and
:func:`seed_coincidence_note` words the count, e.g. ``pg = sc in 14 of 16 seeds, median through
step 37``. Both compare only the runs of one seed, so their cost grows with the runs, not their square.
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


def _points(curve: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of the non-null points of ``curve``, ascending in step."""
    x, y = np.asarray(curve.index, dtype=float), np.asarray(curve.to_numpy(), dtype=float)
    keep = ~np.isnan(y)
    order = np.argsort(x[keep], kind="stable")
    return x[keep][order], y[keep][order]


def _equal_runs(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray], tolerance: float,
                min_points: int) -> list[tuple[int, int]]:
    """(first, last) step of each maximal run of >= min_points consecutive common steps where |a - b| <= tol
    (``a``, ``b``: :func:`_points` of two curves)."""
    common, ia, ib = np.intersect1d(a[0], b[0], assume_unique=True, return_indices=True)
    equal = np.abs(a[1][ia] - b[1][ib]) <= tolerance
    edges = np.diff(np.concatenate([[0], equal.astype(np.int8), [0]]))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return [(int(common[i]), int(common[j - 1])) for i, j in zip(starts, ends, strict=True) if j - i >= min_points]


def coinciding_curves(curves: Mapping[str, pd.Series], tolerance: float, min_points: int = 2
                      ) -> list[Coincidence]:
    """The coincidences among ``curves`` (name -> values indexed by step).

    Two curves coincide over a range of their common steps when every value in it differs by at most
    ``tolerance`` (both NaN counts as equal), over at least ``min_points`` consecutive common steps.
    Pairs that coincide over the same range are joined into one group (a = b and b = c: a, b, c).
    Sorted by first step, then by the curves' order in ``curves``.
    """
    order = {name: i for i, name in enumerate(curves)}
    points = {name: _points(c) for name, c in curves.items()}
    ranges: dict[tuple[int, int], list[tuple[str, str]]] = {}
    for a, b in combinations(curves, 2):
        for span in _equal_runs(points[a], points[b], tolerance, min_points):
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


@dataclass(frozen=True)
class SeedCoincidence:
    """Arms ``a`` and ``b`` whose runs of one seed coincide from their first common step in ``seeds`` of the
    ``of`` seeds both arms have; ``through``: the median over those seeds of the last step they coincide."""

    a: str
    b: str
    seeds: int
    of: int
    through: float


def seed_coincidences(curves: Mapping[str, Mapping[int, pd.Series]], tolerance: float, min_points: int = 2
                      ) -> list[SeedCoincidence]:
    """Per pair of arms of ``curves`` (arm -> seed -> values indexed by step), how many of their shared
    seeds have runs that coincide from the start: equal within ``tolerance`` over at least ``min_points``
    consecutive common steps beginning at the first common step (the rule of :func:`coinciding_curves`).

    Only pairs with at least one such seed, sorted by descending ``seeds``, then the arms' order in ``curves``.
    """
    order = {name: i for i, name in enumerate(curves)}
    points = {arm: {seed: _points(c) for seed, c in by_seed.items()} for arm, by_seed in curves.items()}
    found = []
    for a, b in combinations(curves, 2):
        shared = [seed for seed in points[a] if seed in points[b]]
        through = []
        for seed in shared:
            pa, pb = points[a][seed], points[b][seed]
            spans = _equal_runs(pa, pb, tolerance, min_points)
            start = np.intersect1d(pa[0], pb[0])[:1]
            if spans and start.size and spans[0][0] == int(start[0]):
                through.append(spans[0][1])
        if through:
            found.append(SeedCoincidence(a, b, len(through), len(shared), float(np.median(through))))
    return sorted(found, key=lambda c: (-c.seeds, order[c.a], order[c.b]))


def seed_coincidence_note(found: Sequence[SeedCoincidence], limit: int = 3) -> str:
    """One note for a panel, e.g. ``same seed, from the start: pg = sc in 14 of 16 seeds, median through
    step 37``; "" when nothing coincides; past ``limit`` pairs of arms, "+N more"."""
    if not found:
        return ""
    def count(c: SeedCoincidence) -> str:
        return f"all {c.of} seeds" if c.seeds == c.of > 1 else f"{c.seeds} of {c.of} seed{'s' if c.of > 1 else ''}"

    parts = [f"{c.a} = {c.b} in {count(c)}, median through step {c.through:g}" for c in found[:limit]]
    more = f"; +{len(found) - limit} more" if len(found) > limit else ""
    return "coincide (same seed, from the start): " + "; ".join(parts) + more
