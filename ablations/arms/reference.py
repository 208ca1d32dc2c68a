"""The user's four arms (docs/score_centering.md): PG, TIS, SC and SC+TIS, the project's own losses
(``ablations.losses``) in bypass mode, the sampler's log-prob as ``old_log_prob``."""

from ablations.arms.arm import Arm

PG = Arm(name="pg", loss_mode="ablation_pg", loss="ablations.losses:policy_loss_pg",
         summary="REINFORCE with GRPO group-mean advantages (no std division), no clipping")
TIS = Arm(name="tis", loss_mode="ablation_tis", loss="ablations.losses:policy_loss_tis", tis_cap=2.0,
          summary="PG with a token-level truncated importance weight min(p(a)/q(a), 2) on the sampled token")
SC = Arm(name="sc", loss_mode="ablation_sc", loss="ablations.losses:policy_loss_sc", score_centering=True,
         summary="PG plus score centering from the sampler's top-k head (proportional tail)")
SC_TIS = Arm(name="sc_tis", loss_mode="ablation_sc_tis", loss="ablations.losses:policy_loss_sc_tis", tis_cap=2.0,
             score_centering=True, summary="TIS plus score centering of the weighted score (cap 2 on head and token)")
