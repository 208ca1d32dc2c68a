"""The field's sampler/trainer mismatch corrections, as verl 0.9.1 carries them (``rollout_corr_helper``).

The four non-SC arms are verl's own ``bypass_mode`` policy loss with ``loss_type=reinforce``
(``core_algos.compute_policy_loss_bypass_mode``): REINFORCE on the sampler's log-prob as ``old_log_prob``,
``-A sg(w) log p(a)`` over the tokens verl's rejection mask keeps, token mean. The weight and the mask are
verl's (``compute_rollout_correction_and_rejection_mask``); nothing is re-implemented. ``sc_icepop`` adds
the centering term with verl main's IcePop weight (``ablations.score_centering.centering_term``).

Defaults and their sources:

- ``icepop``: token IS weight ``r 1[0.5 <= r <= 5]``, band ``0.5_5.0``: verl's
  ``RolloutCorrectionConfig.bypass_pg_token_icepop`` defaults (IcePop, Ring-1T, arXiv 2510.18855).
- ``seq_tis``: sequence IS weight ``min(prod_t r_t, 2)``: verl's ``bypass_pg_is`` default threshold 2.0
  (verl's docstring: 2.0-10.0 typical at sequence level).
- ``token_mis``: token IS weight ``min(r, 2)`` on the tokens whose ratio lies in ``[0.5, 2]`` (verl's
  ``token_k1`` rejection mask, threshold 2.0, whose lower bound verl infers as 1/2): masked IS at the TIS
  cap, so it differs from TIS only by dropping the tokens TIS truncates (and those below 1/2) from the loss
  and its token count (AReaL #1218's token masking; "When Speed Kills Stability", MIS).
- ``geo_mask``: no weight; a whole response is masked when its geometric-mean ratio
  ``exp(mean_t log r_t)`` leaves ``[0.999, 1.001]``: verl's ``bypass_pg_geo_rs`` default (the geometric
  sequence mask of DeepSeek-V3.2, arXiv 2512.02556).
- ``sc_icepop``: SC with IcePop's weight on the sampled token and in the centering term,
  ``C = sum_H sg(q w(p/q) - alpha p) log p``, ``w(r) = r 1[0.5 <= r <= 5]``, ``alpha = rho w(1/rho)``: verl
  main's ``score_centering_weight_fn`` (c6236f51) with the ``icepop`` band.
"""

from ablations.arms.arm import Arm, Correction

VERL_BYPASS = "bypass_mode"

ICEPOP = Arm(name="icepop", loss_mode=VERL_BYPASS, rollout_correction=Correction("token", "0.5_5.0"),
             summary="verl's token IcePop: IS weight r, zeroed outside [0.5, 5]",
             source="verl RolloutCorrectionConfig.bypass_pg_token_icepop; Ring-1T (arXiv 2510.18855)")
SEQ_TIS = Arm(name="seq_tis", loss_mode=VERL_BYPASS, rollout_correction=Correction("sequence", 2.0),
              summary="verl's sequence-level truncated IS: min(prod r, 2) per response",
              source="verl RolloutCorrectionConfig.bypass_pg_is")
TOKEN_MIS = Arm(name="token_mis", loss_mode=VERL_BYPASS,
                rollout_correction=Correction("token", 2.0, "token_k1", 2.0),
                summary="verl's token masked IS: min(r, 2) on tokens with r in [0.5, 2], the rest masked",
                source="verl rollout_corr_helper token_k1; AReaL #1218")
GEO_MASK = Arm(name="geo_mask", loss_mode=VERL_BYPASS,
               rollout_correction=Correction(None, None, "seq_mean_k1", "0.999_1.001"),
               summary="verl's geometric sequence mask: a response whose geometric-mean ratio leaves [0.999, 1.001]",
               source="verl RolloutCorrectionConfig.bypass_pg_geo_rs; DeepSeek-V3.2 (arXiv 2512.02556)")
SC_ICEPOP = Arm(name="sc_icepop", loss_mode="ablation_sc_corrected", loss="ablations.losses:policy_loss_sc_corrected",
                score_centering=True, rollout_correction=Correction("token", "0.5_5.0"),
                summary="SC with IcePop's weight on the sampled token and in the centering term",
                source="verl main c6236f51 score_centering_weight_fn (IcePop band of icepop)")
