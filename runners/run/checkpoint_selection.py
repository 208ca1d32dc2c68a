"""The one rule for the "best" checkpoint, shared by the analysis tables and verl checkpoint retention
(in `runners/`, which `analysis` imports and `runners` may, as the rest of the run contract).

``best`` is the evaluated step with the highest ``avg`` (the arithmetic mean over evaluation sets
of mean@k), the earliest step on ties; step 0 (before training) counts. It is selected on the
very sets it is then reported on, so it is an optimistic number and every output labels it so.
:func:`eval_average` computes ``avg`` from a ``metrics.json``; :func:`best_steps` picks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from runners.run.run_contract import VAL_CORE_RE

#: How every output describes the selection.
TEST_SET_SELECTION = (
    "best = highest mean over the evaluation sets of mean@k, selected on those test sets "
    "themselves: an optimistic (test-set) selection"
)


def best_steps(averages: Mapping[int, float], m: int = 1, candidates: Iterable[int] | None = None) -> list[int]:
    """The ``m`` steps (of ``candidates``, default all) with the highest average, best first;
    the earlier step wins a tie."""
    steps = [int(s) for s in (averages if candidates is None else candidates) if s in averages]
    return sorted(steps, key=lambda s: (-float(averages[s]), s))[:m]


def eval_average(metrics: dict[str, Any], sets: Sequence[str] | None = None) -> dict[int, dict[str, Any]]:
    """Per evaluated step: ``{"avg": mean over sets of mean@n, "per_set": {ds: value}}``.

    ``sets`` defaults to the sets of the first val row; a step missing one of them is left out.
    """
    out: dict[int, dict[str, Any]] = {}
    for row in metrics.get("val", []):
        per_set = {m["ds"]: row[k] for k in row if (m := VAL_CORE_RE.match(k)) and row[k] is not None}
        if sets is None:
            sets = sorted(per_set)
        if not sets or any(ds not in per_set for ds in sets):
            continue
        out[int(row["step"])] = {
            "avg": sum(per_set[ds] for ds in sets) / len(sets),
            "per_set": {ds: per_set[ds] for ds in sets},
        }
    return out
