"""The ``verl.plugins`` entry point of the CPU platform: registers it only when it is selected.

verl imports every ``verl.plugins`` entry point at ``import verl`` in every process (and swallows
an entry point's import error); the rehearsal also names this module in
``VERL_USE_EXTERNAL_MODULES``, where a failed import is loud. With ``VERL_PLATFORM`` anything but
``cpu`` importing this module changes nothing.
"""

from __future__ import annotations

import os

from runners.verl_side.head import cpu_platform_selected
from runners.verl_side.platform.rehearsal import HEAD_ROLLOUT_NAME, ROLLOUT_ENV, VLLM_ROLLOUT


def selected() -> bool:
    """Is this platform selected (``VERL_PLATFORM=cpu``)?"""
    return cpu_platform_selected()


def vllm_cpu_replica() -> type:
    """verl's vLLM replica on vLLM's CPU build (:class:`~runners.verl_side.platform.rehearsal.vllm_cpu.server.CpuVLLMReplica`),
    imported when verl first asks for it: vLLM is imported only by a rehearsal whose rollout is vLLM."""
    from runners.verl_side.platform.rehearsal.vllm_cpu.server import CpuVLLMReplica

    return CpuVLLMReplica


if selected():
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    from runners.verl_side.platform.rehearsal import rollout, verl_device, weight_sync  # noqa: F401 - registration on import

    if os.environ.get(ROLLOUT_ENV) == VLLM_ROLLOUT:  # vLLM's CPU build instead of the stand-in, imported lazily
        RolloutReplicaRegistry.register(HEAD_ROLLOUT_NAME, vllm_cpu_replica)
