"""Imported at ``import verl`` in every process of an SC arm on the project as head carrier
(``VERL_USE_EXTERNAL_MODULES``, set by the launcher): registers the head-reading FSDP engine in verl's
``EngineRegistry`` and, off the CPU platform, the head-capturing vLLM replica under verl's rollout
name ``vllm`` (lazily: vLLM is imported only where verl builds a replica). The CPU rehearsal keeps its
own rollout (``runners.verl_side.platform.rehearsal``), which answers the same head request.
"""

from __future__ import annotations

from verl.workers.rollout.replica import RolloutReplicaRegistry

from runners.verl_side.head import cpu_platform_selected as cpu_platform
from runners.verl_side.head import engine  # noqa: F401 - registers HeadEngine

VLLM_ROLLOUT = "vllm"


def head_vllm_replica() -> type:
    """verl's vLLM replica with the head-capturing server (:class:`~runners.verl_side.head.vllm_server.HeadVLLMReplica`),
    imported when verl first asks for it."""
    from runners.verl_side.head.vllm_server import HeadVLLMReplica

    return HeadVLLMReplica


if not cpu_platform():
    RolloutReplicaRegistry.register(VLLM_ROLLOUT, head_vllm_replica)
