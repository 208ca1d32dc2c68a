"""The correction in verl's logits-processor slot: the project's head gather and centering term on the
trainer's packed logits, used by both head carriers (the score-centering verl's seam and the project's engine).

Imports verl only inside :func:`sequence_parallel_slice` (Ulysses sequence parallelism).
"""

from __future__ import annotations

from typing import Any

import torch

from ablations.arms import centering_rule
from ablations.losses import config_value
from runners.verl_side.head.head_layout import dummy_head
from runners.verl_side.revisions import config_facts


def is_rule_from(config: Any) -> tuple[float | None, tuple[float, float] | None]:
    """The correction's IS rule ``(cap, band)`` (``ablations.arms.ArmSpec.centering_weight``): ``(None, None)``
    without ``rollout_is``, else ``rollout_is_threshold`` by verl's parser (a cap, or IcePop's band).

    ``config`` is verl's ``ActorConfig``; the keys are ``policy_loss.rollout_correction.*``, the
    same the arm's loss reads, so the sampled-token weight and the correction agree.
    """
    rc = config_value(config_value(config, "policy_loss"), "rollout_correction")
    return centering_rule(config_value(rc, "rollout_is"),
                          config_value(rc, "rollout_is_threshold", config_facts.DEFAULT_IS_THRESHOLD))


def sequence_parallel_slice(ids: torch.Tensor, log_probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's rows of the packed head under Ulysses sequence parallelism (identity without it).

    The engine pads the packed sequence to a multiple of the SP size before slicing the logits; the
    head is padded the same way, with the dummy head (finite, mass 1, masked later).
    """
    from verl.utils.ulysses import get_ulysses_sequence_parallel_world_size, slice_input_tensor

    sp = get_ulysses_sequence_parallel_world_size()
    if sp <= 1:
        return ids, log_probs
    pad = (-ids.shape[0]) % sp
    if pad:
        pad_ids, pad_lp = dummy_head(pad, ids.shape[1], ids.dtype, ids.device)
        ids, log_probs = torch.cat([ids, pad_ids]), torch.cat([log_probs, pad_lp.to(log_probs.dtype)])
    ids = slice_input_tensor(ids.unsqueeze(0), dim=1, padding=False).squeeze(0)
    log_probs = slice_input_tensor(log_probs.unsqueeze(0), dim=1, padding=False).squeeze(0)
    return ids, log_probs


def slot_correction(student_logits: torch.Tensor, ids: torch.Tensor, sampler_log_probs: torch.Tensor, config: Any
                    ) -> dict[str, torch.Tensor]:
    """The per-token outputs of verl's logits-processor slot for an SC arm.

    Args:
        student_logits: ``(1, nnz, V)`` temperature-scaled trainer logits of the packed micro-batch
            (this rank's share under sequence parallelism), with gradient.
        ids, sampler_log_probs: ``(nnz_total, k)`` the sampler's head per packed position.
        config: verl's ``ActorConfig`` (``policy_loss.rollout_correction`` picks SC or SC+TIS).

    Returns:
        ``sc_correction`` (with gradient to the logits), ``sc_sampler_head_mass``,
        ``sc_train_head_mass`` (detached), each ``(1, nnz)``.
    """
    from ablations.score_centering import centering_term, head_log_probs_with_tail

    ids, sampler = sequence_parallel_slice(ids, sampler_log_probs)
    logits = student_logits.squeeze(0)
    if ids.shape[0] != logits.shape[0] or sampler.shape != ids.shape:
        raise ValueError(f"sampler head {tuple(ids.shape)} / {tuple(sampler.shape)} does not line up with the "
                         f"trainer logits {tuple(logits.shape)}")
    head, log_tail = head_log_probs_with_tail(logits, ids)
    cap, band = is_rule_from(config)
    correction, sampler_mass, train_mass = centering_term(head, sampler, is_cap=cap, train_log_tail=log_tail,
                                                          is_band=band)
    return {"sc_correction": correction.unsqueeze(0), "sc_sampler_head_mass": sampler_mass.detach().unsqueeze(0),
            "sc_train_head_mass": train_mass.detach().unsqueeze(0)}
