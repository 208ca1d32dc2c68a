"""verl 0.9.1's vLLM replica on vLLM's CPU build: the project's head-capturing server with the CPU weight loader.

Once its engine is up the server unlinks the engine's shared-memory segments (:func:`unlink_engine_segments`),
so none outlives the run, however it ends; after every weight sync it appends the load to the rollout's
sync log (:mod:`runners.verl_side.platform.rehearsal.sync_log`), as the stand-in does.

:class:`CpuVLLMServer` is :class:`runners.verl_side.head.vllm_server.HeadVLLMServer` (verl's ``vLLMHttpServer``
that returns the SC head where a request asks for it and is plain verl otherwise) whose worker extension,
verl's slot ``_get_worker_extension_cls``, is :data:`runners.verl_side.platform.rehearsal.vllm_cpu.worker_extension.EXTENSION`.
:class:`CpuVLLMReplica` is verl's ``vLLMReplica`` with that server class; the CPU platform registers it
under verl's rollout name ``vllm`` when the rehearsal's rollout is vLLM (``backend.rehearsal_rollout=vllm``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import ray

from runners.verl_side.head.vllm_server import HeadVLLMReplica, HeadVLLMServer
from runners.verl_side.platform.rehearsal.sync_log import append_sync
from runners.verl_side.platform.rehearsal.vllm_cpu.segments import unlink_engine_segments
from runners.verl_side.platform.rehearsal.vllm_cpu.worker_extension import EXTENSION


class CpuVLLMServer(HeadVLLMServer):
    """The head-capturing vLLM server with the worker extension that loads weights on a CPU."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if folder := os.environ.get("VLLM_RPC_BASE_PATH"):  # vLLM binds its sockets there but does not create it
            Path(folder).mkdir(parents=True, exist_ok=True)
        super().__init__(*args, **kwargs)

    async def run_server(self, args: Any) -> None:
        await super().run_server(args)
        unlink_engine_segments(os.getpid())

    def _get_worker_extension_cls(self) -> str:
        return EXTENSION

    async def set_global_steps(self, global_steps: int) -> None:
        """verl sets the weight version right after each sync: log the sync with the digest of what the
        engine's workers loaded (:mod:`runners.verl_side.platform.rehearsal.sync_log`; one worker per replica here)."""
        await super().set_global_steps(global_steps)
        digests = set(await self.engine.collective_rpc("last_load_digest"))
        if len(digests) != 1 or None in digests:
            raise RuntimeError(f"vLLM's workers report loaded weights {sorted(map(str, digests))} after a sync")
        append_sync(self.replica_rank, global_steps, digests.pop())


class CpuVLLMReplica(HeadVLLMReplica):
    """verl's vLLM replica with :class:`CpuVLLMServer` as its server class."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.server_class = ray.remote(CpuVLLMServer)
