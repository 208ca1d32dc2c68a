"""Checkpoints of the embedded backend: the whole training state in one file per saved step.

A checkpoint holds everything the run depends on — trainer weights and optimizer, the sampler's
weights and version, the replay buffer, the producer's credit and every random generator — so a
resumed run continues exactly as the uninterrupted one would. Files are written atomically
(temporary file, then rename): a run killed while saving keeps its previous checkpoint.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from runners.run.run_record import atomic_write

_NAME = re.compile(r"^step_(\d{6})\.pt$")


def checkpoint_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, path) of every complete checkpoint, oldest first."""
    folder = checkpoint_dir(run_dir)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _NAME.match(p.name))]
    return sorted(found)


def save_checkpoint(run_dir: Path, step: int, state: dict[str, Any], keep: int) -> Path:
    """Write ``checkpoints/step_NNNNNN.pt`` atomically, then keep only the newest ``keep``."""
    folder = checkpoint_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step_{step:06d}.pt"
    atomic_write(path, lambda f: torch.save(state, f), binary=True)
    for _, old in list_checkpoints(run_dir)[:-keep]:
        old.unlink()
    return path


def load_latest(run_dir: Path) -> tuple[int, dict[str, Any]] | None:
    """The newest checkpoint as (step, state), or None when the run has none."""
    found = list_checkpoints(run_dir)
    if not found:
        return None
    step, path = found[-1]
    return step, torch.load(path, weights_only=False)
