"""Checkpoint engine ``cpu_file``: trainer -> rollout weight sync through one file per sync.

verl's ``CheckpointEngineManager`` runs, at every sync, ``prepare`` on every worker,
``build_topology`` once, ``init_process_group`` on every worker, ``send_weights`` on the trainer
ranks together with ``receive_weights`` on the rollout workers, then ``finalize`` on every worker.
Here the trainer's rank 0 (the master) names a fresh file in ``prepare``, gathers the full state
dict while every trainer rank iterates the weights (the iteration is collective under FSDP), and
writes it atomically; each rollout worker waits for the file and yields its tensors; the master
deletes the file in ``finalize``, after every receiver has read it. The folder is
``$SC_ABLATIONS_CPU_STATE_DIR`` (the launcher's ``<attempt>/cpu``).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import torch
from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry
from verl.workers.rollout.utils import ensure_async_iterator

from runners.verl_side.platform.rehearsal import WEIGHT_SYNC_BACKEND, state_dir

#: How long a rollout worker waits for the trainer's file before giving up.
RECEIVE_TIMEOUT_S = 600.0


@CheckpointEngineRegistry.register(WEIGHT_SYNC_BACKEND)
class CpuFileCheckpointEngine(CheckpointEngine):
    """One ``torch.save`` file per sync, written by trainer rank 0 and read by every rollout worker."""

    def __init__(self, bucket_size: int, is_master: bool = False, **kwargs: Any) -> None:
        self.is_master = is_master
        self.rank: int | None = None
        self.path: Path | None = None

    def prepare(self) -> dict[str, Any]:
        if self.is_master:
            return {"path": str(state_dir() / f"weights-{os.getpid()}-{uuid.uuid4().hex}.pt")}
        return {}

    @classmethod
    def build_topology(cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list[dict]):
        path = next(m["path"] for m in metadata if m.get("path"))
        actor = {"rank": list(range(actor_wg_world_size)), "path": [path] * actor_wg_world_size}
        rollout = {"rank": [actor_wg_world_size + i for i in range(rollout_world_size)],
                   "path": [path] * rollout_world_size}
        return actor, rollout

    def init_process_group(self, rank: int, path: str) -> None:
        self.rank, self.path = rank, Path(path)

    def finalize(self) -> None:
        if self.rank == 0 and self.path is not None:
            self.path.unlink(missing_ok=True)

    async def send_weights(self, weights, global_steps: int | None = None) -> dict:
        state = {}
        async for name, tensor in ensure_async_iterator(weights):  # every rank iterates: the gathers are collective
            if self.rank == 0:
                state[name] = tensor.detach().to("cpu", copy=True)
        if self.rank == 0:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial = self.path.with_suffix(".partial")
            torch.save(state, partial)
            os.replace(partial, self.path)
        return {}

    async def receive_weights(self, global_steps: int | None = None) -> AsyncGenerator[tuple[str, torch.Tensor], None]:
        deadline = time.monotonic() + RECEIVE_TIMEOUT_S
        while not self.path.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"checkpoint engine {WEIGHT_SYNC_BACKEND!r}: no weights at {self.path} "
                                   f"after {RECEIVE_TIMEOUT_S:.0f} s")
            await asyncio.sleep(0.05)
        for name, tensor in torch.load(self.path, weights_only=True).items():
            yield name, tensor
