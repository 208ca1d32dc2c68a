"""Where a verl launch runs, as one seam (:mod:`~runners.verl_side.platform.base`): a GPU
(:mod:`~runners.verl_side.platform.gpu`, which adds nothing) or the CPU rehearsal
(:mod:`~runners.verl_side.platform.rehearsal`, with vLLM's CPU build in its ``vllm_cpu``).

:func:`platform_for` is the one place that reads ``backend.platform``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from runners.config.config_error import ConfigError

if TYPE_CHECKING:
    from runners.verl_side.platform.base import Platform

#: The config key that selects the platform, and its default.
KEY = "backend.platform"
DEFAULT = "gpu"


def platform_for(cfg: DictConfig | Mapping[str, Any]) -> Platform:
    """The platform ``cfg`` launches on (``backend.platform``: ``gpu`` or ``cpu``, the rehearsal); ``cfg`` may be
    a run's recorded config as nested dicts."""
    cfg = cfg if isinstance(cfg, DictConfig) else OmegaConf.create(dict(cfg))
    name = str(OmegaConf.select(cfg, KEY, default=DEFAULT))
    if name == DEFAULT:
        from runners.verl_side.platform.gpu import GpuPlatform

        return GpuPlatform(cfg)
    from runners.verl_side.platform.rehearsal.cpu_platform import RehearsalPlatform

    if name != RehearsalPlatform.name:  # the schema allows gpu and cpu only
        raise ConfigError(f"{KEY}={name} is not a platform: {DEFAULT} or {RehearsalPlatform.name}")
    return RehearsalPlatform(cfg)
