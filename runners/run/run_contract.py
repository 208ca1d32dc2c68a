"""The run contract as code: what a run folder holds (the spec is ``docs/run_contract.md``).

The one definition of the run folder's names, of ``metrics.json``'s schema (its version, its
skeleton, the metric names each arm's train rows carry, the per-set val metrics) and of the
validation-sample line. Every writer uses it -- :mod:`runners.run.run_record` (``metrics.json``, both
backends), :mod:`runners.embedded.evaluate` (the embedded backend's val files) and
:mod:`runners.verl_side.backend.ingest` (verl's logs -> the run folder) -- and so do the reader and
checker, :mod:`runners.run.contract_check` and :mod:`analysis.load`. Importing it is cheap (stdlib only).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

# -- the run folder -------------------------------------------------------------------------------
SCHEMA_VERSION = 1
METRICS_FILE = "metrics.json"
CONFIG_FILE = "config.yaml"
VAL_DIR = "val"
CHECKPOINTS_DIR = "checkpoints"
EXPORT_DIR = "export"
VAL_FILE_RE = re.compile(r"^step_(?P<step>\d{6})\.jsonl$")
REPEAT_DIR_RE = re.compile(r"^repeat_(?P<repeat>\d{2,})$")


def val_file_name(step: int) -> str:
    """``step_NNNNNN.jsonl``: the val file of the evaluation at ``step`` (six digits, zero padded)."""
    return f"step_{step:06d}.jsonl"


def repeat_dir_name(repeat: int) -> str:
    """``repeat_RR``: the folder (in ``val/``) of repeated evaluation ``repeat`` >= 1 (two digits at least)."""
    if repeat < 1:
        raise ValueError(f"repeat {repeat}: repeated evaluations are numbered from 1 (0 is the main val file)")
    return f"repeat_{repeat:02d}"


def val_path(run_dir: Path, step: int, repeat: int = 0) -> Path:
    """``<run>/val/step_NNNNNN.jsonl`` (repeat 0) or ``<run>/val/repeat_RR/step_NNNNNN.jsonl`` (repeat r >= 1)."""
    folder = Path(run_dir) / VAL_DIR
    return folder / (val_file_name(step) if repeat == 0 else f"{repeat_dir_name(repeat)}/{val_file_name(step)}")


# -- metrics.json ---------------------------------------------------------------------------------
RUN_STATUSES = ("running", "finished", "failed", "stopped")  # stopped: by the user (Ctrl-C); the same command resumes

EVERY_ARM_TRAIN_METRICS = (
    "critic/score/mean",
    "response_length/mean",
    "response/truncation_ratio",
    "batch/zero_variance_group_ratio",
    "actor/entropy",
    "actor/pg_loss",
    "actor/grad_norm",
    "actor/ppo_kl",
    "training/off_policy/trajectory_staleness/mean",
    "training/off_policy/evicted_samples",
    "timing_s/step",
    "timing_s/gen",
    "timing_s/update_actor",
)
TIS_TRAIN_METRICS = ("actor/tis_clip_fraction", "actor/tis_weight_mean")
#: An arm with verl's rollout correction (``method.rollout_correction``): verl's own names for its weight
#: (``rollout_is``) and its rejection mask (``rollout_rs``), as ``compute_rollout_correction_and_rejection_mask``
#: returns them, under ``actor/`` as verl's V1 trainer prefixes the worker's metrics (``rename_dict``).
IS_TRAIN_METRICS = ("actor/rollout_corr/rollout_is_mean",)
REJECTION_TRAIN_METRICS = ("actor/rollout_corr/rollout_rs_masked_fraction",)
SC_TRAIN_METRICS = ("actor/sc_correction", "actor/sc_sampler_head_mass", "actor/sc_train_head_mass")
VAL_CORE_RE = re.compile(r"^val-core/(?P<ds>.+)/acc/mean@(?P<n>\d+)$")


def val_metric_names(ds: str, n: int) -> tuple[str, str, str]:
    """The three val metric names the contract requires per evaluation set."""
    return (f"val-core/{ds}/acc/mean@{n}", f"val-aux/{ds}/response_length/mean", f"val-aux/{ds}/truncation_ratio")


def new_record(
    *, name: str, method: str, seed: int, backend: str, total_steps: int, config_sha256: str,
    versions: dict[str, str], seed_fixes: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``metrics.json`` of a run that has not started an attempt yet (``run.seed_fixes`` when given)."""
    run = {"name": name, "method": method, "seed": seed, "backend": backend, "status": "running",
           "total_steps": total_steps, "last_step": 0, "attempts": [], "config_sha256": config_sha256,
           "versions": versions}
    if seed_fixes is not None:
        run["seed_fixes"] = dict(seed_fixes)
    return {"schema_version": SCHEMA_VERSION, "run": run, "train": [], "val": []}


# -- what a run's seed fixes: run.seed_fixes ------------------------------------------------------
#: The random streams a run's seed can fix, by the name ``run.seed_fixes`` lists them under.
SEED_STREAMS: dict[str, str] = {
    "data_order": "which training prompts are drawn, in which order",
    "actor_data_order": "how the trainer shuffles a batch into mini-batches",
    "sampler": "the rollout sampler's random draws (which tokens are sampled)",
    "sampler_sync": "the noise drawn when the sampler loads the trainer's weights",
    "schedule": "the sampler's throughput per step, hence the staleness sequence",
    "evaluation": "the evaluation's sampling draws at each evaluated step",
    "trainer_engine": "the trainer engine's seed",
    "rollout_engine": "the rollout engine's seed",
}
#: What pairing by seed needs: both runs' seeds fix this stream (the same prompts in the same order).
PAIRING_STREAM = "data_order"


def seed_fixes_record(fixes: Mapping[str, str], not_fixed: Mapping[str, str], reproducible: bool
                      ) -> dict[str, Any]:
    """``run.seed_fixes``: ``fixes`` maps each stream the seed fixes (:data:`SEED_STREAMS`) to how the
    backend seeds it; ``not_fixed`` maps each random source the seed does not fix to why;
    ``reproducible``: the same command and seed give the same run on one machine."""
    unknown = sorted(set(fixes) - set(SEED_STREAMS))
    if unknown:
        raise ValueError(f"unknown seed streams {unknown}; known: {', '.join(SEED_STREAMS)}")
    return {"streams": sorted(fixes), "how": dict(sorted(fixes.items())), "not_fixed": dict(not_fixed),
            "reproducible": bool(reproducible)}


def seed_pairing(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> str | None:
    """Why two runs of equal seed are not a seed pair, from their ``run.seed_fixes`` (None: they are).

    A pair needs both records, the same ``streams`` (the seed fixes the same things in both runs),
    and :data:`PAIRING_STREAM` among them. Equal seeds, equal backends and the same evaluation are
    the caller's to check.
    """
    if not a or not b:
        return "a run does not record what its seed fixes"
    if list(a.get("streams", [])) != list(b.get("streams", [])):
        return "their seeds fix different streams"
    if PAIRING_STREAM not in a.get("streams", []):
        return f"the seed does not fix {PAIRING_STREAM}"
    return None


# -- the validation-sample line -------------------------------------------------------------------
def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _finite_or_null(x: Any) -> bool:
    return x is None or (isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x))


#: The fields of a val line, in the order they are written, with what each must be.
SAMPLE_LINE: tuple[tuple[str, str, Any], ...] = (
    ("data_source", "a non-empty string", lambda v: isinstance(v, str) and bool(v)),
    ("problem_id", "a non-empty string", lambda v: isinstance(v, str) and bool(v)),
    ("sample", "an integer >= 0", lambda v: _is_int(v) and v >= 0),
    ("score", "a finite number or null", _finite_or_null),
    ("acc", "0 or 1", lambda v: not isinstance(v, bool) and v in (0, 1)),
    ("response_length", "a number >= 0 or null", lambda v: _finite_or_null(v) and (v is None or v >= 0)),
    ("truncated", "true or false", lambda v: isinstance(v, bool)),
)
SAMPLE_FIELDS = tuple(name for name, _, _ in SAMPLE_LINE)


def sample_line(sample: Mapping[str, Any]) -> str:
    """One val line (JSON, no newline): the contract's fields of ``sample``, in contract order."""
    return json.dumps({name: sample[name] for name in SAMPLE_FIELDS})


def sample_problems(obj: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(field, "<field> must be <what>")`` for each wrong field of one parsed val line that has
    every field; empty when the line is valid."""
    return [(name, f"{name} must be {what}") for name, what, ok in SAMPLE_LINE if not ok(obj[name])]


def val_metrics(by_set: Mapping[str, Iterable[Mapping[str, Any]]], n: int) -> dict[str, float]:
    """The contract's three metrics of each set (in ``by_set``'s order) from its samples (``acc``,
    ``response_length``, ``truncated``); ``n`` is the samples per problem (the ``@n``)."""
    out: dict[str, float] = {}
    for ds, samples in by_set.items():
        samples = list(samples)
        core, length, truncation = val_metric_names(ds, n)
        out[core] = sum(s["acc"] for s in samples) / len(samples)
        out[length] = sum(s["response_length"] for s in samples) / len(samples)
        out[truncation] = sum(s["truncated"] for s in samples) / len(samples)
    return out
