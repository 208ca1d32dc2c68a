"""What a launch may do with an existing run folder, and the tidying it does before the run.

:func:`plan` (reads only; run before any compute) compares the folder with the new config:

- ``new``: no ``config.yaml`` yet;
- ``resume``: the same config, apart from the inert keys (``runners.run.peer_keys.INERT_KEYS``, the one list the
  report reads too: where the folder is, the cache, checkpoint retention, trackers; each with the keys under it) and
  keys added after the folder was written that hold what its run did (``runners.config.config_history``):
  the run continues from its
  newest checkpoint (or is left as it is when finished);
- ``extend``: only ``trainer.total_steps`` differs, and it is raised: the run continues from its
  newest checkpoint to the new total, as a new attempt;
- ``reuse_empty``: a different config, but the folder holds no completed step (no train row in
  ``metrics.json``, no checkpoint, no verl metrics, no export): a start that died before its first
  step, e.g. in the warm start. The run starts afresh there;
- anything else raises :class:`~runners.config.config_error.ConfigError` naming the keys that differ; nothing
  is changed.

First, a folder whose ``metrics.json`` is damaged (not a readable record:
``runners.run.run_record.record_damage``) is refused, naming the one command that moves the record aside;
the launch after it starts the run again (the embedded backend moves the checkpoints that no record covers to
``checkpoints/superseded/``). Before comparing, a folder holding completed steps must hold the ``config.yaml`` its run wrote: one
whose sha256 is not the ``config_sha256`` that ``metrics.json`` records was edited afterwards, and
the launch is refused naming the file (``runners.run.run_record.config_edited``), whatever it asks for.

:func:`prepare` (called by the launcher while it holds the folder's lock, before writing
``config.yaml``) removes the temporary files interrupted atomic writes left in the folder, in
``val/`` and ``export/`` (with their subfolders, e.g. ``val/repeat_01/``) and in ``checkpoints/``
(not in verl's ``global_step_N/`` folders, which verl writes itself). For ``reuse_empty`` it moves
the earlier start's files (everything but ``run.log`` and Hydra's ``.hydra/``) into
``.abandoned/<UTC time>/``, so nothing of it is lost and nothing of it is read as part of the new
run. Each action is logged.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
from pathlib import Path

from omegaconf import OmegaConf

from runners.config.config_error import ConfigError
from runners.config.config_history import ADDED_KEYS, as_current
from runners.run.peer_keys import INERT_KEYS, under
from runners.run.provenance import config_sha256
from runners.run.run_contract import CHECKPOINTS_DIR, CONFIG_FILE, EXPORT_DIR, METRICS_FILE, VAL_DIR
from runners.run.run_record import (
    atomic_write_text,
    config_edited,
    damaged_record_refusal,
    record_config_sha256,
    remove_stale_temp_files,
)

log = logging.getLogger(__name__)

EXTENSIBLE_KEY = "trainer.total_steps"
ABANDONED_DIR = ".abandoned"
#: Entries of a reused empty folder that stay in place: the new launch's log and Hydra's record of it.
_KEPT = frozenset({"run.log", ".hydra", ABANDONED_DIR})


def _flatten(d: object, prefix: str = "") -> dict[str, object]:
    if isinstance(d, dict):
        out: dict[str, object] = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


def completed_steps_evidence(run_dir: Path) -> str | None:
    """What shows that ``run_dir`` holds a completed step, or None when it holds none."""
    run_dir = Path(run_dir)
    metrics = run_dir / METRICS_FILE
    if metrics.exists():
        try:
            train = json.loads(metrics.read_text()).get("train")
        except (ValueError, AttributeError):
            return f"{metrics} (unreadable)"
        if train:
            return f"{metrics} ({len(train)} train steps)"
    checkpoints = run_dir / CHECKPOINTS_DIR
    if checkpoints.is_dir():
        kept = [p for p in checkpoints.iterdir() if not p.name.endswith(".tmp")]
        if kept:
            return f"{checkpoints} ({len(kept)} entries)"
    for logger in sorted((run_dir / "verl").glob("attempt-*/metrics.jsonl")):
        if logger.stat().st_size > 0:
            return f"{logger} (verl metrics)"
    if (run_dir / EXPORT_DIR).exists():
        return f"{run_dir / EXPORT_DIR}"
    return None


def plan(run_dir: Path, config_yaml: str, insensitive: frozenset[str] = INERT_KEYS) -> str:
    """``new``, ``resume``, ``extend`` or ``reuse_empty`` (see the module docstring); else ConfigError."""
    refusal = damaged_record_refusal(run_dir)  # refused once, naming the command that moves it aside
    if refusal is not None:
        raise ConfigError(refusal)
    path = Path(run_dir) / CONFIG_FILE
    if not path.exists():
        return "new"
    edited = config_edited(run_dir)
    evidence = completed_steps_evidence(run_dir)
    if edited is not None and evidence is not None:
        raise ConfigError(f"{path}: {edited}. The record is what ran: restore {CONFIG_FILE} to the config the run was "
                          "launched with, or move the folder away; nothing was changed.")
    # a folder written before a key existed holds what its run did (runners.config.config_history)
    old = _flatten(as_current(OmegaConf.to_container(OmegaConf.load(path))))
    new = _flatten(OmegaConf.to_container(OmegaConf.create(config_yaml)))
    differ = sorted(k for k in old.keys() | new.keys()
                    if not under(k, insensitive) and old.get(k, "<absent>") != new.get(k, "<absent>"))
    if not differ:
        return "resume"
    if evidence is None:
        return "reuse_empty"
    if differ == [EXTENSIBLE_KEY]:
        before, after = old[EXTENSIBLE_KEY], new[EXTENSIBLE_KEY]
        if isinstance(before, int) and isinstance(after, int) and after > before:
            return "extend"
        raise ConfigError(
            f"{run_dir} holds a run of {EXTENSIBLE_KEY}={before!r}; {EXTENSIBLE_KEY}={after!r} would shorten "
            f"it. A run can be extended ({EXTENSIBLE_KEY} raised), not shortened; use another sweep name "
            "(sweep=NAME) for a shorter run. Nothing was changed."
        )
    shown = "; ".join(f"{k}: {old.get(k, '<absent>')!r} -> {new.get(k, '<absent>')!r}" for k in differ[:8])
    recorded = _flatten(OmegaConf.to_container(OmegaConf.load(path)))
    predates = [f"{k}={old[k]}" for k in differ if k in ADDED_KEYS and k not in recorded]
    hint = (f" The folder was written before {', '.join(k.split('=')[0] for k in predates)} existed; its run "
            f"did what {' '.join(predates)} does: add that to continue it." if predates else "")
    raise ConfigError(
        f"{run_dir} holds a run with a different config ({shown}{'; ...' if len(differ) > 8 else ''}); it "
        f"has completed steps ({evidence}). Only {EXTENSIBLE_KEY} may change (raised, to extend the run). "
        f"Use another sweep name (sweep=NAME) or move that folder away; nothing was changed.{hint}"
    )


def prepare(run_dir: Path, kind: str, config_yaml: str) -> None:
    """Tidy ``run_dir`` for a launch of plan ``kind`` with ``config_yaml``, before that config is
    written; call it only while holding the folder's lock."""
    run_dir = Path(run_dir)
    nested = [p for top in (VAL_DIR, EXPORT_DIR) for p in sorted((run_dir / top).rglob("*")) if p.is_dir()]
    for folder in (run_dir, run_dir / VAL_DIR, run_dir / CHECKPOINTS_DIR, run_dir / EXPORT_DIR, *nested):
        for stale in remove_stale_temp_files(folder):
            log.info("removed %s (left by a write that was interrupted)", stale)
    if kind == "reuse_empty":
        stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        target = run_dir / ABANDONED_DIR / stamp
        moved = sorted(p for p in run_dir.iterdir() if p.name not in _KEPT)
        target.mkdir(parents=True)
        for p in moved:
            os.replace(p, target / p.name)
        log.info("%s held a start with a different config that completed no step; reusing the folder "
                 "(its files %s moved to %s)", run_dir, [p.name for p in moved], target)
    elif kind == "extend":
        before = OmegaConf.select(OmegaConf.load(run_dir / CONFIG_FILE), EXTENSIBLE_KEY)
        after = OmegaConf.select(OmegaConf.create(config_yaml), EXTENSIBLE_KEY)
        log.info("extending the run in %s: %s %s -> %s; it continues from its newest checkpoint as a new "
                 "attempt", run_dir, EXTENSIBLE_KEY, before, after)


def write_config(run_dir: Path, config_yaml: str) -> None:
    """Write ``config.yaml`` for the launch, first setting the record's ``config_sha256`` to its hash when
    the folder holds a record of another text (an extension): the record and the file stay in step,
    so :func:`plan` can tell a hand edit (``runners.run.run_record.config_edited``) from a launch's own write.
    Call it only while holding the folder's lock."""
    record_config_sha256(run_dir, config_sha256(config_yaml))
    atomic_write_text(Path(run_dir) / CONFIG_FILE, config_yaml)
