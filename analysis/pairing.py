"""The design of a comparison of two arms: seed pairs or independent seeds, read from the run records.

Runs of two arms are compared as **seed pairs** (:func:`analysis.seeds.diff_paired_two_level`) when
the design makes them pairs, and as independent samples (:func:`analysis.seeds.diff_two_level`)
otherwise. The design is read from what the runs recorded, never from their scores, so the choice
of test cannot favour the smaller p. The arms are seed pairs when

- every seed occurs once in each arm, and both arms have the same seeds (a seed without its partner
  makes the design unpaired: dropping runs to force pairs would change the estimate);
- the two runs of each seed are a pair by their ``run.seed_fixes`` records
  (:func:`runners.run.run_contract.seed_pairing`: both records present, the seed fixes the same
  streams in both, the training data order among them);
- there are at least :data:`MIN_PAIRS` pairs. With 2 pairs the paired t has 1 df and loses to the
  unpaired test (2 df) at every correlation the calibration tried, up to 0.9 (power 0.03-0.07
  against 0.15-0.18 for a true +0.10 at run sd 0.07: ``docs/statistics.md``); with 3 pairs it
  breaks even near a seed-effect correlation of 0.6, with 5 near 0.3, and gains above.

Older records without ``seed_fixes`` therefore keep the unpaired test.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from analysis.load import Sweep
from analysis.seeds import diff_paired_two_level, diff_two_level
from runners.run.run_contract import seed_pairing

PAIRED_BY_SEED = "paired by seed"
MIN_PAIRS = 3


@dataclass(frozen=True)
class SeedDesign:
    """How two arms' runs are compared: ``paired``; ``order_a``/``order_b`` the row indices of each
    arm's runs in ascending seed order (row i of both is seed ``seeds[i]`` when paired); ``pairs``
    the number of seed pairs (0 when unpaired); ``reason`` :data:`PAIRED_BY_SEED` or why not."""

    paired: bool
    order_a: tuple[int, ...]
    order_b: tuple[int, ...]
    seeds: tuple[int, ...]
    reason: str

    @property
    def pairs(self) -> int:
        return len(self.seeds) if self.paired else 0


def _seeds_text(seeds: Sequence[int]) -> str:
    return ", ".join(str(s) for s in seeds)


def seed_design(seeds_a: Sequence[int], fixes_a: Sequence[Mapping[str, Any] | None],
                seeds_b: Sequence[int], fixes_b: Sequence[Mapping[str, Any] | None]) -> SeedDesign:
    """The design of arm A (runs with ``seeds_a`` and ``run.seed_fixes`` ``fixes_a``) against arm B."""
    order_a = tuple(sorted(range(len(seeds_a)), key=lambda i: seeds_a[i]))
    order_b = tuple(sorted(range(len(seeds_b)), key=lambda i: seeds_b[i]))
    sa, sb = [int(seeds_a[i]) for i in order_a], [int(seeds_b[i]) for i in order_b]

    def unpaired(reason: str) -> SeedDesign:
        return SeedDesign(False, order_a, order_b, (), f"unpaired: {reason}")

    if len(set(sa)) < len(sa) or len(set(sb)) < len(sb):
        return unpaired("an arm has several runs of one seed")
    if sa != sb:
        return unpaired(f"the arms' seeds differ ({_seeds_text(sa)} vs {_seeds_text(sb)})")
    if len(sa) < MIN_PAIRS:
        return unpaired(f"{len(sa)} seed pairs (a paired t needs >= {MIN_PAIRS})")
    for ia, ib, seed in zip(order_a, order_b, sa, strict=True):
        why = seed_pairing(fixes_a[ia], fixes_b[ib])
        if why is not None:
            return unpaired(f"seed {seed}: {why}")
    return SeedDesign(True, order_a, order_b, tuple(sa), PAIRED_BY_SEED)


def unpaired_design(n_a: int, n_b: int, reason: str) -> SeedDesign:
    """The design of two arms compared as independent seeds, for ``reason``."""
    return SeedDesign(False, tuple(range(n_a)), tuple(range(n_b)), (), f"unpaired: {reason}")


def arm_design(sweep_a: Sweep, runs_a: Sequence[str], sweep_b: Sweep, runs_b: Sequence[str]) -> SeedDesign:
    """:func:`seed_design` of the runs ``runs_a`` of ``sweep_a`` against ``runs_b`` of ``sweep_b`` (seeds and
    ``run.seed_fixes`` from the sweeps' ``runs`` tables)."""
    def fixes(sweep: Sweep, runs: Sequence[str]) -> list[Mapping[str, Any] | None]:
        cells = [sweep.runs.at[r, "seed_fixes"] if "seed_fixes" in sweep.runs else None for r in runs]
        return [c if isinstance(c, Mapping) else None for c in cells]  # a missing record may read as NaN

    return seed_design([int(sweep_a.runs.at[r, "seed"]) for r in runs_a], fixes(sweep_a, runs_a),
                       [int(sweep_b.runs.at[r, "seed"]) for r in runs_b], fixes(sweep_b, runs_b))


def compare(ya: np.ndarray, yb: np.ndarray, design: SeedDesign, slices: Sequence[slice]) -> dict[str, np.ndarray]:
    """The two-level comparison ``A - B`` the design calls for: :func:`analysis.seeds.diff_paired_two_level`
    on the runs in seed order when ``design.paired``, else :func:`analysis.seeds.diff_two_level`."""
    if design.paired:
        return diff_paired_two_level(ya[list(design.order_a)], yb[list(design.order_b)], slices)
    return diff_two_level(ya, yb, slices)
