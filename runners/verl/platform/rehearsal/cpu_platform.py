"""The CPU rehearsal as a platform of the seam (``backend.platform=cpu``): the reference launch with verl's
GPU-only leaves swapped (:mod:`~runners.verl.platform.rehearsal.swaps`), the tiny model's limits
(:mod:`~runners.verl.platform.rehearsal.limits`) and the assets it trains on
(:mod:`~runners.verl.platform.rehearsal.assets`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from omegaconf import OmegaConf

from runners.config import CONF_DIR
from runners.config.hydra_override import compose_dir_offline
from runners.verl.platform.base import LaunchOf, Platform
from runners.verl.platform.rehearsal import swaps

#: The experiment the rehearsal is a smaller copy of: the dry run reports the difference from its launch.
REFERENCE_EXPERIMENT = "qwen3_4b_sc_repro"


class RehearsalPlatform(Platform):
    """verl's whole V1 trainer on a CPU, with the CPU stand-ins swapped in; no GPU to fit, its own data."""

    name: ClassVar[str] = "cpu"
    fits_gpus: ClassVar[bool] = False
    writes_data: ClassVar[bool] = True

    def check(self) -> None:
        from runners.verl.platform.rehearsal.limits import check

        check(self.cfg)

    def prepare_assets(self) -> None:
        from runners.verl.platform.rehearsal.assets import prepare_assets

        prepare_assets(self.cfg)

    def overrides(self, overrides: list[str], state_dir: Path) -> list[str]:
        return swaps.apply(overrides, self.cfg, state_dir)

    def environment(self, state_dir: Path) -> tuple[dict[str, str], list[str]]:
        return swaps.environment(self.cfg, state_dir)

    def leftovers(self, state_dir: Path) -> tuple[Path, ...]:
        return swaps.leftovers(self.cfg, state_dir)

    def leftover_segments(self) -> tuple[str, ...]:
        return swaps.leftover_segments(self.cfg)

    def ray_start_args(self) -> list[str]:
        """Each node declares ``trainer_gpus_per_node + rollout_gpus_per_node`` logical GPUs (and 8 CPUs)."""
        p = self.cfg.backend.placement
        return [f"--num-gpus={int(p.trainer_gpus_per_node) + int(p.rollout_gpus_per_node)}", "--num-cpus=8"]

    def reference_difference(self, launch_of: LaunchOf, state_dir: Path) -> dict[str, Any]:
        """The named swaps and the key-by-key difference between this launch and the reference experiment's
        launch of the same arm and seed (into the same run folder)."""
        cfg = self.cfg
        reference = compose_dir_offline(CONF_DIR, "config", [
            f"+experiment={REFERENCE_EXPERIMENT}", f"method={cfg.method.name}", f"seed={cfg.seed}",
            f"results_root={cfg.results_root}"])
        OmegaConf.resolve(reference)
        (ref_overrides, ref_env), (overrides, env) = launch_of(reference), launch_of(cfg)
        named = swaps.swaps(cfg, state_dir)
        return {"swaps": [{"name": s.name, "why": s.why, "keys": s.keys()} for s in named],
                "difference": swaps.difference(ref_overrides, overrides, ref_env, env, named)}

    def difference_text(self, difference: dict[str, Any]) -> str:
        return swaps.difference_text(difference)
