"""What the score-centering verl (:data:`runners.verl_side.revisions.releases.SCORE_CENTERING`) adds: the config keys
of score centering and the module of its logits-processor slot, into which the project plugs its correction (:mod:`runners.verl_side.backend.sc_seam`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from runners.verl_side.revisions.config_facts import ACTOR_RC, DRIVER_RC, ROLLOUT
from runners.verl_side.revisions.lookup import declares
from runners.verl_side.revisions.releases import REQUIRED_COMMIT

#: The slot's module and the names in it the project relies on (read from PR #8010's files).
SEAM_MODULE = "verl.trainer.ppo.score_centering"
SEAM_NAMES = ("score_centering_ppo_loss", "score_centering_logits_processor")


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@dataclasses.dataclass(frozen=True)
class NewerKey:
    key: str  # override key, without a leading "+"
    declared_in: tuple[str, str, str]  # (module, dataclass, field) of the revision that has it
    allowed: str  # allowed values, in words (docs table)
    meaning: str
    value_ok: Callable[[Any], bool]
    since: str = REQUIRED_COMMIT


_RC_CLASS = ("verl.trainer.config.algorithm", "RolloutCorrectionConfig", "score_centering")
NEWER_KEYS: tuple[NewerKey, ...] = (
    NewerKey(f"{ROLLOUT}.topk_log_probs", ("verl.workers.config.rollout", "RolloutConfig", "topk_log_probs"),
             "integer >= 1 (= method.top_k); needs rollout.name=vllm, calculate_log_probs=True, "
             "top_p=1, top_k=-1, logprobs_mode=processed_logprobs",
             "vLLM returns the sampler's top-k log-probs per generated token (the head H)", _positive_int),
    NewerKey(f"{DRIVER_RC}.score_centering", _RC_CLASS,
             "true; needs bypass_mode=True, loss_type=reinforce, rollout_is in {null, token}, "
             "rollout_is_batch_normalize=False, and the same flag on the actor side",
             "the driver carries the sampler head to the trainer", lambda v: isinstance(v, bool)),
    NewerKey(f"{ACTOR_RC}.score_centering", _RC_CLASS,
             "true, equal to the driver flag; actor and driver rollout_correction agree on "
             "bypass_mode, loss_type, rollout_is, rollout_is_threshold; loss_mode takes sc_correction",
             "the FSDP engine computes the correction from the trainer logits and passes "
             "sc_correction= to the policy loss", lambda v: isinstance(v, bool)),
)
BY_KEY = {entry.key: entry for entry in NEWER_KEYS}
TOPK_KEY, DRIVER_SC_KEY, ACTOR_SC_KEY = BY_KEY


def markdown_table() -> str:
    """:data:`NEWER_KEYS` as printed in docs/verl_reference.md."""
    lines = ["| key | since verl commit | allowed | what it does |", "|---|---|---|---|"]
    lines += [f"| `{e.key}` | {e.since[:8]} | {e.allowed} | {e.meaning} |" for e in NEWER_KEYS]
    return "\n".join(lines)


def known(entry: NewerKey) -> bool:
    """Does the installed verl have this newer key?"""
    return declares(*entry.declared_in)
