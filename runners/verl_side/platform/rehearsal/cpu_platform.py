"""The CPU rehearsal as a platform of the seam (``backend.platform=cpu``): the reference launch with verl's
GPU-only leaves swapped (:mod:`~runners.verl_side.platform.rehearsal.swaps`), the tiny model's limits
(:mod:`~runners.verl_side.platform.rehearsal.limits`) and the assets it trains on
(:mod:`~runners.verl_side.platform.rehearsal.assets`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from omegaconf import OmegaConf

from runners.config import CONF_DIR
from runners.run.run_contract import seed_fixes_record
from runners.verl_side.platform.base import LaunchOf, Platform
from runners.verl_side.platform.rehearsal import swaps

#: ``run.versions.rollout`` where the CPU stand-in rolled out.
STANDIN_ENGINE = "standin (runners/verl_side/platform/rehearsal/rollout.py: an HF model on the CPU in place of vLLM)"
#: The experiment the rehearsal is a smaller copy of: the dry run reports the difference from its launch.
REFERENCE_EXPERIMENT = "qwen3_4b_sc_repro"


class RehearsalPlatform(Platform):
    """verl's whole V1 trainer on a CPU, with the CPU stand-ins swapped in; no GPU to fit, its own data."""

    name: ClassVar[str] = "cpu"
    fits_gpus: ClassVar[bool] = False
    writes_data: ClassVar[bool] = True

    def check(self) -> None:
        from runners.verl_side.platform.rehearsal.limits import check

        check(self.cfg)

    def prepare_assets(self) -> None:
        from runners.verl_side.platform.rehearsal.assets import prepare_assets

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

    def seed_fixes(self, reference: dict[str, Any]) -> dict[str, Any]:
        """The reference's record, or where the CPU stand-in rolled out, :func:`standin_seed_fixes` of it."""
        return reference if swaps.uses_vllm(self.cfg) else standin_seed_fixes(reference)

    def rollout_engine(self, reference: str) -> str:
        return reference if swaps.uses_vllm(self.cfg) else STANDIN_ENGINE

    def reference_difference(self, launch_of: LaunchOf, state_dir: Path) -> dict[str, Any]:
        """The named swaps and the key-by-key difference between this launch and the reference experiment's
        launch of the same arm and seed (into the same run folder)."""
        from runners.config.hydra_override import compose_dir_offline

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


def standin_seed_fixes(reference: dict[str, Any]) -> dict[str, Any]:
    """``run.seed_fixes`` of a rehearsal whose rollout is the CPU stand-in, from the reference launch's record
    (``reference``): the same verl keys, but the rollout that samples is the CPU stand-in for vLLM
    (:mod:`runners.verl_side.platform.rehearsal.rollout`), one ``torch.Generator`` per replica seeded
    ``actor_rollout_ref.rollout.seed`` + replica rank; requests share it token by token."""
    return seed_fixes_record(
        {**{k: v for k, v in reference["how"].items() if k != "rollout_engine"},
         "rollout_engine": "actor_rollout_ref.rollout.seed: the torch.Generator of each CPU rollout replica "
                           "(runners/verl_side/platform/rehearsal/rollout.py), seeded with seed + replica rank"},
        {"sampler": "the CPU rollout (an HF model on the CPU standing in for vLLM) draws every token from its "
                    "replica's one generator, and the requests in flight take turns token by token and are cut "
                    "at weight syncs, both as the processes' timing goes: which draw lands in which response is "
                    "not reproducible",
         "evaluation": "validation samples through the same CPU rollout replicas and generators: not reproducible "
                       "either",
         "schedule": reference["not_fixed"]["schedule"],
         "eval_problems": reference["not_fixed"]["eval_problems"]},
        reproducible=False,
    )
