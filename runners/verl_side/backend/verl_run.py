"""One verl run, resolved once from its config at the backend's entry (:func:`runners.verl_side.backend.run`,
:func:`runners.verl_side.backend.checks.validate`) and passed down, instead of the config re-read in each module.

What it resolves: the arm (:class:`ablations.arms.ArmSpec`), the platform the launch runs on
(:func:`runners.verl_side.platform.platform_for`), for an SC arm the *head carrier* (who carries the sampler's head
to the trainer on the installed verl: :func:`runners.verl_side.revisions.installed.head_carrier`) and the *head
transport* (how the head leaves vLLM: ``backend.rollout_engine.head_transport``), and the placement. Every other
value is read from :attr:`VerlRun.cfg` where it is used.
"""

from __future__ import annotations

import dataclasses

from omegaconf import DictConfig

from ablations.arms import ArmSpec
from runners.verl_side.platform import platform_for
from runners.verl_side.platform.base import Platform
from runners.verl_side.revisions import installed


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where the trainer and the rollout run (``backend.placement``)."""

    nnodes: int
    trainer_gpus_per_node: int
    rollout_nnodes: int
    rollout_gpus_per_node: int
    rollout_tensor_parallel: int
    shared_gpu: bool  # the trainer and vLLM on one GPU

    @classmethod
    def of(cls, cfg: DictConfig) -> Placement:
        p = cfg.backend.placement
        return cls(int(p.nnodes), int(p.trainer_gpus_per_node), int(p.rollout_nnodes), int(p.rollout_gpus_per_node),
                   int(p.rollout_tensor_parallel), bool(p.shared_gpu))

    @property
    def trainer_gpus(self) -> int:
        return self.nnodes * self.trainer_gpus_per_node


@dataclasses.dataclass(frozen=True, eq=False)
class VerlRun:
    """A verl launch of one arm, resolved (see the module docstring)."""

    cfg: DictConfig
    arm: ArmSpec
    platform: Platform
    head_carrier: installed.HeadCarrier | None  # None for an arm without score centering
    head_transport: str
    log_prob_transport: str
    placement: Placement

    @classmethod
    def of(cls, cfg: DictConfig) -> VerlRun:
        arm = ArmSpec.of(cfg.method)
        return cls(cfg=cfg, arm=arm, platform=platform_for(cfg),
                   head_carrier=installed.head_carrier() if arm.sc else None,
                   head_transport=str(cfg.backend.rollout_engine.head_transport),
                   log_prob_transport=str(cfg.backend.rollout_engine.log_prob_transport), placement=Placement.of(cfg))

    @property
    def project_carries_head(self) -> bool:
        """An SC arm whose head the project carries through verl's slots (:mod:`runners.verl_side.head`)."""
        return self.head_carrier is installed.PROJECT_CARRIES

    @property
    def log_probs_by_processor(self) -> bool:
        """Every arm's sampled log-prob by the project's logits processor, none asked of vLLM
        (``backend.rollout_engine.log_prob_transport=logits_processor``; :mod:`runners.verl_side.logits_processor.sampled_file`)."""
        return self.log_prob_transport == "logits_processor"

    @property
    def loads_head_processor(self) -> bool:
        """vLLM runs the project's logits processor: for the SC head's files or the sampled log-probs."""
        return self.log_probs_by_processor or (self.project_carries_head and self.head_transport == "logits_processor")

    @property
    def verl_carries_head(self) -> bool:
        """An SC arm whose head verl itself carries (keys of newer verl and the seam hook)."""
        return self.head_carrier is installed.VERL_CARRIES
