"""verl config keys and defaults that every supported revision shares (0.9.1 and the score-centering commit).
"""

from __future__ import annotations

#: ``RolloutCorrectionConfig.rollout_is_threshold``'s default (a test holds it equal to the installed
#: verl's). Written on both sides for arms without TIS: the score-centering verl compares the blocks with no defaults.
DEFAULT_IS_THRESHOLD = 2.0
#: Bypass mode with REINFORCE: the sampler's log-prob is ``old_log_prob`` (no recompute pass), no PPO clip.
BYPASS_REINFORCE = {"bypass_mode": True, "loss_type": "reinforce"}
DRIVER_RC = "algorithm.rollout_correction"  # read by the driver
ACTOR_RC = "actor_rollout_ref.actor.policy_loss.rollout_correction"  # read by the actor (not copied)
ROLLOUT = "actor_rollout_ref.rollout"
