"""The plan's time replanned from a verl run's first steps: ``python -m runners.capacity --from-run RUN_DIR``.

A verl run folder (docs/run_contract.md; :mod:`runners.run.attempt_logs` reads them, for ingestion too) holds the
resolved ``config.yaml`` and each attempt's file-logger lines, ``verl/attempt-NNN/metrics.jsonl``. Of its
first ``steps`` train steps (later attempts winning, as in ingestion) :func:`first_steps` takes the median of
the timers verl 0.9.1's V1 ``separate_async`` trainer logs (``verl/trainer/ppo/v1/trainer_base.py``, ``fit`` and
``_step_once``; ``trainer_separate_async.py``, ``on_step_end``), :data:`TIMERS`:

* ``timing_s/step``: one step (the sample, the update, a checkpoint save, the weight sync);
* ``timing_s/gen``: **the trainer's wait for the replay buffer's sample**, not generation: the standalone vLLM
  replicas generate all the time, and V1 logs no timer of generation itself (the rollouter of verl's
  ``experimental/fully_async_policy``, which logs ``fully_async/rollouter/active_time``, is not what V1 runs);
* ``timing_s/old_log_prob``, ``timing_s/reward``, ``timing_s/adv``, ``timing_s/update_actor``: the trainer's
  work on the batch (bypass mode copies the rollout's log-probs: ``old_log_prob`` is short);
* ``timing_s/update_weights``: the weight sync to the standalone replicas; ``timing_s/save_checkpoint``;
* ``timing_s/testing``: an evaluation, on the line of the step it follows.

and the lengths: ``response_length/mean`` over the cap, the share at the cap
(:func:`runners.run.attempt_logs.truncation_ratio`), ``perf/mfu/actor`` (the plan's ``train_mfu``) and the
evaluation's ``val-aux/<set>/response_length/mean@n``.

**Which side bounds the step.** The trainer consumes one batch a step; in the steady state the replicas produce
one a step. Where the trainer waits (``gen`` at least :data:`WAIT_BOUND` of the step) the rollout is the
bottleneck and the rollout's time per step is measured: the step less the checkpoint save. Otherwise only a
bound is known (the rollout kept up), and no decode speed is fitted.

**The fit.** :func:`calibrate` plans the run's own config with the measured lengths and MFU (the *calibrated*
plan) and, where the rollout is measured, finds the ``decode_bandwidth_efficiency`` at which that plan's
rollout takes the measured time (bisection; the plan's decode is monotone in it): the **fitted** plan. The
**recommendation** never plans faster than the measurement: the larger of the projection from the measured
steps (``total_steps x step + evaluations + the bill``) and the fitted plan at lengths no shorter than the
config's assumptions (the first steps' responses are short of the later ones). A run whose steps are more than
:data:`SLOW` x the plan at its own lengths gets a warning at the top of the output.

Changes after the run folder (``key=value``) apply to the run's config, so the plan is made for another total,
another GPU (``gpu=NAME``: a preset of ``conf/gpu/``, the efficiencies fitted here carried over), another
placement; another arm (``method=``) or any other config group cannot be swapped in: a run measured one arm.
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
from runners.capacity.estimate import Inputs, evaluate, inputs_of
from runners.config.config_error import ConfigError

#: The timers of verl 0.9.1's V1 separate_async trainer (the module docstring), by the names used here.
TIMERS = {"step": "timing_s/step", "sample_wait": "timing_s/gen", "old_log_prob": "timing_s/old_log_prob",
          "reward": "timing_s/reward", "advantage": "timing_s/adv", "update_actor": "timing_s/update_actor",
          "weight_sync": "timing_s/update_weights", "save_checkpoint": "timing_s/save_checkpoint",
          "evaluation": "timing_s/testing"}
#: The trainer's own work on a batch: the timers inside ``_step_once`` after the sample.
TRAINER_TIMERS = ("old_log_prob", "reward", "advantage", "update_actor")
#: A wait of at least this share of the step: the rollout is the bottleneck, and its time is measured.
WAIT_BOUND = 0.1
#: Steps slower than this multiple of the plan (at the lengths they generated) are warned about.
SLOW = 1.5
_ABSENT = object()
EVAL_LENGTH = re.compile(r"^val-aux/[^/]+/response_length/mean@\d+$")
LENGTH_KEYS = ("mean_response_fraction", "response_at_cap_fraction", "eval_mean_response_fraction")


@dataclasses.dataclass(frozen=True)
class FirstSteps:
    """Medians of a run's first train steps (None: not logged)."""

    steps: tuple[int, ...]
    seconds: dict[str, float | None]  # by TIMERS' names, plus "training" (the trainer's timers summed)
    mean_response_fraction: float | None
    response_at_cap_fraction: float | None
    train_mfu: float | None
    eval_mean_response_fraction: float | None

    @property
    def rollout_bound(self) -> bool:
        """Did the trainer wait for the replay buffer (``timing_s/gen``) at least :data:`WAIT_BOUND` of a step?"""
        step, wait = self.seconds.get("step"), self.seconds.get("sample_wait")
        return bool(step and wait is not None and wait >= WAIT_BOUND * step)

    @property
    def rollout_seconds(self) -> float | None:
        """The rollout's time per step where it bounds the step (the step less the checkpoint save), else None."""
        if not self.rollout_bound:
            return None
        return self.seconds["step"] - (self.seconds.get("save_checkpoint") or 0.0)


def _median(values: list[Any]) -> float | None:
    numbers = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)]
    return statistics.median(numbers) if numbers else None


def first_steps(run_dir: Path, cap: int, steps: int = 10) -> FirstSteps:
    """The medians of the first ``steps`` train steps of the run in ``run_dir`` (the module docstring)."""
    from runners.run import attempt_logs

    try:
        train, val = attempt_logs.merged_rows(attempt_logs.read_attempts(run_dir))
        chosen = sorted(s for s in train if s >= 1)[:steps]
        if not chosen:
            raise ConfigError(f"{run_dir}: no train step logged yet (verl/attempt-*/metrics.jsonl); calibrate after the "
                              "first steps")
        rows = [train[s] for s in chosen]
        truncation = [attempt_logs.truncation_ratio(r, cap, s) for s, r in zip(chosen, rows, strict=True)]
    except attempt_logs.IngestError as err:
        raise ConfigError(f"{run_dir}: {err}") from None
    last = max(chosen)
    seconds = {name: _median([r.get(key) for r in rows]) for name, key in TIMERS.items() if name != "evaluation"}
    trainer = [sum(float(r[TIMERS[t]]) for t in TRAINER_TIMERS if isinstance(r.get(TIMERS[t]), int | float))
               for r in rows if any(TIMERS[t] in r for t in TRAINER_TIMERS)]
    seconds["training"] = _median(trainer)
    evaluation_rows = [row for s, row in train.items() if s <= last] + [row for s, row in val.items() if s <= last]
    seconds["evaluation"] = _median([r.get(TIMERS["evaluation"]) for r in evaluation_rows])
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


# -- the run's config and its changes --------------------------------------------------------------------
def run_config(run_dir: Path, changes: list[str]) -> DictConfig:
    """The run's resolved ``config.yaml`` with ``key=value`` ``changes`` (``gpu=NAME``: a GPU preset), checked by
    the schema; a change of another config group is a one-line ConfigError. A config written before the GPU presets
    had ``intra_node_link`` gets its preset's (``conf/gpu/<gpu.name>.yaml``)."""
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
    parsed: dict[str, Any] = {}
    if OmegaConf.select(cfg, "gpu.intra_node_link") is None:  # a config older than the key: its preset's link
        parsed["gpu.intra_node_link"] = gpu_preset(str(cfg.gpu.name))["intra_node_link"]
    for change in changes:
        key, sep, value = change.partition("=")
        if not sep or not key:
            raise ConfigError(f"{change}: with --from-run, changes are key=value (e.g. trainer.total_steps=1000)")
        current = OmegaConf.select(cfg, key, default=_ABSENT)
        if current is _ABSENT:
            raise ConfigError(f"{change}: {key} is not a key of the run's config")
        if key == "gpu":
            parsed[key] = gpu_preset(value)
        elif isinstance(current, DictConfig):
            raise ConfigError(f"{change}: {key} is a config group; --from-run replans the measured run onto gpu=NAME "
                              "or changed keys (key.sub=value), not another group (a run measured one arm: replan "
                              "another arm from its own run)")
        else:
            parsed[key] = _yaml_value(value)
    cfg = launch_checks.with_changes(cfg, parsed)
    check_schema(cfg)
    return cfg


def gpu_preset(name: str) -> dict[str, Any]:
    """The resolved ``conf/gpu/<name>.yaml`` (its schema applied); ConfigError naming the presets else."""
    node = launch_checks.compose(["backend=verl", f"gpu={name}"]).gpu
    return OmegaConf.to_container(node, resolve=True)


def _yaml_value(text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


# -- the fit ----------------------------------------------------------------------------------------------
def _rollout_seconds(time: dict[str, Any]) -> float:
    return time["generation"]["seconds"] + time["sc_head_seconds"]


def _with_time(i: Inputs, **changes: float) -> Inputs:
    return dataclasses.replace(i, time=dataclasses.replace(i.time, **changes))


def fit_decode_efficiency(i: Inputs, rollout_seconds: float) -> tuple[float, bool]:
    """``(decode_bandwidth_efficiency, exact)``: the efficiency at which the plan of ``i`` spends
    ``rollout_seconds`` on a step's rollout (bisection on (0, 1]); not ``exact`` where the measurement lies outside
    what any efficiency gives (then the bound nearest to it)."""
    def rollout(eff: float) -> float:
        return _rollout_seconds(evaluate(_with_time(i, decode_bandwidth_efficiency=eff))["time"])

    low, high = 1e-3, 1.0
    if rollout(high) >= rollout_seconds:
        return high, math.isclose(rollout(high), rollout_seconds, rel_tol=1e-3)
    if rollout(low) <= rollout_seconds:
        return low, False
    for _ in range(40):
        mid = math.sqrt(low * high)
        low, high = (mid, high) if rollout(mid) > rollout_seconds else (low, mid)
    return math.sqrt(low * high), True


def calibrate(run_dir: str | Path, changes: list[str] | None = None, steps: int = 10) -> dict[str, Any]:
    """The first estimate, the calibrated and fitted plans, the projection and the recommendation of the run in
    ``run_dir`` (the module docstring); ConfigError where the folder holds no config or no step."""
    run_dir = Path(run_dir)
    if steps < 1:
        raise ConfigError(f"--steps {steps}: must be >= 1")
    measured_cfg = run_config(run_dir, [])
    cfg = run_config(run_dir, changes or [])
    replanned_gpu = str(cfg.gpu.name) != str(measured_cfg.gpu.name)
    cap = int(measured_cfg.rollout.max_response_length)
    measured = first_steps(run_dir, cap, steps)
    t = cfg.backend.capacity.time
    first_inputs = inputs_of(cfg)
    first = evaluate(first_inputs)["time"]
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
    # the plan of the measured run itself (its GPU) at the measured lengths: what the steps are compared with
    at_measured = _with_time(inputs_of(measured_cfg), **replaced)
    calibrated = evaluate(dataclasses.replace(first_inputs, time=dataclasses.replace(first_inputs.time, **replaced)))["time"]
    fitted_efficiency, exact = None, False
    if (rollout := measured.rollout_seconds) is not None:
        fitted_efficiency, exact = fit_decode_efficiency(at_measured, rollout)
    # the recommendation's plan: measured MFU and fitted decode, lengths never shorter than the config assumes
    recommended_time = {k: v for k, v in replaced.items() if k not in LENGTH_KEYS}
    for key in LENGTH_KEYS:
        if key in replaced:
            recommended_time[key] = max(replaced[key], float(t[key]))
    if recommended_time.get("response_at_cap_fraction", 0) > recommended_time.get("mean_response_fraction", 1):
        recommended_time["mean_response_fraction"] = recommended_time["response_at_cap_fraction"]
    if fitted_efficiency is not None:
        recommended_time["decode_bandwidth_efficiency"] = min(fitted_efficiency, float(t.decode_bandwidth_efficiency))
    fitted = evaluate(_with_time(first_inputs, **recommended_time))["time"]
    plan_at_measured = evaluate(at_measured)["time"]

    total_steps, evaluations = int(cfg.trainer.total_steps), calibrated["evaluations"]
    step, evaluation = measured.seconds["step"], measured.seconds["evaluation"]
    projection = None
    if step is not None and not replanned_gpu:
        seconds = (total_steps * step + evaluations * (evaluation if evaluation is not None else calibrated["evaluation_seconds"])
                   + fitted["bill"]["seconds"])
        projection = {"total_hours": seconds / 3600, "gpu_hours_per_arm": seconds / 3600 * calibrated["gpus"],
                      "evaluation_measured": evaluation is not None}
    candidates = [fitted["gpu_hours_per_arm"]] + ([projection["gpu_hours_per_arm"]] if projection else [])
    recommendation = {"gpu_hours_per_arm": max(candidates),
                      "from": "the projection of the measured steps" if projection and
                      projection["gpu_hours_per_arm"] >= fitted["gpu_hours_per_arm"] else "the fitted plan",
                      "overrides": {k: v for k, v in recommended_time.items()
                                    if not math.isclose(v, float(t[k]), rel_tol=1e-9)}}
    ratios = {}
    if not replanned_gpu:
        for name, planned in (("step", first["step_seconds"]), ("training", first["train_seconds"]),
                              ("evaluation", first["evaluation_seconds"])):
            if measured.seconds.get(name):
                ratios[name] = planned / measured.seconds[name]
        if measured.rollout_seconds:
            ratios["rollout"] = _rollout_seconds(first) / measured.rollout_seconds
        if projection is not None:
            ratios["gpu_hours_per_arm"] = first["gpu_hours_per_arm"] / projection["gpu_hours_per_arm"]
    slow = None
    if step and not replanned_gpu and (factor := step / plan_at_measured["step_seconds"]) > SLOW:
        slow = factor
    kept = sorted({"mean_response_fraction", "response_at_cap_fraction", "train_mfu",
                   "eval_mean_response_fraction"} - set(replaced))
    return {"run_dir": str(run_dir), "run": str(cfg.run_name), "gpu": str(cfg.gpu.name),
            "measured_gpu": str(measured_cfg.gpu.name), "steps": list(measured.steps),
            "measured": {**dataclasses.asdict(measured), "rollout_bound": measured.rollout_bound,
                         "rollout_seconds": measured.rollout_seconds},
            "timers": dict(TIMERS), "assumptions_replaced": replaced, "assumptions_kept": kept,
            "first": _time_summary(first), "calibrated": _time_summary(calibrated),
            "at_measured_lengths": _time_summary(plan_at_measured), "fitted": _time_summary(fitted),
            "fitted_decode_bandwidth_efficiency": fitted_efficiency, "fit_exact": exact, "projection": projection,
            "recommendation": recommendation, "first_over_measured": ratios, "slower_than_planned": slow,
            "rehearsal": OmegaConf.select(cfg, "backend.platform", default="gpu") == "cpu",  # the run's recorded platform
            "overrides": " ".join(f"backend.capacity.time.{k}={v:.4g}" for k, v in recommendation["overrides"].items())}


def _time_summary(t: dict[str, Any]) -> dict[str, Any]:
    return {"step_seconds": t["step_seconds"], "rollout_seconds": _rollout_seconds(t),
            "generation_seconds": t["generation"]["seconds"], "training_seconds": t["train_seconds"],
            "evaluation_seconds": t["evaluation_seconds"], "total_hours": t["total_hours"],
            "gpu_hours_per_arm": t["gpu_hours_per_arm"], "range": t["range"], "bound_by": t["bound_by"],
            "bill_seconds": t["bill"]["seconds"]}


def _s(value: float | None) -> str:
    """Three significant figures (a rehearsal's hundredths of a GPU-hour and a reference's hundreds alike)."""
    return "-" if value is None else f"{value:.3g}"


def _ratio(value: float) -> str:
    """A ratio in three significant figures (a CPU rehearsal's are thousandths: never "0.00x")."""
    return f"{value:.3g}x"


def markdown(c: dict[str, Any]) -> str:
    """What ``--from-run`` prints."""
    m, f, cal, fit, proj, rec = (c["measured"], c["first"], c["calibrated"], c["fitted"], c["projection"],
                                 c["recommendation"])
    steps, secs = c["steps"], c["measured"]["seconds"]
    title = f"# Capacity plan of {c['run']} replanned from its first steps ({steps[0]}-{steps[-1]}, {len(steps)} steps"
    title += f"; measured on {c['measured_gpu']}" + (f", replanned onto {c['gpu']})" if c["gpu"] != c["measured_gpu"] else ")")
    lines = [title, ""]
    if c["slower_than_planned"]:
        lines += [f"**WARNING: the first steps took {c['slower_than_planned']:.1f}x the plan's step at the lengths "
                  f"they generated** ({_s(secs['step'])} s against {_s(c['at_measured_lengths']['step_seconds'])} s). "
                  "Budget from the recommendation below, not from the first estimate; find the cause before the "
                  "other arms launch (vLLM preempting, a slow link, the evaluation's share).", ""]
    lines += ["| | measured (median) | first estimate | at the measured lengths | fitted |", "|---|---:|---:|---:|---:|",
              f"| step (`{TIMERS['step']}`) | {_s(secs['step'])} | {_s(f['step_seconds'])} | "
              f"{_s(c['at_measured_lengths']['step_seconds'])} | {_s(fit['step_seconds'])} |",
              f"| rollout per step (the step less `{TIMERS['save_checkpoint']}` where the trainer waits) | "
              f"{_s(m['rollout_seconds'])} | {_s(f['rollout_seconds'])} | {_s(c['at_measured_lengths']['rollout_seconds'])} "
              f"| {_s(fit['rollout_seconds'])} |",
              f"| the trainer's wait for the replay buffer (`{TIMERS['sample_wait']}`: not generation) | "
              f"{_s(secs['sample_wait'])} | | | |",
              f"| training (`{'` + `'.join(TIMERS[k] for k in TRAINER_TIMERS)}`) | {_s(secs['training'])} | "
              f"{_s(f['training_seconds'])} | {_s(c['at_measured_lengths']['training_seconds'])} | "
              f"{_s(fit['training_seconds'])} |",
              f"| weight sync (`{TIMERS['weight_sync']}`) | {_s(secs['weight_sync'])} | | | |",
              f"| evaluation (`{TIMERS['evaluation']}`) | {_s(secs['evaluation'])} | {_s(f['evaluation_seconds'])} | "
              f"{_s(c['at_measured_lengths']['evaluation_seconds'])} | {_s(fit['evaluation_seconds'])} |", ""]
    if m["rollout_bound"]:
        eff = c["fitted_decode_bandwidth_efficiency"]
        lines += [f"The trainer waited for samples ({_s(secs['sample_wait'])} s of {_s(secs['step'])} s): the rollout "
                  f"bounds the step. Decode fitted to it: decode_bandwidth_efficiency {eff:.3g}"
                  + ("" if c["fit_exact"] else " (the nearest bound: no efficiency reproduces the measurement)") + ".", ""]
    else:
        lines += ["The trainer hardly waited for samples: the rollout kept up, its speed is bounded (not measured) "
                  "and no decode speed is fitted.", ""]
    if c["rehearsal"]:
        lines += ["This is a CPU rehearsal: its times are a CPU's, the plan's a GPU's (gpu=), so the ratios below check "
                  "the mechanics, not the plan.", ""]
    lines += [f"Whole experiment per arm: first estimate {_s(f['gpu_hours_per_arm'])} GPU-hours (range "
              f"{_s(f['range']['low_gpu_hours_per_arm'])}-{_s(f['range']['high_gpu_hours_per_arm'])}); at the measured "
              f"lengths {_s(cal['gpu_hours_per_arm'])}; fitted {_s(fit['gpu_hours_per_arm'])}"
              + (f"; projected from the measured step{' and evaluation' if proj['evaluation_measured'] else ''} "
                 f"{_s(proj['gpu_hours_per_arm'])} ({_s(proj['total_hours'])} hours)" if proj else "") + ".", "",
              f"**Budget: {_s(rec['gpu_hours_per_arm'])} GPU-hours per arm** ({rec['from']}; never less than what the "
              "measured steps project, with lengths no shorter than the config assumes).", ""]
    if c["first_over_measured"]:
        lines += ["How far the first estimate was (estimate / measured): " + ", ".join(
            f"{k} {_ratio(v)}" for k, v in c["first_over_measured"].items()) + ".", ""]
    if c["overrides"]:
        lines += [f"For the other arms' plans: `{c['overrides']}` (measured MFU, fitted decode; lengths only where "
                  "longer than assumed)."]
    if c["assumptions_kept"]:
        lines += [f"Not logged by the run, kept from the config: {', '.join(c['assumptions_kept'])}."]
    lines.append("")
    return "\n".join(lines)
