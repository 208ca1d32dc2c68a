"""The seam: the project's score-centering correction in verl's logits-processor slot (verl 8718ca30).

How verl computes the correction, read from its files, and what the project replaces: docs/verl_reference.md,
"Score centering: where the project's correction plugs in". :func:`install` replaces
``verl.trainer.ppo.score_centering.score_centering_logits_processor``, which verl's
``score_centering_ppo_loss`` looks up by name at call time, with :func:`project_logits_processor`:
the ``sc_correction`` verl passes to the registered policy loss is then the project's C
(``ablations.score_centering``), and verl's own gather and correction never run. It runs at
``import verl`` in every process of an SC arm (:mod:`runners.verl_backend.sc_hook`). Before patching
it verifies the seam and raises :class:`~runners.verl_backend.revisions.ScoreCenteringUnsupported`
otherwise: an SC arm never trains silently with verl's correction. Nothing from verl is imported at
import time, so this module is importable on verl 0.9.1 (where :func:`install` raises the clear error).
"""

from __future__ import annotations

import importlib
import math
from typing import Any

import torch

from ablations.losses import config_value, parse_tis_cap
from runners.verl_backend import revisions as rev

#: Attribute set on the functions this module installs (makes install() idempotent and testable).
MARK = "_sc_ablations_seam"


def is_cap_from(config: Any) -> float | None:
    """The TIS cap of the correction: ``rollout_is_threshold`` if ``rollout_is == "token"``, else None.

    ``config`` is verl's ``ActorConfig``; the keys are ``policy_loss.rollout_correction.*``, the
    same two the project's TIS losses read, so the sampled-token weight and the correction agree.
    """
    rc = config_value(config_value(config, "policy_loss"), "rollout_correction")
    rollout_is = config_value(rc, "rollout_is")
    if rollout_is is None:
        return None
    if rollout_is != "token":
        raise ValueError(f"score centering composes with token-level IS only; got rollout_is={rollout_is!r}")
    return parse_tis_cap(config_value(rc, "rollout_is_threshold", rev.DEFAULT_IS_THRESHOLD))


def _dummy_head(rows: int, k: int, like_ids: torch.Tensor, like_lp: torch.Tensor):
    ids = torch.arange(k, dtype=like_ids.dtype, device=like_ids.device).expand(rows, k)
    lp = torch.full((rows, k), -math.log(k), dtype=like_lp.dtype, device=like_lp.device)
    return ids, lp


def _sequence_parallel_slice(ids: torch.Tensor, log_probs: torch.Tensor):
    """This rank's rows of the packed head under Ulysses sequence parallelism (identity without it).

    The engine pads the packed sequence to a multiple of the SP size before slicing the logits; the
    head is padded the same way, with the uniform dummy head (finite, mass 1, masked later).
    """
    from verl.utils.ulysses import get_ulysses_sequence_parallel_world_size, slice_input_tensor

    sp = get_ulysses_sequence_parallel_world_size()
    if sp <= 1:
        return ids, log_probs
    pad = (-ids.shape[0]) % sp
    if pad:
        pad_ids, pad_lp = _dummy_head(pad, ids.shape[1], ids, log_probs)
        ids, log_probs = torch.cat([ids, pad_ids]), torch.cat([log_probs, pad_lp])
    ids = slice_input_tensor(ids.unsqueeze(0), dim=1, padding=False).squeeze(0)
    log_probs = slice_input_tensor(log_probs.unsqueeze(0), dim=1, padding=False).squeeze(0)
    return ids, log_probs


def project_logits_processor(student_logits: torch.Tensor, data: Any, config: Any, data_format: str = "thd"
                             ) -> dict[str, torch.Tensor]:
    """verl's logits-processor slot, filled with the project's head gather and centering term.

    Args:
        student_logits: ``(1, nnz, V)`` temperature-scaled trainer logits of the packed micro-batch
            (this rank's share under sequence parallelism).
        data: the micro-batch ``TensorDict`` with nested ``rollout_topk_ids`` / ``rollout_topk_log_probs``
            of shape ``[B, j, k]`` (one head per sequence position, dummy outside the response).
        config: verl's ``ActorConfig`` (``policy_loss.rollout_correction`` picks SC or SC+TIS).
        data_format: verl's layout name; only the packed ``"thd"`` layout exists in this slot.

    Returns:
        ``sc_correction`` (with gradient to the logits), ``sc_sampler_head_mass``,
        ``sc_train_head_mass`` (detached), each ``(1, nnz)``.
    """
    from ablations.score_centering import centering_term, head_log_probs_with_tail

    if data_format != "thd":
        raise NotImplementedError(f"score centering needs the packed (thd) layout, got data_format={data_format!r}")
    ids, sampler = _sequence_parallel_slice(data["rollout_topk_ids"].values(), data["rollout_topk_log_probs"].values())
    logits = student_logits.squeeze(0)
    if ids.shape[0] != logits.shape[0] or sampler.shape != ids.shape:
        raise ValueError(f"sampler head {tuple(ids.shape)} / {tuple(sampler.shape)} does not line up with the "
                         f"trainer logits {tuple(logits.shape)}")
    head, log_tail = head_log_probs_with_tail(logits, ids)
    correction, sampler_mass, train_mass = centering_term(head, sampler, is_cap=is_cap_from(config), train_log_tail=log_tail)
    return {"sc_correction": correction.unsqueeze(0), "sc_sampler_head_mass": sampler_mass.detach().unsqueeze(0),
            "sc_train_head_mass": train_mass.detach().unsqueeze(0)}


setattr(project_logits_processor, MARK, True)


def verify_seam(module: Any) -> None:
    """Raise unless ``module`` has the shape described in this module's docstring."""
    missing = [name for name in rev.SEAM_NAMES if not hasattr(module, name)]
    if missing:
        raise rev.ScoreCenteringUnsupported(f"{module.__name__} lacks {missing}: the score-centering seam of verl "
                                            f"{rev.REQUIRED_COMMIT_SHORT} changed; the project's correction cannot be installed")
    if "score_centering_logits_processor" not in getattr(getattr(module.score_centering_ppo_loss, "__code__", None),
                                                             "co_names", ()):
        raise rev.ScoreCenteringUnsupported(f"{module.__name__}.score_centering_ppo_loss no longer calls "
                                            "score_centering_logits_processor by name: the seam changed; refusing to "
                                            "run an SC arm with verl's own correction")


def install(module: Any | None = None) -> None:
    """Install the project's correction at the seam (idempotent). See the module docstring.

    Without an argument, patches the installed verl's ``verl.trainer.ppo.score_centering``; tests
    pass a stand-in module instead.
    """
    if module is None:
        rev.require("installing the project's score-centering correction")
        module = importlib.import_module(rev.SEAM_MODULE)
    verify_seam(module)
    if not getattr(module.score_centering_logits_processor, MARK, False):
        module.score_centering_logits_processor = project_logits_processor


def installed(module: Any | None = None) -> bool:
    module = module or importlib.import_module(rev.SEAM_MODULE)
    return bool(getattr(module.score_centering_logits_processor, MARK, False))
