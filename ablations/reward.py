"""Reward for every data source of the harness: verl's ``math_dapo`` scorer (+1 correct, -1 otherwise).

verl 0.9.1's ``default_compute_score`` already sends ``math_dapo`` and any ``aime*`` data source to
``math_dapo``; this module makes that choice explicit (independent of verl's dispatch table) and
adds what the run contract needs from each validation sample, which verl's validation dump
(``trainer.validation_data_dir``) would otherwise lack:

- :func:`compute_score` returns ``data_source`` and ``problem_id`` (from the parquet row's
  ``extra_info.problem_id``, written by :mod:`math_data`) next to ``score``/``acc``/``pred``.
  String values are ignored by verl's validation metrics and copied into the dump.
- :class:`LengthAwareRewardManager` is verl's ``naive`` reward-loop manager plus
  ``response_length`` (response tokens of the sample), so ingestion can compute truncation
  against the configured cap.

Launch config (all four keys; ``pkg://`` resolves through the installed package, so Ray
workers with another cwd find it)::

    reward.custom_reward_function.path=pkg://ablations.reward
    reward.custom_reward_function.name=compute_score
    reward.reward_manager.source=importlib
    reward.reward_manager.name=LengthAwareRewardManager
    reward.reward_manager.module.path=pkg://ablations.reward
"""

from __future__ import annotations

from typing import Any

from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
from verl.utils.reward_score import math_dapo


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Score one response with ``math_dapo``; carry the sample's identity for the dumps.

    Returns ``{"score": +1.0 | -1.0, "acc": 1.0 | 0.0, "pred": str, "data_source": str,
    "problem_id": str}`` (``problem_id`` only when ``extra_info`` has one).
    """
    result = math_dapo.compute_score(solution_str, str(ground_truth))
    out: dict[str, Any] = {
        "score": float(result["score"]),
        "acc": 1.0 if result["acc"] else 0.0,
        "pred": "" if result.get("pred") is None else str(result["pred"]),
        "data_source": str(data_source),
    }
    problem_id = (extra_info or {}).get("problem_id")
    if problem_id is not None:
        out["problem_id"] = str(problem_id)
    return out


def response_token_count(data: Any) -> int:
    """Response tokens of the last sequence in a reward-loop ``DataProto`` (as ``naive`` counts them)."""
    item = data[-1:][0]
    width = item.batch["responses"].shape[-1]
    return int(item.batch["attention_mask"][-width:].sum())


class LengthAwareRewardManager(NaiveRewardManager):
    """verl's ``naive`` reward-loop manager that also reports ``response_length`` per sample."""

    async def run_single(self, data: Any) -> dict:
        result = await super().run_single(data)
        result["reward_extra_info"]["response_length"] = response_token_count(data)
        return result
