"""The rollout's sync log: one JSON line per weight load of a rollout replica, whichever engine it is.

``$SC_ABLATIONS_CPU_STATE_DIR/rollout_syncs.jsonl`` (:data:`runners.verl_side.platform.rehearsal.SYNC_LOG`) gets
``{"replica", "global_steps", "weights", "time"}`` at every load: the replica's rank, the weight version
verl tagged it with, and :func:`weights_digest` of the tensors loaded. It is the record that the sampler
follows the trainer (the stand-in writes it as it loads; vLLM's CPU server once verl has set the version
after a sync, with the digest its worker computed of what it loaded).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping

import torch

from runners.verl_side.platform.rehearsal import SYNC_LOG, state_dir


def weights_digest(state: Mapping[str, torch.Tensor]) -> str:
    """sha256 (16 hex digits) over the names in sorted order and each tensor's float32 bytes."""
    digest = hashlib.sha256()
    for name in sorted(state):
        digest.update(name.encode())
        digest.update(state[name].detach().to(torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def append_sync(replica: int, global_steps: int | None, weights: str) -> None:
    """Append one load to the attempt's sync log."""
    record = {"replica": replica, "global_steps": global_steps, "weights": weights, "time": time.time()}
    folder = state_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / SYNC_LOG, "a") as log:
        log.write(json.dumps(record) + "\n")
