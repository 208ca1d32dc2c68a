"""What a score-centering arm needs of verl's config: where verl carries the head, what the score-centering
verl's validator and config classes require; where the project carries it, what :mod:`runners.verl_side.head` relies on; checked before any
compute (:mod:`runners.verl_side.backend.checks`) and on the composed config (:mod:`runners.verl_side.backend.dry_run`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from runners.run.peer_keys import text as as_text
from runners.verl_side.head import MANAGER_CLASS
from runners.verl_side.revisions.config_facts import BYPASS_REINFORCE, DRIVER_RC, ROLLOUT


@dataclasses.dataclass(frozen=True)
class Requirement:
    """``key`` must equal ``want`` (be one of them, for a tuple) in a score-centering arm's verl config."""

    key: str
    want: Any
    why: str
    project: str | None = None  # the project key that sets it (checked before any compute), if any
    absent: Any = None  # the value when the key is not in the config
    carrier: str | None = None  # the head carrier it belongs to (HeadCarrier.name); None: both

    def applies(self, carrier_name: str) -> bool:
        return self.carrier in (None, carrier_name)

    def allows(self, value: Any) -> bool:
        return value in self.want if isinstance(self.want, tuple) else value == self.want

    def wanted(self) -> str:
        """``= value`` or ``in {a, b}``, the way the messages say it."""
        if isinstance(self.want, tuple):
            return "in {" + ", ".join(map(as_text, self.want)) + "}"
        return f"= {as_text(self.want)}"


FULL = "the head needs the full distribution"
#: The hazard of docs/score_centering.md ("In-place cross-entropy"): without entropy verl computes the
#: log-probs with flash-attn's cross-entropy and inplace_backward=True, which overwrites the logits.
IN_PLACE_CE = ("verl's log-prob backward would otherwise run flash-attn's cross-entropy in place over the logits "
               "the correction's backward reads")
#: What a score-centering arm needs of verl's config: for verl as head carrier what the score-centering verl's config
#: validator, ``RolloutConfig`` and ``RolloutCorrectionConfig`` (plus the project's seam) require, besides
#: :data:`NEWER_KEYS` and :data:`SC_SIDES_AGREE`; for the project's what :mod:`runners.verl_side.head` relies on.
SC_REQUIRES: tuple[Requirement, ...] = (
    Requirement(f"{ROLLOUT}.name", "vllm", "the head comes from vLLM", carrier="verl"),
    Requirement(f"{ROLLOUT}.name", ("vllm", "cpu_hf"), "a rollout server that answers the project's head request "
                "(vLLM, or the CPU rehearsal's runners.verl_side.platform.rehearsal)", carrier="project"),
    Requirement(f"{ROLLOUT}.agent.agent_loop_manager_class", MANAGER_CLASS,
                "the project's agent-loop manager carries the head", carrier="project"),
    Requirement(f"{ROLLOUT}.agent.default_agent_loop", "single_turn_agent", "the project carries the head of "
                "single-turn rollouts (every response token from one request)", carrier="project",
                absent="single_turn_agent"),
    Requirement("actor_rollout_ref.actor.calculate_entropy", True, IN_PLACE_CE, project="backend.actor.calculate_entropy"),
    Requirement(f"{ROLLOUT}.calculate_log_probs", True, "the head comes with the sampled log-probs"),
    Requirement(f"{ROLLOUT}.logprobs_mode", "processed_logprobs", "the sampled distribution",
                project="backend.rollout_engine.logprobs_mode"),
    Requirement(f"{ROLLOUT}.top_p", 1.0, FULL, project="rollout.top_p", absent=1.0),
    Requirement(f"{ROLLOUT}.top_k", -1, FULL, project="rollout.top_k", absent=-1),
    Requirement("trainer.use_v1", True, "the V1 trainer carries the head"),
    Requirement("actor_rollout_ref.model.use_remove_padding", True, "verl's slot needs the packed layout",
                project="backend.actor.remove_padding"),
    Requirement("actor_rollout_ref.model.use_fused_kernels", False, "the head gather needs the full logits"),
    Requirement("actor_rollout_ref.actor.strategy", ("fsdp", "fsdp2"), "the slot is in the FSDP engine"),
    Requirement("distillation.enabled", (False, None), "no distillation with score centering", absent=False),
    *(Requirement(f"{DRIVER_RC}.{k}", v, "bypass-mode REINFORCE") for k, v in BYPASS_REINFORCE.items()),
    Requirement(f"{DRIVER_RC}.rollout_is", (None, "token"), "token-level IS only"),
    Requirement(f"{DRIVER_RC}.rollout_is_batch_normalize", (False, None), "token-level IS only", absent=False),
)
#: Keys the score-centering verl compares between the actor and the driver block as written (no defaults filled in).
SC_SIDES_AGREE = ("bypass_mode", "loss_type", "rollout_is", "rollout_is_threshold")
