"""``backend.dry_run=true``: write the exact launch, then check it against the installed verl.

What is written into ``<run_dir>/verl/dry_run/`` and checked, in a fresh Python process with the launch's own
environment (verl imported as the real driver imports it): docs/verl_reference.md, "What the dry run checks".
Keys that exist only in newer verl (:data:`~runners.verl_side.revisions.newer_keys.NEWER_KEYS`) are kept out of the
composition where the installed verl lacks them and checked against the table, and a score-centering setting
against the rules newer verl enforces (:data:`~runners.verl_side.backend.sc_requirements.SC_REQUIRES`). No Ray, no GPU.

``python -m runners.verl_side.backend.dry_run <request.json>`` is that checking process.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from ablations.arms import ArmSpec
from runners.config.config_error import ConfigError
from runners.config.hydra_override import compose_offline, parse
from runners.run import verl_files
from runners.verl_side import head as verl_head
from runners.verl_side.backend import launch, sc_requirements
from runners.verl_side.backend import overrides as ovr
from runners.verl_side.backend.launch_plan import LaunchPlan
from runners.verl_side.backend.verl_run import VerlRun
from runners.verl_side.revisions import config_facts, installed, newer_keys

REPORT = "report.json"


def compose_verl(overrides: list[str]) -> DictConfig:
    """verl's ``ppo_trainer`` config with ``overrides``, composed offline."""
    return compose_offline("verl.trainer.config", "ppo_trainer", overrides)


def launch_shape_problems(cfg: DictConfig) -> list[str]:
    """What the V1 separate_async trainer would reject or silently get wrong at start-up."""
    sel = lambda key: OmegaConf.select(cfg, key)  # noqa: E731
    rollout = "actor_rollout_ref.rollout"
    problems = [] if sel("trainer.use_v1") is True else ["trainer.use_v1 must be True"]
    if sel("trainer.v1.trainer_mode") == "separate_async":
        sync, mini = sel("trainer.v1.separate_async.parameter_sync_step"), sel("actor_rollout_ref.actor.ppo_mini_batch_size")
        if (batch := sel("data.train_batch_size")) != sync * mini:
            problems.append(f"separate_async needs data.train_batch_size ({batch}) = parameter_sync_step ({sync}) x "
                            f"ppo_mini_batch_size ({mini})")
        if sel(f"{rollout}.checkpoint_engine.backend") == "naive":
            problems.append(f"separate_async needs a non-naive {rollout}.checkpoint_engine.backend")
        if sel("actor_rollout_ref.hybrid_engine") is not False:
            problems.append("separate_async with standalone rollout needs actor_rollout_ref.hybrid_engine=False")
        if not (sel(f"{rollout}.nnodes") or 0) >= 1:
            problems.append(f"standalone rollout needs {rollout}.nnodes >= 1")
    gpus, tp = sel(f"{rollout}.n_gpus_per_node"), sel(f"{rollout}.tensor_model_parallel_size")
    if gpus % tp:
        problems.append(f"{rollout}.n_gpus_per_node ({gpus}) must be a multiple of tensor_model_parallel_size ({tp})")
    val = cfg.actor_rollout_ref.rollout.val_kwargs
    if val.n > 1 and not (val.do_sample and val.temperature > 0):
        problems.append("val_kwargs.n > 1 needs do_sample=True and temperature > 0 (else n identical greedy samples)")
    for key in ("trainer.default_local_dir", "trainer.validation_data_dir"):
        if not Path(str(sel(key))).is_absolute():
            problems.append(f"{key} must be absolute (Ray actors run in another working directory)")
    logger_path = (sel("ray_kwargs.ray_init.runtime_env.env_vars") or {}).get("VERL_FILE_LOGGER_PATH")
    if "file" in list(sel("trainer.logger")) and not (logger_path and Path(logger_path).is_absolute()):
        problems.append("the file logger needs an absolute VERL_FILE_LOGGER_PATH in ray_kwargs.ray_init.runtime_env.env_vars")
    return problems


def _data_problems(cfg: DictConfig) -> tuple[list[str], list[str]]:
    """``(problems, notes)`` about the parquet files: checked when they exist, noted when not."""
    problems, notes = [], []
    files = {"train": list(cfg.data.train_files), "val": list(cfg.data.val_files)}
    sources: dict[str, set[str]] = {}
    for role, paths in files.items():
        for path in paths:
            if not Path(path).exists():
                notes.append(f"{role} file {path} does not exist yet (data preparation writes it)")
                continue
            import pyarrow.parquet as pq

            try:
                column = pq.read_table(path, columns=["data_source"]).column("data_source").to_pylist()
            except Exception as err:  # noqa: BLE001 - unreadable file or no such column
                problems.append(f"{role} file {path}: cannot read its data_source column ({err})")
                continue
            sources[path] = set(column)
    val_names = [sources[p] for p in files["val"] if p in sources]
    flat = [name for names in val_names for name in names]
    if len(flat) != len(set(flat)) or any(len(names) != 1 for names in val_names):
        problems.append(f"each evaluation file needs one data_source of its own, got {val_names}")
    return problems, notes


def split(overrides: list[str]) -> tuple[list[str], dict[str, Any]]:
    """``(composable, deferred)``: the newer keys the installed verl lacks are deferred (``{key: value}``)."""
    native: list[str] = []
    deferred: dict[str, Any] = {}
    for item in overrides:
        key, value, _ = parse(item)
        if key in newer_keys.BY_KEY and not newer_keys.known(newer_keys.BY_KEY[key]):
            deferred[key] = value
        else:
            native.append(item)
    return native, deferred


def with_deferred(cfg: DictConfig, deferred: dict[str, Any]) -> DictConfig:
    """A copy of the composed verl config with the deferred values set (for the table checks)."""
    view = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    with open_dict(view):
        for key, value in deferred.items():
            OmegaConf.update(view, key, value, force_add=True)
    return view


def score_centering_problems(cfg: DictConfig, carrier: str | None) -> list[str]:
    """What the arm's head carrier (``carrier``: a :class:`~runners.verl_side.revisions.installed.HeadCarrier`
    name, None for an arm without score centering) would reject in this setting; verl's own score-centering
    keys set without it are a problem too."""
    from ablations.arms import all_arms, parse_is_threshold

    get = lambda key, absent=None: OmegaConf.select(cfg, key, default=absent)  # noqa: E731
    on = [bool(get(key, False)) for key in (newer_keys.DRIVER_SC_KEY, newer_keys.ACTOR_SC_KEY)]
    if carrier is None:
        return [f"verl's score centering is switched on ({newer_keys.DRIVER_SC_KEY}) for an arm without it"] if any(on) else []
    problems: list[str] = []
    if carrier == installed.VERL_CARRIES.name:
        if not all(on):
            problems.append(f"score centering must be on in both {newer_keys.DRIVER_SC_KEY} and {newer_keys.ACTOR_SC_KEY}")
        topk = get(newer_keys.TOPK_KEY, 0)
        if not newer_keys.BY_KEY[newer_keys.TOPK_KEY].value_ok(topk):
            problems.append(f"{newer_keys.TOPK_KEY} must be an integer >= 1, got {topk!r}")
    else:
        if any(on):
            problems.append(f"{newer_keys.DRIVER_SC_KEY} belongs to verl as head carrier, not the project's")
        topk_key = f"{config_facts.ROLLOUT}.custom.{verl_head.CUSTOM_KEY}"
        topk = get(topk_key, 0)
        if not (isinstance(topk, int) and topk >= 1):
            problems.append(f"{topk_key} must be an integer >= 1 (method.top_k), got {topk!r}")
        elif not (isinstance(cap := get(f"{config_facts.ROLLOUT}.engine_kwargs.vllm.max_logprobs", 20), int) and cap >= topk):
            problems.append(f"{config_facts.ROLLOUT}.engine_kwargs.vllm.max_logprobs={cap!r} is below the head size {topk}: "
                            "vLLM refuses the request")
    for req in (r for r in sc_requirements.SC_REQUIRES if r.applies(carrier)):
        if not req.allows(got := get(req.key, req.absent)):
            problems.append(f"score centering needs {req.key} {req.wanted()}, got {got!r} ({req.why})")
    for name in sc_requirements.SC_SIDES_AGREE:  # compared as written: a key set on one side only is a mismatch
        a, b = get(f"{config_facts.ACTOR_RC}.{name}"), get(f"{config_facts.DRIVER_RC}.{name}")
        if a != b:
            problems.append(f"score centering requires {config_facts.ACTOR_RC}.{name} ({a!r}) to match {config_facts.DRIVER_RC}.{name} ({b!r})")
    if get(f"{config_facts.DRIVER_RC}.rollout_is") == "token":
        threshold = get(f"{config_facts.DRIVER_RC}.rollout_is_threshold", config_facts.DEFAULT_IS_THRESHOLD)
        try:
            parse_is_threshold(threshold)
        except (TypeError, ValueError):
            problems.append(f"the centering term's IS weight needs a TIS cap > 0 or an IcePop band 'lower_upper' in "
                            f"{config_facts.DRIVER_RC}.rollout_is_threshold, got {threshold!r}")
    elif get(f"{config_facts.DRIVER_RC}.rollout_is") is not None:
        problems.append(f"score centering composes with token-level IS only, got {config_facts.DRIVER_RC}.rollout_is="
                        f"{get(f'{config_facts.DRIVER_RC}.rollout_is')!r}")
    loss_mode = get("actor_rollout_ref.actor.policy_loss.loss_mode")  # a loss an SC arm declares
    sc_losses = {arm.loss_mode for arm in all_arms().values() if arm.score_centering}
    if loss_mode != "bypass_mode" and loss_mode not in sc_losses:
        problems.append(f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode!r} is not a registered policy loss "
                        "that takes sc_correction")
    return problems


def head_carrier_problems(cfg: DictConfig) -> list[str]:
    """The project as head carrier, as the real launch loads it: the manager class from verl's config (the way
    verl's task runner loads it) and the head engine from verl's registry under the vendor key."""
    from unittest import mock

    from verl.utils.import_utils import load_class_from_fqn
    from verl.workers.engine.base import EngineRegistry

    problems = []
    fqn = OmegaConf.select(cfg, f"{config_facts.ROLLOUT}.agent.agent_loop_manager_class")
    try:
        load_class_from_fqn(fqn, "AgentLoopManager")
    except Exception as err:  # noqa: BLE001 - any failure to load it is a finding
        problems.append(f"the agent-loop manager class {fqn!r} does not load: {err}")
    with mock.patch.dict(os.environ, VERL_ENGINE_DEVICE="cuda", VERL_ENGINE_VENDOR=verl_head.ENGINE_VENDOR):
        engine = EngineRegistry.get_engine_cls("language_model", str(OmegaConf.select(cfg, "actor_rollout_ref.actor.strategy")))
    if engine.__module__ != "runners.verl_side.head.engine":
        problems.append(f"verl's engine registry gives {engine.__qualname__} for vendor {verl_head.ENGINE_VENDOR!r}, "
                        "not the project's head engine")
    return problems


def newer_key_rows(overrides: list[str], deferred: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per newer key set (key, value, since, status: "table" when the installed verl lacks
    it, "native" when it was composed), and the values the table does not allow."""
    rows, problems = [], []
    for item in overrides:
        key, value, _ = parse(item)
        entry = newer_keys.BY_KEY.get(key)
        if entry is None:
            continue
        if not entry.value_ok(value):
            problems.append(f"{key}={value!r}: allowed {entry.allowed}")
        rows.append({"key": key, "value": value, "since": entry.since, "status": "table" if key in deferred else "native"})
    return rows, problems


def loss_call_problems(cfg: DictConfig, view: DictConfig, project_carries: bool = False) -> list[str]:
    """Call the arm's registered loss once, the way verl's worker does, on a 1 x 3 dummy batch.

    The actor config goes through verl's own ``omega_conf_to_dataclass`` (as in ``init_model``), so
    what the loss reads from it arrives in the form it has inside the worker (the actor-side
    ``rollout_correction`` block, for one, is a plain mapping there). ``view`` is the config with
    the keys of newer verl set: with verl as head carrier an SC arm's loss gets ``sc_correction`` as
    the keyword, with the project as carrier (``project_carries``) it is supplied around the call, as the
    head engine does.
    """
    import contextlib

    import torch
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.utils.config import omega_conf_to_dataclass

    from ablations.token_loss import supplying_correction

    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    actor.global_batch_info.update(dp_size=1, batch_num_tokens=3, global_batch_size=1, loss_scale_factor=None)
    log_prob = torch.zeros(1, 3, requires_grad=True)
    kwargs = {"sc_correction": torch.zeros(1, 3)} if OmegaConf.select(view, newer_keys.ACTOR_SC_KEY) else {}
    supplied = supplying_correction(torch.zeros(1, 3)) if project_carries else contextlib.nullcontext()
    try:
        with supplied:
            loss, _ = get_policy_loss_fn(actor.policy_loss.loss_mode)(
                old_log_prob=torch.full((1, 3), -0.5), log_prob=log_prob, advantages=torch.ones(1, 3),
                response_mask=torch.ones(1, 3), loss_agg_mode=actor.loss_agg_mode, config=actor,
                rollout_is_weights=None, **kwargs,
            )
        loss.backward()
    except Exception as err:  # noqa: BLE001 - any failure of the loss inside verl's worker is a finding
        return [f"the loss {actor.policy_loss.loss_mode!r} fails on verl's converted actor config: {err}"]
    return []


def check_against_installed_verl(overrides: list[str], *, score_centering: bool = False) -> dict[str, Any]:
    """Compose, validate and table-check ``overrides`` in this process; raise ``ValueError`` on failure.

    For a score-centering arm on a verl that supports it, the seam is installed first by importing
    the same hook module the real launch names in ``VERL_USE_EXTERNAL_MODULES``, so verl's own
    config check runs as in the real driver. On a verl without support the arm is checked against
    the table and the report notes what a real launch needs.
    """
    import verl  # noqa: F401 - loads the project's plug-in (and the seam, via the environment)
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    from runners.verl_side.backend import sc_seam

    support = installed.check()
    notes: list[str] = []
    verls_own = support.carrier == installed.VERL_CARRIES.name
    if score_centering and support.ok:  # what a real launch's `import verl` does in every process
        importlib.import_module(ovr.SC_HOOK_MODULE if verls_own else verl_head.PLUGIN_MODULE)
    elif score_centering:
        notes.append("a real launch of this arm fails on this verl: " + support.message())
    native, deferred = split(overrides)
    cfg = compose_verl(native)
    view = with_deferred(cfg, deferred)
    problems: list[str] = []
    try:
        validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    except (AssertionError, ValueError, TypeError) as err:
        problems.append(f"verl validate_config: {err}")
    for key in ("algorithm", "actor_rollout_ref.rollout"):
        try:
            omega_conf_to_dataclass(OmegaConf.select(cfg, key))
        except Exception as err:  # noqa: BLE001 - any failure of verl's own conversion is a finding
            problems.append(f"verl rejects {key}: {err}")
    loss_mode = cfg.actor_rollout_ref.actor.policy_loss.loss_mode
    if loss_mode not in POLICY_LOSS_REGISTRY:
        from ablations.arms import all_arms

        arms = sorted({arm.loss_mode for arm in all_arms().values()})
        problems.append(f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode!r} is not registered in this verl "
                        f"process (registered project arms: {arms}); is the `ablations` plug-in installed?")
    else:
        problems += loss_call_problems(cfg, view, project_carries=score_centering and not verls_own)
    data_problems, data_notes = _data_problems(cfg)
    newer, table_problems = newer_key_rows(overrides, deferred)
    problems += launch_shape_problems(cfg) + data_problems + table_problems
    problems += score_centering_problems(view, support.carrier if score_centering else None)
    if score_centering and support.ok and not verls_own:
        problems += head_carrier_problems(cfg)
    notes += data_notes
    if problems:
        raise ValueError("dry run against the installed verl failed:\n  - " + "\n  - ".join(problems))
    carrier = next(c for c in (installed.VERL_CARRIES, installed.PROJECT_CARRIES) if c.name == support.carrier)
    return {"status": "passed", "verl_version": support.verl_version, "score_centering_support": support.ok,
            "score_centering_missing": list(support.missing),
            "score_centering_transport": {"name": carrier.name, "summary": carrier.summary} if score_centering else None,
            "seam_installed": bool(score_centering and support.ok and verls_own and sc_seam.installed()),
            "composed_overrides": len(native), "newer_keys": newer, "notes": notes, "verl_config": OmegaConf.to_yaml(cfg)}


def reference_difference(run: VerlRun, paths: verl_files.AttemptPaths) -> dict[str, Any] | None:
    """The platform's difference from the reference launch (:meth:`~runners.verl_side.platform.base.Platform.reference_difference`;
    None for a GPU), each launch built for this attempt."""
    def launch_of(cfg: DictConfig) -> tuple[list[str], dict[str, str]]:
        other = VerlRun.of(cfg)
        return ovr.build_overrides(other, paths), ovr.process_env(other, paths)

    return run.platform.reference_difference(launch_of, paths.cpu_state)


def failure_line(reason: str, log_file: Path) -> str:
    """The checking process's failure as one line: its problems (each names the verl key), or its last line."""
    problems = [line.strip()[2:] for line in reason.splitlines() if line.strip().startswith("- ")]
    what = "; ".join(problems) if problems else (reason.strip().splitlines() or ["no output"])[-1]
    return f"{what} (the dry run against the installed verl; details in {log_file})"


def dry_run(run: VerlRun, run_dir: Path, plan: LaunchPlan) -> dict[str, Any]:
    """Write the launch files and check them against the installed verl, and the launch's capacity ``plan``;
    return the report."""
    cfg = run.cfg
    spec = launch.build_spec(run, run_dir)
    out = verl_files.dry_run_dir(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "command.txt").write_text(spec.command_line() + "\n")
    (out / "overrides.txt").write_text("\n".join(spec.overrides) + "\n")
    script = out / "launch.sh"
    script.write_text(spec.script(f"verl launch of {cfg.run_name}, attempt {spec.paths.attempt} (written by the dry run)"))
    script.chmod(0o755)
    request = out / "request.json"
    request.write_text(json.dumps({"overrides": spec.overrides, "score_centering": ArmSpec.of(cfg.method).sc},
                                  indent=1) + "\n")
    # The checking process imports verl like the driver, except that the seam hook is left to the
    # check itself: on a verl without score-centering support the hook would stop `import verl`.
    env = {**os.environ, **spec.env, "VERL_USE_EXTERNAL_MODULES": ovr.REGISTRY_MODULE}
    proc = subprocess.run([sys.executable, "-m", "runners.verl_side.backend.dry_run", str(request)], cwd=spec.cwd, env=env,
                          capture_output=True, text=True)
    (out / "check.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0 or not (out / REPORT).exists():
        reason = (out / "error.txt").read_text() if (out / "error.txt").exists() else proc.stderr[-4000:]
        raise ConfigError(failure_line(reason, out / "check.log"))
    report = json.loads((out / REPORT).read_text())
    report.update(command=spec.command_line(), attempt=spec.paths.attempt, capacity=plan.summary(out))
    if (difference := reference_difference(run, spec.paths)) is not None:  # the rehearsal's swaps
        report["rehearsal"] = difference
        (out / "rehearsal_difference.txt").write_text(run.platform.difference_text(difference))
    (out / REPORT).write_text(json.dumps(report, indent=1) + "\n")
    return report


def main(argv: list[str] | None = None) -> int:
    """The checking process: ``python -m runners.verl_side.backend.dry_run <request.json>``."""
    request = Path((sys.argv[1:] if argv is None else argv)[0])
    out = request.parent
    for stale in (REPORT, "error.txt", "verl_config.yaml"):
        (out / stale).unlink(missing_ok=True)
    req = json.loads(request.read_text())
    try:
        report = check_against_installed_verl(req["overrides"], score_centering=bool(req["score_centering"]))
    except Exception as err:  # noqa: BLE001 - reported to the parent process through error.txt
        (out / "error.txt").write_text(f"{type(err).__name__}: {err}\n")
        print(f"{type(err).__name__}: {err}", file=sys.stderr)
        return 1
    (out / "verl_config.yaml").write_text(report.pop("verl_config"))
    (out / REPORT).write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(f"dry run passed against verl {report['verl_version']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
