"""The seam: the project's score-centering correction in the score-centering verl's logits-processor slot.

How verl computes the correction and what the project replaces: docs/verl_reference.md, "Score centering:
where the project's correction plugs in". :func:`install` puts :func:`project_logits_processor` in place of
``verl.trainer.ppo.score_centering.score_centering_logits_processor`` (looked up by name at call time), so the
``sc_correction`` the registered loss receives is the project's C (``ablations.score_centering``). It runs at
``import verl`` in every process of an SC arm (:mod:`runners.verl_side.backend.sc_hook`) and raises
:class:`~runners.verl_side.revisions.installed.ScoreCenteringUnsupported` where the seam is not what it verifies: an SC
arm never trains silently with verl's correction. Nothing from verl is imported at import time, so this module is
importable on verl 0.9.1 (where :func:`install` raises the clear error).
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

from runners.verl_side.head import SEQUENCE_IDS, SEQUENCE_LOG_PROBS
from runners.verl_side.head.correction import slot_correction
from runners.verl_side.revisions import installed as verl_installed
from runners.verl_side.revisions import newer_keys, releases

#: Attribute set on the functions this module installs (makes install() idempotent and testable).
MARK = "_sc_ablations_seam"


def project_logits_processor(student_logits: torch.Tensor, data: Any, config: Any, data_format: str = "thd"
                             ) -> dict[str, torch.Tensor]:
    """verl's logits-processor slot, filled with the project's head gather and centering term
    (:func:`runners.verl_side.head.correction.slot_correction`).

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
    if data_format != "thd":
        raise NotImplementedError(f"score centering needs the packed (thd) layout, got data_format={data_format!r}")
    return slot_correction(student_logits, data[SEQUENCE_IDS].values(), data[SEQUENCE_LOG_PROBS].values(), config)


setattr(project_logits_processor, MARK, True)


def verify_seam(module: Any) -> None:
    """Raise unless ``module`` has the shape described in this module's docstring."""
    missing = [name for name in verl_installed.SEAM_NAMES if not hasattr(module, name)]
    if missing:
        raise verl_installed.ScoreCenteringUnsupported(f"{module.__name__} lacks {missing}: the score-centering seam of verl "
                                            f"{releases.REQUIRED_COMMIT_SHORT} changed; the project's correction cannot be installed")
    if "score_centering_logits_processor" not in getattr(getattr(module.score_centering_ppo_loss, "__code__", None),
                                                             "co_names", ()):
        raise verl_installed.ScoreCenteringUnsupported(f"{module.__name__}.score_centering_ppo_loss no longer calls "
                                            "score_centering_logits_processor by name: the seam changed; refusing to "
                                            "run an SC arm with verl's own correction")


def install(module: Any | None = None) -> None:
    """Install the project's correction at the seam (idempotent). See the module docstring.

    Without an argument, patches the installed verl's ``verl.trainer.ppo.score_centering``; tests
    pass a stand-in module instead.
    """
    if module is None:
        if verl_installed.head_carrier() is not verl_installed.VERL_CARRIES:
            raise verl_installed.ScoreCenteringUnsupported(
                f"the seam hook is for verl as head carrier (verl commit {releases.REQUIRED_COMMIT}, or later): the "
                f"installed verl has no {newer_keys.SEAM_MODULE}; the project carries its SC arms' head (runners.verl_side.head)")
        verl_installed.require("installing the project's score-centering correction")
        module = importlib.import_module(newer_keys.SEAM_MODULE)
    verify_seam(module)
    if not getattr(module.score_centering_logits_processor, MARK, False):
        module.score_centering_logits_processor = project_logits_processor


def installed(module: Any | None = None) -> bool:
    module = module or importlib.import_module(newer_keys.SEAM_MODULE)
    return bool(getattr(module.score_centering_logits_processor, MARK, False))
