"""The launch's capacity plan, made once at the backend's entry (:func:`runners.verl_side.backend.run`) and handed to
the dry run (its report and ``capacity.md``) and to the launch (printed, and kept in the attempt's folder)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from omegaconf import DictConfig


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    """:func:`runners.capacity.plan.plan` of a launch's config, or why there is none (the model's shape is unknown
    before verl downloads it)."""

    plan: dict[str, Any] | None
    error: str | None = None

    @classmethod
    def of(cls, cfg: DictConfig) -> LaunchPlan:
        from runners.capacity import plan as capacity

        try:
            return cls(capacity.plan(cfg))
        except ValueError as err:  # unknown shape: validation refused it unless backend.capacity.enforce=false
            return cls(None, str(err))

    def write(self, out: Path) -> Path:
        """Write ``capacity.json`` and ``capacity.md`` (or a ``capacity.md`` saying why there is no plan) into
        ``out``; return the markdown's path."""
        from runners.capacity import plan as capacity

        if self.plan is None:
            (out / capacity.MARKDOWN).write_text(f"# Capacity plan: none\n\n{self.error}\n")
            return out / capacity.MARKDOWN
        _, markdown = capacity.write(self.plan, out)
        return markdown

    def summary(self, out: Path) -> dict[str, Any]:
        """Write the plan into ``out`` (:meth:`write`); return what the dry run's report and the log say of it
        (``fits``, the totals, the cost, the refusal a launch would meet)."""
        from runners.capacity import plan as capacity

        markdown = self.write(out)
        if (p := self.plan) is None:
            return {"fits": None, "error": self.error}
        return {"fits": p["fits"], "gpu": p["gpu"]["name"], "trainer_total_bytes": p["trainer"]["per_gpu_bytes"]["total"],
                "rollout_total_bytes": p["rollout"]["per_gpu_bytes"]["total"], "gpu_bytes": p["gpu"]["memory_bytes"],
                "step_seconds": p["time"]["step_seconds"], "gpu_hours_per_arm": p["time"]["gpu_hours_per_arm"],
                "refusal": capacity.refusal(p), "file": str(markdown)}
