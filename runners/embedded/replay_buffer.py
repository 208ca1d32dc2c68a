"""The replay buffer of the async miniature: finished prompt groups tagged with a weight version.

A miniature of verl's separate-async trainer: the sampler keeps generating with the weights it
has while the trainer trains, so groups wait in the buffer and are trained on later, by
weights some versions newer. The buffer is FIFO; a group produced by weight version ``v`` and
trained at trainer version ``t`` has staleness ``t - v``. Groups whose staleness would exceed
``max_staleness`` are dropped (evicted) before a batch is drawn — verl's
``max_off_policy_strategy=drop``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from runners.config.config_error import ConfigError
from runners.embedded.sampler import Rollout
from runners.tiny.arithmetic_task import Problem


@dataclass
class Group:
    """The n responses to one prompt, their rewards, and the weight version that produced them."""

    problem: Problem
    version: int
    rollout: Rollout
    scores: list[float]
    accs: list[int]


class ReplayBuffer:
    """FIFO of finished groups with staleness-based eviction."""

    def __init__(self, max_staleness: int):
        if max_staleness < 1:
            raise ConfigError(f"rollout.max_staleness must be >= 1, got {max_staleness}")
        self.max_staleness = max_staleness
        self.groups: deque[Group] = deque()

    def __len__(self) -> int:
        return len(self.groups)

    def push(self, groups: list[Group]) -> None:
        self.groups.extend(groups)

    def evict_stale(self, trainer_version: int) -> list[Group]:
        """Drop and return every group older than ``max_staleness`` versions."""
        kept, dropped = deque(), []
        for g in self.groups:
            (dropped if trainer_version - g.version > self.max_staleness else kept).append(g)
        self.groups = kept
        return dropped

    def pop(self, count: int) -> list[Group]:
        """The ``count`` oldest groups (FIFO)."""
        if count > len(self.groups):
            raise ValueError(f"buffer holds {len(self.groups)} groups, {count} requested")
        return [self.groups.popleft() for _ in range(count)]

    def state(self) -> list[Group]:
        return list(self.groups)

    def load(self, groups: list[Group]) -> None:
        self.groups = deque(groups)
