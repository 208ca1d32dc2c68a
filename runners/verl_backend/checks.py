"""``validate(cfg)``: reject a verl-backend config that cannot work, before anything starts.

Every error is a ``ValueError`` naming the key and what it allows. ``runners.validate`` has run
first (the schema, the arm, the rules every backend shares); the checks that need verl's composed
config run in the dry run. These are the verl backend's own rules across keys: what
``separate_async``, the file logger and the evaluation sets need, what score centering needs of the
keys the project sets (:data:`~runners.verl_backend.revisions.SC_REQUIRES`, for the arm's head
transport), that the installed verl can carry an SC arm's head on a real launch (the error names what
it lacks), on the CPU rehearsal what its tiny model can hold (:func:`runners.verl_backend.rehearsal.check`),
and that a GPU launch fits its GPUs (:func:`check_capacity`, the capacity plan of :mod:`runners.capacity`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from runners.verl_backend import overrides as ovr
from runners.verl_backend import rehearsal
from runners.verl_backend import revisions as rev
from runners.verl_backend.vocabulary import check_top_k

_MISSING = object()
log = logging.getLogger(__name__)


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


def _check_launch(cfg: DictConfig) -> None:
    prompts, sync = _value(cfg, "trainer.prompts_per_step"), _value(cfg, "rollout.parameter_sync_step")
    if prompts % sync:
        _fail("rollout.parameter_sync_step", sync, f"a divisor of trainer.prompts_per_step ({prompts}): "
              "separate_async trains prompts_per_step / parameter_sync_step prompts per mini-batch")
    if _value(cfg, "backend.actor.use_dynamic_bsz"):
        length = _value(cfg, "rollout.max_prompt_length") + _value(cfg, "rollout.max_response_length")
        if (tokens := _value(cfg, "backend.actor.max_token_len_per_gpu")) < length:
            _fail("backend.actor.max_token_len_per_gpu", tokens,
                  f">= rollout.max_prompt_length + rollout.max_response_length ({length})")
    gpus, tp = _value(cfg, "backend.placement.rollout_gpus_per_node"), _value(cfg, "backend.placement.rollout_tensor_parallel")
    if gpus % tp:
        _fail("backend.placement.rollout_tensor_parallel", tp,
              f"a divisor of backend.placement.rollout_gpus_per_node ({gpus})")
    if _value(cfg, "backend.placement.shared_gpu"):
        place = {k: _value(cfg, f"backend.placement.{k}") for k in
                 ("nnodes", "trainer_gpus_per_node", "rollout_nnodes", "rollout_gpus_per_node", "rollout_tensor_parallel")}
        if any(v != 1 for v in place.values()):
            _fail("backend.placement.shared_gpu", True, "only with one trainer GPU and one rollout GPU on one node, "
                  f"tensor parallel 1 (the one shared GPU); got backend.placement {place}")
    if _value(cfg, "backend.rollout_engine.checkpoint_engine") == "naive":
        _fail("backend.rollout_engine.checkpoint_engine", "naive", "a non-naive backend (nccl, nixl, ...) for separate_async")
    if "file" not in (loggers := list(_value(cfg, "backend.logger"))):
        _fail("backend.logger", loggers, "a list that contains 'file' (metrics ingestion reads it)")
    transport = rev.transport().name
    for req in (r for r in rev.SC_REQUIRES if ovr.is_score_centering(cfg) and r.project and r.applies(transport)):
        if not req.allows(value := _value(cfg, req.project)):
            _fail(req.project, value, f"{rev.as_text(req.want)} for score centering ({req.why})")


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
    if dry_run or rehearsal.is_rehearsal(cfg):  # the rehearsal writes its data before the launch
        return
    train, evals = ovr.data_files(cfg)
    if missing := [str(p) for p in [train, *evals] if not Path(p).exists()]:
        raise ValueError(f"data.dir={cfg.data.dir!r}: data files missing: {missing}; run the data preparation "
                         "(ablations.data) first, or point data.dir at the folder that holds them")


def validate(cfg: DictConfig) -> None:
    """Raise ``ValueError`` (naming the key and the allowed values) if this config cannot run."""
    if _value(cfg, "backend.name") != "verl":
        _fail("backend.name", _value(cfg, "backend.name"), "'verl' for runners.verl_backend")
    _check_launch(cfg)
    check_capacity(cfg)  # before the data: no point preparing data for GPUs the launch cannot fit
    _check_data(cfg, dry_run=bool(_value(cfg, "backend.dry_run")))
    check_top_k(cfg)  # method.top_k <= the model's vocabulary (runners/verl_backend/vocabulary.py)
    if rehearsal.is_rehearsal(cfg):
        rehearsal.check(cfg)
    if ovr.is_score_centering(cfg) and not cfg.backend.dry_run:
        rev.require(f"method={cfg.method.name} (score centering)")


def check_capacity(cfg: DictConfig) -> None:
    """Refuse a GPU launch whose capacity plan does not fit (``runners.capacity``), naming the limiting term and
    the knobs; with ``backend.capacity.enforce=false`` warn instead. The dry run writes the plan instead of
    refusing (``capacity.md``), and the CPU rehearsal has no GPU to fit."""
    if cfg.backend.dry_run or rehearsal.is_rehearsal(cfg):
        return
    from runners.capacity import plan as capacity

    enforce = bool(_value(cfg, "backend.capacity.enforce"))
    try:
        reason = capacity.refusal(capacity.plan(cfg))
    except ValueError as err:  # the model's shape is unknown before verl downloads it
        if enforce:
            raise
        log.warning("no capacity plan: %s", err)
        return
    if reason is not None and enforce:
        raise ValueError(reason)
    if reason is not None:
        log.warning("%s; launching anyway (backend.capacity.enforce=false)", reason)
