"""``validate(cfg)``: reject a verl-backend config that cannot work, before anything starts.

Every error is a ``ValueError`` naming the key and what it allows. ``runners.validate`` checks the
keys every backend reads (types, ranges, the arm) before it calls this; the checks that need verl's
composed config (batch divisibility, dataclass fields, ...) run in the dry run. These are the
verl-backend ones: ``backend.*``, what ``separate_async`` and the evaluation sets need, what score
centering needs of the keys the project sets (:data:`~runners.verl_backend.revisions.SC_REQUIRES`),
and: a real launch of a score-centering arm on a verl without score-centering support fails here,
naming the verl commit and the install command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from runners.verl_backend import overrides as ovr
from runners.verl_backend import revisions as rev

TRAINER_MODES = ("separate_async",)
OFF_POLICY_STRATEGIES = ("drop", "wait")
STRATEGIES = ("fsdp", "fsdp2")
ROLLOUT_ENGINES = ("vllm",)
_MISSING = object()


def _value(cfg: DictConfig, key: str) -> Any:
    try:
        value = OmegaConf.select(cfg, key, default=_MISSING, throw_on_missing=True)
    except MissingMandatoryValue as err:
        raise ValueError(f"{key} must be set (it is ??? in the config)") from err
    if value is _MISSING:
        raise ValueError(f"{key} is missing from the config")
    return value


def _fail(key: str, value: Any, allowed: str) -> None:
    raise ValueError(f"{key}={value!r} is not allowed: {allowed}")


def _int(cfg: DictConfig, key: str, minimum: int) -> int:
    value = _value(cfg, key)
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= minimum):
        _fail(key, value, f"an integer >= {minimum}")
    return value


def _positive(cfg: DictConfig, key: str) -> float:
    value = _value(cfg, key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        _fail(key, value, "a number > 0")
    return float(value)


def _choice(cfg: DictConfig, key: str, allowed: tuple[str, ...]) -> str:
    if (value := _value(cfg, key)) not in allowed:
        _fail(key, value, f"one of {list(allowed)}")
    return value


def _bool(cfg: DictConfig, key: str) -> bool:
    if not isinstance(value := _value(cfg, key), bool):
        _fail(key, value, "true or false")
    return value


def _check_method(cfg: DictConfig) -> None:
    import verl  # noqa: F401 - the plug-in registers the project's losses
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

    arms = sorted(k for k in POLICY_LOSS_REGISTRY if k.startswith("ablation_"))
    if (loss_mode := _value(cfg, "method.loss_mode")) not in arms:
        _fail("method.loss_mode", loss_mode, f"a registered project arm, one of {arms}")
    sc, takes = _bool(cfg, "method.score_centering"), rev.loss_takes_sc_correction(loss_mode)
    if sc != takes:
        raise ValueError(f"method.score_centering={sc} does not fit method.loss_mode={loss_mode!r}, which "
                         f"{'takes' if takes else 'does not take'} sc_correction")
    for req in (r for r in rev.SC_REQUIRES if sc and r.project):  # the verl keys the project sets
        if not req.allows(value := _value(cfg, req.project)):
            _fail(req.project, value, f"{rev.as_text(req.want)} for score centering ({req.why})")


def _check_schedule(cfg: DictConfig) -> None:
    prompts, sync = _value(cfg, "trainer.prompts_per_step"), _value(cfg, "rollout.parameter_sync_step")
    if prompts % sync:
        _fail("rollout.parameter_sync_step", sync, f"a divisor of trainer.prompts_per_step ({prompts}): "
              "separate_async trains prompts_per_step / parameter_sync_step prompts per mini-batch")
    top_p = _value(cfg, "eval.top_p")
    if not (isinstance(top_p, int | float) and 0 < top_p <= 1):
        _fail("eval.top_p", top_p, "a number in (0, 1]")
    if _bool(cfg, "backend.actor.use_dynamic_bsz"):
        length = _value(cfg, "rollout.max_prompt_length") + _value(cfg, "rollout.max_response_length")
        if (tokens := _int(cfg, "backend.actor.max_token_len_per_gpu", 1)) < length:
            _fail("backend.actor.max_token_len_per_gpu", tokens,
                  f">= rollout.max_prompt_length + rollout.max_response_length ({length})")


def _check_backend(cfg: DictConfig) -> None:
    _choice(cfg, "backend.trainer_mode", TRAINER_MODES)
    _choice(cfg, "backend.off_policy_strategy", OFF_POLICY_STRATEGIES)
    _int(cfg, "backend.num_warmup_batches", 0)
    for key in ("nnodes", "trainer_gpus_per_node", "rollout_nnodes"):
        _int(cfg, f"backend.placement.{key}", 1)
    gpus = _int(cfg, "backend.placement.rollout_gpus_per_node", 1)
    if gpus % (tp := _int(cfg, "backend.placement.rollout_tensor_parallel", 1)):
        _fail("backend.placement.rollout_tensor_parallel", tp,
              f"a divisor of backend.placement.rollout_gpus_per_node ({gpus})")
    _choice(cfg, "backend.actor.strategy", STRATEGIES)
    _choice(cfg, "backend.rollout_engine.name", ROLLOUT_ENGINES)
    if _value(cfg, "backend.rollout_engine.checkpoint_engine") == "naive":
        _fail("backend.rollout_engine.checkpoint_engine", "naive", "a non-naive backend (nccl, nixl, ...) for separate_async")
    util = _value(cfg, "backend.rollout_engine.gpu_memory_utilization")
    if not (isinstance(util, int | float) and 0 < util <= 1):
        _fail("backend.rollout_engine.gpu_memory_utilization", util, "a number in (0, 1]")
    if _value(cfg, "backend.actor.max_ckpt_to_keep") is not None:
        _int(cfg, "backend.actor.max_ckpt_to_keep", 1)
    if "file" not in (loggers := list(_value(cfg, "backend.logger"))):
        _fail("backend.logger", loggers, "a list that contains 'file' (metrics ingestion reads it)")
    _positive(cfg, "backend.ingest_interval_s")
    extra = _value(cfg, "backend.extra_overrides")
    if not all(isinstance(x, str) for x in extra):
        _fail("backend.extra_overrides", list(extra), "a list of verl override strings")


def _check_data(cfg: DictConfig, *, dry_run: bool) -> None:
    if not str(_value(cfg, "model.path")):
        _fail("model.path", "", "a Hugging Face model id or a local checkpoint folder")
    _value(cfg, "data.dir")
    _value(cfg, "data.train.file")
    sets = _value(cfg, "data.eval_sets")
    if not (names := [str(s.name) for s in sets]):
        _fail("data.eval_sets", [], "at least one evaluation set")
    if len(set(names)) != len(names) or any(n != n.lower() for n in names):
        _fail("data.eval_sets[].name", names, "distinct lowercase names (equal names merge their metrics)")
    if len(set(files := [str(s.file) for s in sets])) != len(files):
        _fail("data.eval_sets[].file", files, "one file per evaluation set")
    if dry_run:
        return
    train, evals = ovr.data_files(cfg)
    if missing := [str(p) for p in [train, *evals] if not Path(p).exists()]:
        raise ValueError(f"data.dir={cfg.data.dir!r}: data files missing: {missing}; run the data preparation "
                         "(ablations.data) first, or point data.dir at the folder that holds them")


def validate(cfg: DictConfig) -> None:
    """Raise ``ValueError`` (naming the key and the allowed values) if this config cannot run."""
    if _value(cfg, "backend.name") != "verl":
        _fail("backend.name", _value(cfg, "backend.name"), "'verl' for runners.verl_backend")
    dry_run = _bool(cfg, "backend.dry_run")
    _check_backend(cfg)
    _check_schedule(cfg)
    _check_data(cfg, dry_run=dry_run)
    _check_method(cfg)
    if ovr.is_score_centering(cfg) and not dry_run:
        rev.require(f"method={cfg.method.name} (score centering)")
