"""verl 0.9.1's FSDP engine with the project's correction in its logits-processor slot.

verl calls ``prepare_model_outputs(..., logits_processor_func=loss_function)`` for every micro-batch
and, when the micro-batch's ``distillation_use_topk`` flag is set, calls that function with the
temperature-scaled packed logits (with gradient) and stores each per-token tensor it returns in the
model output; then it calls the same function as the loss. :class:`HeadEngine` (registered in verl's
``EngineRegistry`` for vendor :data:`~runners.verl_side.head.ENGINE_VENDOR`, selected with
``VERL_ENGINE_VENDOR``) sets the flag for micro-batches that carry the sampler's head and passes a
:class:`HeadCorrectedLoss` in place of the worker's loss: in the slot it computes the correction
(:func:`runners.verl_side.head.correction.slot_correction`), as the loss it hands the correction to the
arm (:func:`ablations.token_loss.supplying_correction`: verl's ``ppo_loss`` passes a fixed set of
keywords to the registered loss) and adds the head masses to the metrics.

The slot runs before verl's log-prob computation, whose flash-attn cross-entropy overwrites the
logits in its backward unless entropy is computed: the engine refuses such a micro-batch
(:func:`check_no_inplace_cross_entropy`), and the head gather's own backward check stands behind it.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch
from verl.utils import tensordict_utils as tu
from verl.utils.metric import AggregationType, Metric
from verl.workers.engine.base import EngineRegistry
from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead
from verl.workers.utils.padding import no_padding_2_padding

from ablations.token_loss import supplying_correction
from runners.verl_side.head import ENGINE_VENDOR, SEQUENCE_IDS, SEQUENCE_LOG_PROBS
from runners.verl_side.head.correction import slot_correction
from runners.verl_side.head.head_layout import packed_head

MASS_METRICS = {"sc_sampler_head_mass": "actor/sc_sampler_head_mass", "sc_train_head_mass": "actor/sc_train_head_mass"}


def actor_config_of(loss_function: Any) -> Any:
    """The ``ActorConfig`` the worker bound into its loss (``functools.partial(ppo_loss, config=...)``)."""
    config = loss_function.keywords.get("config") if isinstance(loss_function, functools.partial) else None
    if config is None:
        raise TypeError(f"the head engine needs the worker's loss as functools.partial(..., config=ActorConfig), got "
                        f"{loss_function!r}: verl's actor worker changed")
    return config


def flash_cross_entropy_active() -> bool:
    """Would verl's ``logprobs_from_logits`` run flash-attn's cross-entropy in this process?"""
    from verl.utils import torch_functional

    return bool(getattr(torch_functional, "FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE", False)) and \
        os.environ.get("VERL_DISABLE_FLASH_ATTN_CE", "0") != "1"


def check_no_inplace_cross_entropy(micro_batch: Any) -> None:
    """Refuse a micro-batch whose log-probs verl would compute with flash-attn's in-place backward."""
    if flash_cross_entropy_active() and not tu.get_non_tensor_data(micro_batch, "calculate_entropy", default=False):
        raise RuntimeError("an SC arm with actor calculate_entropy=false would run flash-attn's cross-entropy with "
                           "inplace_backward=True, which overwrites the logits the correction's backward reads: set "
                           "backend.actor.calculate_entropy=true (or VERL_DISABLE_FLASH_ATTN_CE=1)")


class HeadCorrectedLoss:
    """The worker's loss in both of verl's roles: the logits processor (the correction) and the loss."""

    def __init__(self, loss_function: Any) -> None:
        self.loss_function = loss_function
        self.config = actor_config_of(loss_function)

    def __call__(self, student_logits: torch.Tensor | None = None, data: Any = None, model_output: Any = None,
                 dp_group: Any = None):
        if student_logits is not None:  # the logits-processor role
            ids, log_probs = packed_head(data[SEQUENCE_IDS], data[SEQUENCE_LOG_PROBS], data["input_ids"],
                                         data["response_mask"])
            return slot_correction(student_logits, ids, log_probs, self.config)
        correction = no_padding_2_padding(model_output["sc_correction"], data)
        with supplying_correction(correction):
            loss, metrics = self.loss_function(model_output=model_output, data=data, dp_group=dp_group)
        mask = data.select("response_mask").to_padded_tensor()["response_mask"].bool()
        for field, name in MASS_METRICS.items():
            values = no_padding_2_padding(model_output[field], data).detach()
            mean = torch.where(mask, values, 0.0).sum() / mask.sum().clamp_min(1)
            metrics[name] = Metric(value=float(mean), aggregation=AggregationType.MEAN)
        return loss, metrics


@EngineRegistry.register(model_type="language_model", backend=["fsdp", "fsdp2"], device=["cuda", "npu"],
                         vendor=ENGINE_VENDOR)
class HeadEngine(FSDPEngineWithLMHead):
    """verl's FSDP LM engine; micro-batches with the sampler's head get the correction."""

    def forward_step(self, micro_batch, loss_function, forward_only):
        if loss_function is None or SEQUENCE_IDS not in micro_batch.keys():
            return super().forward_step(micro_batch, loss_function, forward_only)
        check_no_inplace_cross_entropy(micro_batch)
        tu.assign_non_tensor(micro_batch, distillation_use_topk=True)  # verl's flag that opens the slot
        return super().forward_step(micro_batch, HeadCorrectedLoss(loss_function), forward_only)
