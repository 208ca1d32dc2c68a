"""The sampler's schedule in the async miniature: how much it finishes per trainer step, and the staleness it yields.

**What verl does.** In verl's separate-async trainer the rollout engine and the trainer run on
their own GPUs; the engine keeps generating with the weights it holds, finished groups queue up,
and the trainer takes the oldest ones. The engine may run at most ``staleness_threshold`` weight
versions ahead (beyond that it pauses, and older groups are dropped). How far ahead it actually
is varies from step to step: generation time follows the response lengths (a long tail), the
training step's time follows the batch's token count, and the engine pauses at the threshold or
the trainer waits for data at the other end. So trained groups carry a *distribution* of
staleness from 0 to the threshold, not a constant.

**The model of it here.** Per trainer step the sampler finishes ``X x speed x prompts_per_step``
groups (:func:`throughput_factor`), where ``X`` is lognormal with mean 1 and coefficient of
variation ``backend.sampler.speed_jitter`` (in [0, 10], checked by ``runners.config.schema``), drawn from
its own seeded stream (the run's other random streams are untouched, and a resumed run replays it
from the checkpoint). The production
gate and the wait are the backend's (``EmbeddedRun.next_batch``): the sampler stops when the buffer
holds ``run_ahead_batches + 1`` batches (the threshold), and the trainer waits, while the sampler
tops the buffer up with the current weights, when fewer than a batch remain (staleness 0). With
``speed`` near 1 the buffer's fill does a bounded random walk between the two, so the staleness of
trained groups spreads over 0 .. ``run_ahead_batches``; a larger ``speed`` pushes it towards the
threshold. The shape of the spread is a modelling choice, not fitted to a verl run.

Measured on the default (``speed 1.05``, ``speed_jitter 1.5``, ``run_ahead_batches 4``, seed 42,
150 steps; pinned in ``tests/test_staleness.py``): fractions of trained groups at staleness 0..4 of
0.35 / 0.13 / 0.11 / 0.12 / 0.30, mean 1.9. The walk is slow, so one run's histogram depends on its
seed (mean 0.8-2.2 over seeds 1-5); the schedule depends only on the seed, never on the policy, so
the arms of one seed see the same staleness sequence.

**The worst case** (``scenario=stale_worst``; what the default was, docs/embedded_default.md): ``speed_jitter 0`` and
``speed 1.25``: the buffer fills within 20 steps and stays full, and from then on every group is
trained exactly ``run_ahead_batches`` versions after it was produced.
"""

from __future__ import annotations

import math

import torch

#: metric name prefix of the per-bucket staleness fractions (verl's name for the mean/max)
STALENESS_PREFIX = "training/off_policy/trajectory_staleness"


def throughput_factor(jitter: float, generator: torch.Generator) -> float:
    """One step's throughput relative to the mean: lognormal, mean 1, coefficient of variation ``jitter``.

    ``jitter == 0`` returns exactly 1.0 and draws nothing (the constant schedule).
    """
    if jitter == 0:
        return 1.0
    sigma2 = math.log1p(jitter * jitter)
    z = float(torch.randn((), generator=generator, dtype=torch.float64))
    return math.exp(math.sqrt(sigma2) * z - sigma2 / 2)


def staleness_histogram(staleness: torch.Tensor, max_staleness: int) -> dict[str, float]:
    """Fraction of the batch's groups at each staleness 0..max_staleness: ``<prefix>/frac_<k>``.

    ``staleness`` holds one value per trained group (integers); a value outside 0..max_staleness
    is a scheduling bug and raises.
    """
    values = staleness.round().long()
    if values.numel() == 0:
        raise ValueError("staleness_histogram needs at least one group")
    if int(values.min()) < 0 or int(values.max()) > max_staleness:
        raise ValueError(f"staleness {values.tolist()} outside 0..{max_staleness}")
    counts = torch.bincount(values, minlength=max_staleness + 1)
    return {f"{STALENESS_PREFIX}/frac_{k}": float(c) / values.numel() for k, c in enumerate(counts.tolist())}
