"""Where a verl run keeps its files inside the run directory: ``checkpoints/`` (``trainer.default_local_dir``) and
``verl/`` (the dry run, verl's validation and rollout dumps, one ``attempt-NNN/`` per launch of verl); the tree and
what each file holds: docs/verl_reference.md, "Files of a verl run".
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from runners.run.run_contract import CHECKPOINTS_DIR

_ATTEMPT = re.compile(r"^attempt-(\d{3,})$")


def verl_dir(run_dir: Path) -> Path:
    return Path(run_dir).resolve() / "verl"


def checkpoints_dir(run_dir: Path) -> Path:
    return Path(run_dir).resolve() / CHECKPOINTS_DIR


def validation_dump_dir(run_dir: Path) -> Path:
    return verl_dir(run_dir) / "validation"


def rollout_dump_dir(run_dir: Path) -> Path:
    return verl_dir(run_dir) / "rollouts"


def dry_run_dir(run_dir: Path) -> Path:
    return verl_dir(run_dir) / "dry_run"


def attempts(run_dir: Path) -> list[int]:
    """Numbers of the attempts started so far, ascending."""
    folder = verl_dir(run_dir)
    found = (_ATTEMPT.match(p.name) for p in (folder.iterdir() if folder.is_dir() else []) if p.is_dir())
    return sorted(int(m.group(1)) for m in found if m)


def next_attempt(run_dir: Path) -> int:
    return max(attempts(run_dir), default=0) + 1


#: verl's checkpoint tracker in the checkpoint folder: the step ``resume_mode=auto`` resumes from.
TRACKER = "latest_checkpointed_iteration.txt"


def resume_step(ckpt_dir: Path) -> int | None:
    """The step verl's ``resume_mode=auto`` resumes from (:data:`TRACKER`), if any."""
    try:
        return int((Path(ckpt_dir) / TRACKER).read_text().strip())
    except (OSError, ValueError):
        return None


@dataclasses.dataclass(frozen=True)
class AttemptPaths:
    """Absolute paths of one attempt (Ray actors run in another working directory)."""

    run_dir: Path
    attempt: int

    def __post_init__(self):
        object.__setattr__(self, "run_dir", Path(self.run_dir).resolve())
        if self.attempt < 1:
            raise ValueError(f"attempt numbers start at 1, got {self.attempt}")

    @property
    def checkpoints(self) -> Path:
        return checkpoints_dir(self.run_dir)

    @property
    def validation_dump(self) -> Path:
        return validation_dump_dir(self.run_dir)

    @property
    def rollout_dump(self) -> Path:
        return rollout_dump_dir(self.run_dir)

    @property
    def attempt_dir(self) -> Path:
        return verl_dir(self.run_dir) / f"attempt-{self.attempt:03d}"

    @property
    def file_logger(self) -> Path:
        return self.attempt_dir / "metrics.jsonl"

    @property
    def log_file(self) -> Path:
        return self.attempt_dir / "verl.log"

    @property
    def launch_script(self) -> Path:
        return self.attempt_dir / "launch.sh"

    @property
    def hydra_dir(self) -> Path:
        return self.attempt_dir / "hydra"

    @property
    def cpu_state(self) -> Path:
        """The CPU rehearsal's weight-sync files and rollout sync log (``runners.verl_side.platform.rehearsal``)."""
        return self.attempt_dir / "cpu"
