"""What an arm is: one :class:`Arm` declaration, and :class:`ArmSpec`, the one way every consumer asks about it.

An arm is a policy loss (a name in verl's ``POLICY_LOSS_REGISTRY``) with what it reads:

- ``tis_cap``: the project's token-level truncated IS weight of the sampled token, ``min(p(a)/q(a), cap)``
  (the TIS and SC+TIS arms; kept under this key so their run folders keep their config text);
- ``rollout_correction``: any other correction of the sampled token, in the vocabulary of verl's
  ``RolloutCorrectionConfig`` (``verl/trainer/config/algorithm.py``): ``rollout_is`` (``token`` |
  ``sequence``) with ``rollout_is_threshold`` (a number: truncation; ``"lower_upper"``: IcePop's band),
  ``rollout_rs`` (rejection masks such as ``token_k1``, ``seq_mean_k1``) with ``rollout_rs_threshold``.
  verl computes the weight and the mask (``compute_rollout_correction_and_rejection_mask``); the project
  never re-implements them;
- ``score_centering``: it needs the sampler's top-k head and subtracts the centering term ``C_t``
  (``ablations.score_centering.centering_term``), whose head weight is the arm's token-level IS rule.

Both IS spellings give one verl block (:meth:`ArmSpec.verl_rollout_correction`): the TIS cap is
``rollout_is=token, rollout_is_threshold=cap``. This module imports nothing beyond the standard library:
the config schema and the report read it without torch or verl.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

#: verl's default ``rollout_is_threshold`` (``RolloutCorrectionConfig``); written where an arm weights nothing.
DEFAULT_IS_THRESHOLD = 2.0
IS_LEVELS = ("token", "sequence")


@dataclass(frozen=True)
class Correction:
    """A sampled-token correction in verl's words (``RolloutCorrectionConfig``'s four keys)."""

    rollout_is: str | None = None
    rollout_is_threshold: float | str | None = None
    rollout_rs: str | None = None
    rollout_rs_threshold: float | str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Arm:
    """One arm, declared once (a module of ``ablations/arms/``; docs/arms.md).

    Args:
        name: what ``method=`` takes and the run folders are named after.
        loss_mode: the policy loss verl looks up (``get_policy_loss_fn``): the project's, registered from
            ``loss``, or one of verl's own (``bypass_mode``: REINFORCE with verl's rollout correction).
        summary: one line for ``--help``-like listings and the docs.
        loss: ``"module:function"`` of a policy loss to register under ``loss_mode`` when verl loads its
            plug-ins (``ablations.registry``); None for a loss verl already has.
        tis_cap, score_centering, rollout_correction: what the loss reads (module docstring).
        source: where the defaults come from.
    """

    name: str
    loss_mode: str
    summary: str
    loss: str | None = None
    tis_cap: float | None = None
    score_centering: bool = False
    rollout_correction: Correction | None = None
    source: str = ""

    def method_node(self) -> dict[str, Any]:
        """The arm's ``method`` config node (without ``top_k``, which the setup sets): what a run's
        ``config.yaml`` records of it. Key order is the config text's."""
        node: dict[str, Any] = {"name": self.name, "loss_mode": self.loss_mode, "tis_cap": self.tis_cap,
                                "score_centering": self.score_centering}
        node["rollout_correction"] = None if self.rollout_correction is None else self.rollout_correction.as_dict()
        return node


@dataclass(frozen=True)
class ArmSpec:
    """An arm as a run's ``method`` config states it: the one reader every consumer asks (the launch checks,
    verl's overrides, the embedded trainer, the capacity plan, the contract checker, ingestion, the report)."""

    name: str
    loss_mode: str
    tis_cap: float | None
    score_centering: bool
    rollout_correction: Correction | None

    @classmethod
    def of(cls, method: Any) -> ArmSpec:
        """From a ``method`` mapping (a DictConfig, or ``config.yaml``'s section read as a dict). A run folder
        written before ``rollout_correction`` existed lacks it: None, which is what those arms did."""
        if not isinstance(method, Mapping) and not hasattr(method, "get"):
            raise ValueError(f"method={method!r}: a method config (name, loss_mode, tis_cap, score_centering) is needed")
        rc = method.get("rollout_correction")
        correction = None if rc is None else Correction(**{f.name: rc.get(f.name) for f in fields(Correction)})
        cap = method.get("tis_cap")
        return cls(name=str(method.get("name")), loss_mode=str(method.get("loss_mode")),
                   tis_cap=None if cap is None else float(cap), score_centering=bool(method.get("score_centering", False)),
                   rollout_correction=correction)

    @property
    def sc(self) -> bool:
        """Needs the sampler's top-k head and subtracts the centering term."""
        return self.score_centering

    @property
    def tis(self) -> bool:
        """Weights the sampled token by the project's ``min(p/q, tis_cap)`` (logs ``actor/tis_*``)."""
        return self.tis_cap is not None

    @property
    def is_level(self) -> str | None:
        """The level of the sampled token's IS weight: ``token``, ``sequence`` or None (no weight)."""
        return "token" if self.tis else None if self.rollout_correction is None else self.rollout_correction.rollout_is

    @property
    def rejection(self) -> str | None:
        """verl's rejection options (``rollout_rs``) or None."""
        return None if self.rollout_correction is None else self.rollout_correction.rollout_rs

    @property
    def corrected(self) -> bool:
        """Any correction of the sampled token (an IS weight or a rejection mask)."""
        return self.is_level is not None or self.rejection is not None

    @property
    def rank(self) -> int:
        """Table order: uncorrected 0, corrected 1, SC 2, SC corrected 3 (pg, tis, sc, sc_tis for the four)."""
        return 2 * self.sc + self.corrected

    def verl_rollout_correction(self) -> dict[str, Any]:
        """The four keys of verl's rollout-correction block for this arm (the bypass-mode keys are the
        caller's): the TIS cap as ``rollout_is=token`` with that threshold; every key explicit."""
        if self.tis and self.rollout_correction is not None:
            raise ValueError(f"method {self.name}: tis_cap and rollout_correction both set; an arm has one IS rule")
        if self.tis:
            return Correction("token", self.tis_cap).as_dict()
        block = (self.rollout_correction or Correction()).as_dict()
        if block["rollout_is_threshold"] is None:
            block["rollout_is_threshold"] = DEFAULT_IS_THRESHOLD
        return block

    def centering_weight(self) -> tuple[float | None, tuple[float, float] | None]:
        """The token-level IS rule ``w(r)`` the centering term composes with, as ``(cap, band)``:
        ``(None, None)`` for ``w = 1``, ``(c, None)`` for ``min(r, c)``, ``(None, (lo, hi))`` for IcePop's
        ``r 1[lo <= r <= hi]``. Thresholds parsed by verl's own parser; sequence level is refused (as verl
        main's ``score_centering_weight_fn`` refuses it)."""
        block = self.verl_rollout_correction()
        try:
            return centering_rule(block["rollout_is"], block["rollout_is_threshold"])
        except ValueError as err:
            raise ValueError(f"method {self.name}: {err}") from err


def centering_rule(rollout_is: str | None, threshold: Any) -> tuple[float | None, tuple[float, float] | None]:
    """The centering term's IS rule ``(cap, band)`` from verl's two keys: ``(None, None)`` without
    ``rollout_is``; at token level the threshold by :func:`parse_is_threshold`; ValueError for another level."""
    if rollout_is is None:
        return None, None
    if rollout_is != "token":
        raise ValueError(f"score centering composes with token-level IS only, got rollout_is={rollout_is!r}")
    return parse_is_threshold(threshold)


def parse_is_threshold(threshold: Any) -> tuple[float | None, tuple[float, float] | None]:
    """``rollout_is_threshold`` as ``(cap, None)`` or ``(None, (lower, upper))``, by verl's own parser
    (``rollout_corr_helper._parse_rollout_is_threshold``: a number truncates, ``"lower_upper"`` is IcePop)."""
    from verl.trainer.ppo.rollout_corr_helper import _parse_rollout_is_threshold

    upper, lower = _parse_rollout_is_threshold(threshold)
    if not math.isfinite(upper) or (lower is not None and not math.isfinite(lower)):
        raise ValueError(f"rollout_is_threshold={threshold!r}: bounds must be finite")
    return (upper, None) if lower is None else (None, (lower, upper))
