"""The disk a verl run fills: checkpoints, the dumps, the exported model (an estimate; docs/capacity.md).

verl 0.9.1's FSDP checkpoint (``runners/verl_side/checkpoints/store.py`` lists its files) holds, per save, for
``N`` parameters over all ranks together:

* ``model``: the fp32 master weights, ``4 N`` bytes (the sharded state dict of FSDP2's fp32 parameters);
* ``optimizer``: AdamW's two fp32 moments, ``8 N`` (the step counters are negligible);
* ``hf_model`` where it is listed: a bf16 copy, ``2 N``; ``extra`` (RNG and scheduler states) and the
  ``huggingface/`` folder (config and tokenizer, a few MB) are not counted.

The reference (``model, optimizer, extra``) is ``12 N`` per save: 48 GB for Qwen3-4B. verl saves every
``trainer.save_freq`` steps and at the last step; ``backend.actor.max_ckpt_to_keep`` keeps the newest
that many (null: all of them). The dumps are text: :data:`TEXT_BYTES_PER_TOKEN` bytes per generated or
prompt token (an assumption: JSON lines of decoded text), the train rollouts of every step
(``backend.dump_rollouts``) and every evaluation's samples. The exported model is bf16, ``2 N``. The
plan warns where an arm's total exceeds ``backend.capacity.disk_budget_bytes`` and names the fix.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from runners.config.model_shapes import ModelShape

#: Bytes per parameter of each checkpoint content (all ranks together).
CONTENT_BYTES_PER_PARAMETER = {"model": 4, "optimizer": 8, "hf_model": 2, "extra": 0}
#: Bytes of dumped JSON text per token (decoded text, about four characters a token, plus the JSON keys).
TEXT_BYTES_PER_TOKEN = 5
#: The arms of a sweep (PG, TIS, SC, SC+TIS), for the per-sweep total of one seed.
ARMS = 4


@dataclasses.dataclass(frozen=True)
class DiskInputs:
    """What of a launch decides its disk."""

    parameters: int
    checkpoint_contents: tuple[str, ...]
    total_steps: int
    save_freq: int  # <= 0: no checkpoints
    max_ckpt_to_keep: int | None  # None: every checkpoint is kept
    dump_rollouts: bool
    tokens_per_step: float  # prompts x n x (prompt + response), at the plan's mean lengths
    tokens_per_evaluation: float
    evaluations: int
    budget_bytes: float


def inputs_of(cfg: Any, shape: ModelShape) -> DiskInputs:
    """The disk inputs of a resolved verl-backend config (mean lengths: ``backend.capacity.time``)."""
    t, r = cfg.backend.capacity.time, cfg.rollout
    prompt = float(t.mean_prompt_fraction) * int(r.max_prompt_length)
    response = float(t.mean_response_fraction) * int(r.max_response_length)
    eval_response = float(t.eval_mean_response_fraction) * int(r.max_response_length)
    steps, test_freq = int(cfg.trainer.total_steps), int(cfg.trainer.test_freq)
    keep = cfg.backend.actor.max_ckpt_to_keep
    return DiskInputs(
        parameters=shape.parameters, checkpoint_contents=tuple(str(c) for c in cfg.backend.actor.checkpoint_contents),
        total_steps=steps, save_freq=int(cfg.trainer.save_freq), max_ckpt_to_keep=None if keep is None else int(keep),
        dump_rollouts=bool(cfg.backend.dump_rollouts),
        tokens_per_step=int(cfg.trainer.prompts_per_step) * int(cfg.trainer.n) * (prompt + response),
        tokens_per_evaluation=sum(int(s.size) for s in cfg.data.eval_sets) * int(cfg.eval.n) * (prompt + eval_response),
        evaluations=steps // test_freq + 1 if test_freq > 0 else 1, budget_bytes=float(cfg.backend.capacity.disk_budget_bytes))


def saves(total_steps: int, save_freq: int) -> int:
    """verl's saves: every ``save_freq`` steps and at the last step."""
    if save_freq <= 0 or total_steps <= 0:
        return 0
    return total_steps // save_freq + (1 if total_steps % save_freq else 0)


def estimate(d: DiskInputs) -> dict[str, Any]:
    """Bytes per checkpoint, how many are kept, the dumps, the export; per arm and per sweep of :data:`ARMS`
    arms; ``warning`` and ``fix`` where an arm exceeds the budget."""
    per_save = sum(CONTENT_BYTES_PER_PARAMETER.get(c, 0) for c in d.checkpoint_contents) * d.parameters
    n_saves = saves(d.total_steps, d.save_freq)
    kept = n_saves if d.max_ckpt_to_keep is None else min(n_saves, d.max_ckpt_to_keep)
    dumps = int(TEXT_BYTES_PER_TOKEN * ((d.tokens_per_step * d.total_steps if d.dump_rollouts else 0)
                                        + d.tokens_per_evaluation * d.evaluations))
    export = 2 * d.parameters
    per_arm = kept * per_save + dumps + export
    out: dict[str, Any] = {"checkpoint_bytes": per_save, "saves": n_saves, "kept": kept,
                           "checkpoints_bytes": kept * per_save, "dumps_bytes": dumps, "export_bytes": export,
                           "per_arm_bytes": per_arm, "per_sweep_bytes": ARMS * per_arm,
                           "budget_bytes": d.budget_bytes, "over_budget": per_arm > d.budget_bytes,
                           "warning": None, "fix": None}
    if per_arm > d.budget_bytes and per_save > 0:
        room = d.budget_bytes - dumps - export
        keep = max(int(math.floor(room / per_save)), 1)
        out["fix"] = {"key": "backend.actor.max_ckpt_to_keep", "value": keep}
        out["warning"] = (
            f"an arm writes {per_arm / 1e12:.2f} TB ({kept} checkpoints of {per_save / 1e9:.1f} GB, dumps "
            f"{dumps / 1e9:.1f} GB, the export {export / 1e9:.1f} GB), over backend.capacity.disk_budget_bytes="
            f"{d.budget_bytes:.3g}; {ARMS} arms {ARMS * per_arm / 1e12:.2f} TB. Fix: backend.actor.max_ckpt_to_keep="
            f"{keep} (verl's rotation keeps the newest {keep}: the best checkpoint may go), or prune as it runs "
            "keeping the best (python -m runners.verl_side.checkpoints retain RUN_DIR --keep-latest 2 --keep-best 1 "
            "--delete), or a larger trainer.save_freq")
    return out
