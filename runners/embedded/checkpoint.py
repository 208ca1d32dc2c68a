"""Checkpoints of the embedded backend: the whole training state in one file per saved step.

A checkpoint holds everything the run depends on — trainer weights and optimizer, the sampler's
weights and version, the replay buffer, the producer's credit and every random generator — so a
resumed run continues exactly as the uninterrupted one would. Files are written atomically
(temporary file, then rename): a run killed while saving keeps its previous checkpoint.

The record is saved before each checkpoint, so a checkpoint's step is always in the record. A checkpoint past the
record's last step (``metrics.json`` moved aside or lost) is not continued from (the steps before it are in no
record): :func:`supersede_after` moves it to ``checkpoints/superseded/`` (nothing is deleted).

A checkpoint is read through :mod:`runners.embedded.moved_modules`, so one written while the backend's package had
an older name (``runners.local``) still loads.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import Any

import torch

from runners.embedded import moved_modules
from runners.run.run_record import atomic_write

SUPERSEDED_DIR = "superseded"
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
    """Write ``checkpoints/step_NNNNNN.pt`` atomically, then keep only the newest ``keep``.

    The state is serialized in memory first and written with one Python write, so a full disk is an ``OSError``
    (``ENOSPC``, naming the file: ``run failed: no space left ...``), not torch's writer's ``RuntimeError``."""
    folder = checkpoint_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step_{step:06d}.pt"
    buffer = io.BytesIO()  # torch's zip writer turns a full disk into RuntimeError("[enforce fail at ...]")
    torch.save(state, buffer)
    try:
        atomic_write(path, lambda f: f.write(buffer.getbuffer()), binary=True)
    except OSError as err:  # ENOSPC among them, with the file named: the launcher's full-disk line
        raise OSError(err.errno, err.strerror, str(path)) from err
    for _, old in list_checkpoints(run_dir)[:-keep]:
        old.unlink()
    return path


def load_latest(run_dir: Path) -> tuple[int, dict[str, Any]] | None:
    """The newest checkpoint as (step, state), or None when the run has none."""
    found = list_checkpoints(run_dir)
    if not found:
        return None
    step, path = found[-1]
    return step, torch.load(path, weights_only=False, pickle_module=moved_modules)


def supersede_after(run_dir: Path, step: int) -> list[Path]:
    """Move every checkpoint past ``step`` (the record's last step) to ``checkpoints/superseded/``; returns
    where each went. A file already there of the same name is kept and the newer one gets a suffix."""
    moved = []
    aside = checkpoint_dir(run_dir) / SUPERSEDED_DIR
    for ckpt_step, path in list_checkpoints(run_dir):
        if ckpt_step <= step:
            continue
        aside.mkdir(exist_ok=True)
        target, n = aside / path.name, 1
        while target.exists():
            target, n = aside / f"{path.name}.{n}", n + 1
        os.replace(path, target)
        moved.append(target)
    return moved
