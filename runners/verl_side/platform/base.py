"""The platform seam: what the place a verl launch runs on adds to the reference launch.

A :class:`Platform` is chosen once per launch (:func:`runners.verl_side.platform.platform_for`, from
``backend.platform``) and the verl bridge (:mod:`runners.verl_side.backend`) asks it, and nothing else, for what
differs between platforms: its checks, the assets it writes before the launch, the overrides and environment it
adds to every verl process, what its processes leave outside the run folder and the tidying after an attempt,
the arguments of a ``ray start`` on one of its nodes, and its difference from the reference launch (the dry
run's report). A GPU (:class:`runners.verl_side.platform.gpu.GpuPlatform`) adds nothing; the CPU rehearsal
(:class:`runners.verl_side.platform.rehearsal.cpu_platform.RehearsalPlatform`) swaps verl's GPU-only leaves.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from omegaconf import DictConfig

#: What the dry run hands a platform to compare with the reference launch: a config -> (its verl override list,
#: the environment of its verl processes), built by the verl bridge for the same attempt.
LaunchOf = Callable[[DictConfig], tuple[list[str], dict[str, str]]]


@dataclasses.dataclass(frozen=True, eq=False)
class Platform:
    """Where one verl launch runs; this base adds nothing to the reference launch (the GPU's behaviour)."""

    cfg: DictConfig
    #: The value of ``backend.platform`` that selects it.
    name: ClassVar[str] = ""
    #: Whether the launch must fit the GPUs of its capacity plan (:func:`runners.capacity.plan.check_fits`; the
    #: launch prints the plan, a dry run's misfit is reported as a refusal).
    fits_gpus: ClassVar[bool] = True
    #: Whether the platform writes the launch's data itself (:meth:`prepare_assets`): the data files need not
    #: exist before the launch.
    writes_data: ClassVar[bool] = False

    def check(self) -> None:
        """Refuse, naming the key (:class:`~runners.config.config_error.ConfigError`), what this platform
        cannot run."""

    def prepare_assets(self) -> None:
        """Write what the launch trains on, before the launch and the dry run."""

    def overrides(self, overrides: list[str], state_dir: Path) -> list[str]:
        """The verl override list of the reference launch with this platform's keys set (``state_dir``: the
        attempt's folder for the platform's files)."""
        return list(overrides)

    def environment(self, state_dir: Path) -> tuple[dict[str, str], list[str]]:
        """The environment this platform adds to every verl process, and the modules it puts first in
        ``VERL_USE_EXTERNAL_MODULES`` (after the loss registration)."""
        return {}, []

    def leftovers(self, state_dir: Path) -> tuple[Path, ...]:
        """Folders the attempt's processes write outside the run folder, removed once its process group ended."""
        return ()

    def leftover_segments(self) -> tuple[str, ...]:
        """Prefixes of the shared-memory segments a killed attempt can leave (the watchdog unlinks the unmapped ones)."""
        return ()

    def tidy_after_attempt(self, state_dir: Path) -> None:
        """Remove :meth:`leftovers` (the launcher does it once verl's group has ended; its watchdog does it too,
        should the launcher be killed)."""
        for folder in self.leftovers(state_dir):
            shutil.rmtree(folder, ignore_errors=True)

    def ray_start_args(self) -> list[str]:
        """Arguments of ``ray start`` on one node of a multi-node job (a GPU node: Ray counts its GPUs itself)."""
        return []

    def seed_fixes(self, reference: dict[str, Any]) -> dict[str, Any]:
        """``run.seed_fixes`` of a run on this platform, given the reference launch's record (``reference``)."""
        return reference

    def rollout_engine(self, reference: str) -> str:
        """``run.versions.rollout``: the engine that generated the rollouts, given the reference's (``reference``:
        vLLM's, with its version)."""
        return reference

    def reference_difference(self, launch_of: LaunchOf, state_dir: Path) -> dict[str, Any] | None:
        """For the dry run's report: how this launch differs from the reference launch (``launch_of``: a config ->
        its override list and environment, for the attempt of ``state_dir``), or None where it is the reference."""
        return None

    def difference_text(self, difference: dict[str, Any]) -> str:
        """:meth:`reference_difference` as a table for people."""
        raise NotImplementedError(f"platform {self.name} has no reference difference")
