"""The one rule for the "best" checkpoint, shared by the analysis tables and verl checkpoint retention.

``best`` is the evaluated step with the highest ``avg`` (the arithmetic mean over evaluation sets
of mean@k), the earliest step on ties; step 0 (before training) counts. It is selected on the
very sets it is then reported on, so it is an optimistic number and every output labels it so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

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
