"""Shared fixtures. Tests are not a package (verl's wheel installs a top-level ``tests``)."""

from __future__ import annotations

import os

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Worker processes share the cores: one thread each by default (a torch process that takes every core
    # slows the others several-fold); tests that set their own thread count still do.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")


@pytest.fixture
def actor_config():
    """Factory for verl's ``ActorConfig`` in bypass-mode REINFORCE, as the harness configures it."""
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.workers.config.actor import ActorConfig, PolicyLossConfig

    def make(loss_mode: str = "ablation_pg", rollout_is: str | None = None, threshold: float | str = 2.0):
        correction = RolloutCorrectionConfig(
            rollout_is=rollout_is, rollout_is_threshold=threshold, loss_type="reinforce", bypass_mode=True
        )
        return ActorConfig(
            strategy="fsdp",
            ppo_micro_batch_size_per_gpu=1,
            rollout_n=5,
            policy_loss=PolicyLossConfig(loss_mode=loss_mode, rollout_correction=correction),
        )

    return make
