"""The plan's time replanned from a verl run's first steps: ``python -m runners.capacity --from-run RUN_DIR``.

A verl run folder (docs/run_contract.md; :mod:`runners.verl_backend.ingest` reads the same files) holds the
resolved ``config.yaml`` and each attempt's file-logger lines, ``verl/attempt-NNN/metrics.jsonl``. Of its
first ``steps`` train steps (later attempts winning, as in ingestion) :func:`first_steps` takes the median of

* ``timing_s/step``, ``timing_s/gen``, ``timing_s/update_actor`` (a step, its generation, its update) and
  ``timing_s/testing`` (an evaluation, on the line of the step it follows);
* ``response_length/mean`` over the cap (the mean response fraction); the share of responses at the cap
  (:func:`runners.verl_backend.ingest.truncation_ratio`: verl's ``response_length/clip_ratio`` where its
  ``response_length/max`` reaches the cap); ``perf/mfu/actor`` (verl's FLOP convention, the plan's
  ``train_mfu``); the evaluation's mean response (``val-aux/<set>/response_length/mean@n``, over the sets).

:func:`calibrate` then gives three figures for the whole experiment: the **first estimate** (the plan with
the config's assumptions), the **calibrated estimate** (the same plan with the measured lengths, share at
the cap and MFU in place of the assumptions) and the **projection** (``total_steps`` x the measured step +
the evaluations x the measured evaluation, where one was measured, else the calibrated one), and how far the
first estimate was from the projection. A metric the run did not log keeps the config's assumption, and the
output says which.
"""

from __future__ import annotations

import dataclasses
import math
import re
import statistics
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from runners.capacity import launch_checks
from runners.capacity.estimate import evaluate, inputs_of
from runners.config import is_rehearsal
from runners.config.config_error import ConfigError

TIMINGS = {"step": "timing_s/step", "generation": "timing_s/gen", "training": "timing_s/update_actor",
           "evaluation": "timing_s/testing"}
_ABSENT = object()
EVAL_LENGTH = re.compile(r"^val-aux/[^/]+/response_length/mean@\d+$")


@dataclasses.dataclass(frozen=True)
class FirstSteps:
    """Medians of a run's first train steps (None: not logged)."""

    steps: tuple[int, ...]
    seconds: dict[str, float | None]  # by TIMINGS' names
    mean_response_fraction: float | None
    response_at_cap_fraction: float | None
    train_mfu: float | None
    eval_mean_response_fraction: float | None


def _median(values: list[Any]) -> float | None:
    numbers = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)]
    return statistics.median(numbers) if numbers else None


def first_steps(run_dir: Path, cap: int, steps: int = 10) -> FirstSteps:
    """The medians of the first ``steps`` train steps of the run in ``run_dir`` (the module docstring)."""
    from runners.verl_backend import ingest

    try:
        train, val = ingest.merged_rows(ingest.read_attempts(run_dir))
        chosen = sorted(s for s in train if s >= 1)[:steps]
        if not chosen:
            raise ConfigError(f"{run_dir}: no train step logged yet (verl/attempt-*/metrics.jsonl); calibrate after the "
                              "first steps")
        rows = [train[s] for s in chosen]
        truncation = [ingest.truncation_ratio(r, cap, s) for s, r in zip(chosen, rows, strict=True)]
    except ingest.IngestError as err:
        raise ConfigError(f"{run_dir}: {err}") from None
    last = max(chosen)
    seconds = {name: _median([r.get(key) for r in rows]) for name, key in TIMINGS.items() if name != "evaluation"}
    evaluation_rows = [row for s, row in train.items() if s <= last] + [row for s, row in val.items() if s <= last]
    seconds["evaluation"] = _median([r.get(TIMINGS["evaluation"]) for r in evaluation_rows])
    mean_response = _median([r.get("response_length/mean") for r in rows])
    eval_lengths = [v for s, row in val.items() if s <= last for k, v in row.items() if EVAL_LENGTH.match(k)]
    eval_mean = statistics.fmean(eval_lengths) if eval_lengths else None
    mfu = _median([r.get("perf/mfu/actor") for r in rows])
    at_cap = _median(truncation)
    return FirstSteps(
        steps=tuple(chosen), seconds=seconds,
        mean_response_fraction=None if mean_response is None else min(mean_response / cap, 1.0),
        response_at_cap_fraction=at_cap, train_mfu=mfu if mfu is not None and 0 < mfu <= 1 else None,
        eval_mean_response_fraction=None if eval_mean is None else min(eval_mean / cap, 1.0))


def run_config(run_dir: Path, changes: list[str]) -> DictConfig:
    """The run's resolved ``config.yaml`` with ``key=value`` ``changes``, checked by the schema."""
    from runners.config.config_checks import check_schema

    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"--from-run {run_dir}: no config.yaml (not a run folder of the launcher)")
    try:
        cfg = OmegaConf.load(path)
    except Exception as err:  # noqa: BLE001  (any YAML or decoding error of a damaged file is named, not raised)
        raise ConfigError(f"--from-run {run_dir}: config.yaml cannot be read ({launch_checks.one_line(err)})") from None
    if OmegaConf.select(cfg, "backend.name") != "verl":
        raise ConfigError(f"--from-run {run_dir}: backend.name={OmegaConf.select(cfg, 'backend.name')}: a verl run's "
                          "first steps are what the plan calibrates from")
    parsed = {}
    for change in changes:
        key, sep, value = change.partition("=")
        if not sep or not key:
            raise ConfigError(f"{change}: with --from-run, changes are key=value (e.g. trainer.total_steps=1000)")
        if OmegaConf.select(cfg, key, default=_ABSENT) is _ABSENT:
            raise ConfigError(f"{change}: {key} is not a key of the run's config")
        parsed[key] = _yaml_value(value)
    cfg = launch_checks.with_changes(cfg, parsed)
    check_schema(cfg)
    return cfg


def _yaml_value(text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def calibrate(run_dir: str | Path, changes: list[str] | None = None, steps: int = 10) -> dict[str, Any]:
    """The first estimate, the calibrated estimate and the projection of the run in ``run_dir`` (the module
    docstring); ConfigError where the folder holds no config or no step."""
    run_dir = Path(run_dir)
    if steps < 1:
        raise ConfigError(f"--steps {steps}: must be >= 1")
    cfg = run_config(run_dir, changes or [])
    cap = int(cfg.rollout.max_response_length)
    measured = first_steps(run_dir, cap, steps)
    first = evaluate(inputs_of(cfg))["time"]
    t = cfg.backend.capacity.time
    replaced = {"mean_response_fraction": measured.mean_response_fraction,
                "response_at_cap_fraction": measured.response_at_cap_fraction, "train_mfu": measured.train_mfu,
                "eval_mean_response_fraction": measured.eval_mean_response_fraction}
    replaced = {k: v for k, v in replaced.items() if v is not None}
    if "response_at_cap_fraction" in replaced:  # a share at the cap needs at least that mean
        mean = replaced.get("mean_response_fraction", float(t.mean_response_fraction))
        replaced["response_at_cap_fraction"] = min(replaced["response_at_cap_fraction"], mean)
    if "eval_mean_response_fraction" in replaced:
        replaced["eval_mean_response_fraction"] = max(replaced["eval_mean_response_fraction"],
                                                      float(t.eval_response_at_cap_fraction))
    calibrated_cfg = launch_checks.with_changes(cfg, {f"backend.capacity.time.{k}": v for k, v in replaced.items()})
    calibrated = evaluate(inputs_of(calibrated_cfg))["time"]
    total_steps, evaluations = int(cfg.trainer.total_steps), calibrated["evaluations"]
    step = measured.seconds["step"]
    evaluation = measured.seconds["evaluation"]
    projection = None
    if step is not None:
        seconds = total_steps * step + evaluations * (evaluation if evaluation is not None
                                                      else calibrated["evaluation_seconds"])
        projection = {"total_hours": seconds / 3600, "gpu_hours_per_arm": seconds / 3600 * calibrated["gpus"],
                      "evaluation_measured": evaluation is not None}
    ratios = {}
    for name, planned in (("step", first["step_seconds"]), ("generation", first["generation"]["seconds"]),
                          ("training", first["train_seconds"]), ("evaluation", first["evaluation_seconds"])):
        if measured.seconds.get(name):
            ratios[name] = planned / measured.seconds[name]
    if projection is not None:
        ratios["gpu_hours_per_arm"] = first["gpu_hours_per_arm"] / projection["gpu_hours_per_arm"]
    kept = sorted({"mean_response_fraction", "response_at_cap_fraction", "train_mfu",
                   "eval_mean_response_fraction"} - set(replaced))
    return {"run_dir": str(run_dir), "run": str(cfg.run_name), "gpu": str(cfg.gpu.name), "steps": list(measured.steps),
            "measured": dataclasses.asdict(measured), "assumptions_replaced": replaced, "assumptions_kept": kept,
            "first": _time_summary(first), "calibrated": _time_summary(calibrated), "projection": projection,
            "first_over_measured": ratios, "rehearsal": _is_rehearsal(cfg), "overrides": " ".join(f"backend.capacity.time.{k}={v:.4g}"
                                                                 for k, v in replaced.items())}


def _is_rehearsal(cfg: DictConfig) -> bool:

    return is_rehearsal(cfg)


def _time_summary(t: dict[str, Any]) -> dict[str, Any]:
    return {"step_seconds": t["step_seconds"], "generation_seconds": t["generation"]["seconds"],
            "training_seconds": t["train_seconds"], "evaluation_seconds": t["evaluation_seconds"],
            "total_hours": t["total_hours"], "gpu_hours_per_arm": t["gpu_hours_per_arm"],
            "range": t["range"]}


def _s(value: float | None) -> str:
    """Three significant figures (a rehearsal's hundredths of a GPU-hour and a reference's hundreds alike)."""
    return "-" if value is None else f"{value:.3g}"


def markdown(c: dict[str, Any]) -> str:
    """What ``--from-run`` prints."""
    m, f, cal, proj = c["measured"], c["first"], c["calibrated"], c["projection"]
    steps = c["steps"]
    lines = [f"# Capacity plan of {c['run']} replanned from its first steps ({steps[0]}-{steps[-1]}, {len(steps)} "
             f"steps; gpu {c['gpu']})", "",
             "| | measured (median) | first estimate | calibrated estimate |", "|---|---:|---:|---:|"]
    for name, key in (("step", "step_seconds"), ("generation", "generation_seconds"), ("training", "training_seconds"),
                      ("evaluation", "evaluation_seconds")):
        lines.append(f"| {name} (s) | {_s(m['seconds'].get(name))} | {_s(f[key])} | {_s(cal[key])} |")
    lines += ["", f"Whole experiment per arm: first estimate **{_s(f['gpu_hours_per_arm'])} GPU-hours** (range "
                  f"{_s(f['range']['low_gpu_hours_per_arm'])}-{_s(f['range']['high_gpu_hours_per_arm'])}); calibrated "
                  f"**{_s(cal['gpu_hours_per_arm'])}**"
              + (f"; projected from the measured step{' and evaluation' if proj['evaluation_measured'] else ''} "
                 f"**{_s(proj['gpu_hours_per_arm'])} GPU-hours** ({_s(proj['total_hours'])} hours)" if proj else "")
              + ".", ""]
    if c["rehearsal"]:
        lines += ["This is a CPU rehearsal: its times are a CPU's, the plan's a GPU's (gpu=), so the ratios below check "
                  "the mechanics, not the plan.", ""]
    if c["first_over_measured"]:
        lines += ["How far the first estimate was (estimate / measured): " + ", ".join(
            f"{k} {v:.2f}x" for k, v in c["first_over_measured"].items()) + ".", ""]
    if c["overrides"]:
        lines += [f"Measured in place of the assumptions: `{c['overrides']}` (add them to the launch, or to "
                  "conf/backend/verl.yaml's backend.capacity.time, for the next plans)."]
    if c["assumptions_kept"]:
        lines += [f"Not logged by the run, kept from the config: {', '.join(c['assumptions_kept'])}."]
    lines.append("")
    return "\n".join(lines)
