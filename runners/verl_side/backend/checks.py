"""``validate(cfg)``: reject a verl-backend config that cannot work, before anything starts.

Every error is a :class:`~runners.config.config_error.ConfigError` naming the key and what it
allows; the launcher prints it as ``config error: <key> ...`` and exits with status 2. ``runners.validate`` has run
first (the schema, the arm, the rules every backend shares); the checks that need verl's composed config run in
the dry run. These are the verl backend's own rules across keys: what ``separate_async``, the file logger and the
evaluation sets need, what score centering needs of the keys the project sets
(:data:`~runners.verl_side.backend.sc_requirements.SC_REQUIRES`, for the arm's head carrier), that the installed verl
can carry an SC arm's head on a real launch (the error names what it lacks), ``method.top_k`` against the
vocabulary (:mod:`runners.verl_side.backend.vocabulary`), what ``backend.extra_overrides`` may hold
(:func:`extra_overrides`), what the platform refuses (:meth:`runners.verl_side.platform.base.Platform.check`: on the
CPU rehearsal what its tiny model can hold), that a launch on GPUs fits them (:func:`runners.capacity.plan.check_fits`; a dry run's plan is computed here
too, so a plan that cannot be computed is a config error before the dry run writes or moves anything), and that
the Ray cluster of ``backend.ray_address`` answers and holds the placement (:func:`runners.verl_side.cluster.ray_cluster.check`,
not on a dry run).

The checks a GPU would otherwise make (:func:`check_model_parallelism`): vLLM's tensor parallelism splits the
attention heads, so ``num_attention_heads % TP == 0``, and the KV heads, split when there are at least TP of them
(``num_key_value_heads % TP == 0``) and replicated otherwise (``TP % num_key_value_heads == 0``) -- vLLM's own
rule (``ModelConfig.verify_with_parallel_config``, ``QKVParallelLinear``); verl's Ulysses sequence parallelism
(``actor_rollout_ref.actor.ulysses_sequence_parallel_size``, through ``backend.extra_overrides``) by the same
rule, and it divides the trainer GPUs (with dynamic batch sizes verl packs ``max_token_len_per_gpu x SP`` tokens
into a micro-batch, so the token budget that must hold one sequence is that product: :func:`_check_launch`); without dynamic batch sizes the per-GPU micro-batch divides each GPU's
share of a mini-batch (verl's FSDP worker asserts it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from ablations.arms import ArmSpec
from runners.capacity.estimate import SEQUENCE_PARALLEL, sequence_parallel
from runners.capacity.plan import check_fits, known_shape
from runners.config.config_error import ConfigError
from runners.config.hydra_override import parse
from runners.verl_side.backend import overrides as ovr
from runners.verl_side.backend import sc_requirements
from runners.verl_side.backend.verl_run import VerlRun
from runners.verl_side.backend.vocabulary import check_top_k
from runners.verl_side.cluster import ray_cluster
from runners.verl_side.revisions import config_facts, installed

_MISSING = object()


def _value(cfg: DictConfig, key: str) -> Any:
    try:
        value = OmegaConf.select(cfg, key, default=_MISSING, throw_on_missing=True)
    except MissingMandatoryValue as err:
        raise ConfigError(f"{key} must be set (it is ??? in the config)") from err
    if value is _MISSING:
        raise ConfigError(f"{key} is missing from the config")
    return value


def _fail(key: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"{key}={value!r} is not allowed: {allowed}")


def _check_launch(cfg: DictConfig) -> None:
    prompts, sync = _value(cfg, "trainer.prompts_per_step"), _value(cfg, "rollout.parameter_sync_step")
    if prompts % sync:
        _fail("rollout.parameter_sync_step", sync, f"a divisor of trainer.prompts_per_step ({prompts}): "
              "separate_async trains prompts_per_step / parameter_sync_step prompts per mini-batch")
    if _value(cfg, "backend.actor.use_dynamic_bsz"):  # verl packs max_token_len_per_gpu x SP tokens per micro-batch
        length = _value(cfg, "rollout.max_prompt_length") + _value(cfg, "rollout.max_response_length")
        sp = sequence_parallel(cfg)
        if (tokens := _value(cfg, "backend.actor.max_token_len_per_gpu")) * sp < length:
            per_rank = -(-length // sp)
            _fail("backend.actor.max_token_len_per_gpu", tokens,
                  f">= rollout.max_prompt_length + rollout.max_response_length ({length})" if sp == 1 else
                  f">= {per_rank}: (rollout.max_prompt_length + rollout.max_response_length = {length}) / "
                  f"{SEQUENCE_PARALLEL}={sp} (verl packs max_token_len_per_gpu x SP tokens into a micro-batch)")
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
    if _value(cfg, "backend.placement.shared_gpu") and ray_cluster.address(cfg):
        _fail("backend.placement.shared_gpu", True, f"only on a Ray of the launch's own ({ray_cluster.KEY}=null): "
              "the shared GPU is declared to Ray twice, which a driver joining a cluster cannot do")
    if _value(cfg, "backend.rollout_engine.checkpoint_engine") == "naive":
        _fail("backend.rollout_engine.checkpoint_engine", "naive", "a non-naive backend (nccl, nixl, ...) for separate_async")
    if "file" not in (loggers := list(_value(cfg, "backend.logger"))):
        _fail("backend.logger", loggers, "a list that contains 'file' (metrics ingestion reads it)")
    carrier = installed.head_carrier().name
    for req in (r for r in sc_requirements.SC_REQUIRES if ArmSpec.of(cfg.method).sc and r.project and r.applies(carrier)):
        if not req.allows(value := _value(cfg, req.project)):
            _fail(req.project, value, f"{sc_requirements.as_text(req.want)} for score centering ({req.why})")


def _check_log_prob_transport(run: VerlRun) -> None:
    """``log_prob_transport=logits_processor`` puts every request's sampled log-prob in the processor's files: an
    SC arm's head then travels in files too, and only the project's vLLM server reads them."""
    if not run.log_probs_by_processor:
        return
    key = "backend.rollout_engine.log_prob_transport=logits_processor"
    if run.verl_carries_head:
        raise ConfigError(f"{key} is not allowed with method={run.cfg.method.name} on this verl, which carries the "
                          "score-centering head with its own vLLM server: the project's server reads the processor's "
                          "files; use log_prob_transport=logprobs")
    if run.arm.sc and run.head_transport != "logits_processor":
        raise ConfigError(f"{key} needs backend.rollout_engine.head_transport=logits_processor for "
                          f"method={run.cfg.method.name} (got {run.head_transport}): the processor that writes the "
                          "sampled log-probs writes the head too, and vLLM's flat top-k would ask for log-probs again")


def _check_data(run: VerlRun, *, dry_run: bool) -> None:
    cfg = run.cfg
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
    if dry_run or run.platform.writes_data:  # the platform writes the data before the launch
        return
    train, evals = ovr.data_files(cfg)
    if missing := [str(p) for p in [train, *evals] if not Path(p).exists()]:
        raise ConfigError(f"data.dir={cfg.data.dir!r}: data files missing: {missing}; run the data preparation "
                         "(python -m math_data) first, or point data.dir at the folder that holds them")


def validate(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` (naming the key and the allowed values) if this config cannot run."""
    if _value(cfg, "backend.name") != "verl":
        _fail("backend.name", _value(cfg, "backend.name"), "'verl' for runners.verl_side.backend")
    _check_launch(cfg)
    run = VerlRun.of(cfg)  # the run resolved once, for the checks below
    _check_log_prob_transport(run)
    extra = extra_overrides(run)
    check_top_k(cfg)  # method.top_k <= the model's vocabulary (runners/verl_side/backend/vocabulary.py)
    check_model_parallelism(cfg, extra)
    if run.platform.fits_gpus:  # the capacity plan; before the data: no point preparing data for GPUs it cannot fit
        check_fits(cfg)
    _check_data(run, dry_run=bool(_value(cfg, "backend.dry_run")))
    run.platform.check()
    if run.arm.sc and not cfg.backend.dry_run:
        installed.require(f"method={cfg.method.name} (score centering)")
    if not cfg.backend.dry_run:  # the cluster of backend.ray_address holds the placement (a dry run joins nothing)
        ray_cluster.check(cfg)


MAX_LOGPROBS = f"{config_facts.ROLLOUT}.engine_kwargs.vllm.max_logprobs"
MICRO_BATCH = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"


def extra_overrides(run: VerlRun) -> dict[str, Any]:
    """``backend.extra_overrides`` as ``{verl key: value}`` (the last one of a key wins, as in verl's
    composition); an entry that is not a Hydra override is a config error naming it. For an SC arm on the
    project as head carrier, ``max_logprobs`` below ``method.top_k`` is refused."""
    cfg = run.cfg
    out: dict[str, Any] = {}
    for i, item in enumerate(_value(cfg, "backend.extra_overrides")):
        try:
            key, value, _ = parse(str(item))
        except Exception:  # noqa: BLE001 - Hydra's parser raises its own grammar errors
            _fail(f"backend.extra_overrides[{i}]", str(item), "a verl override KEY=VALUE in Hydra's syntax")
        out[key] = value
    if MAX_LOGPROBS in out and run.project_carries_head:
        cap, top_k = out[MAX_LOGPROBS], int(_value(cfg, "method.top_k"))
        if not (isinstance(cap, int) and not isinstance(cap, bool) and cap >= top_k):
            _fail("backend.extra_overrides", f"{MAX_LOGPROBS}={cap}",
                  f"vLLM's max_logprobs >= method.top_k ({top_k}): the SC arm asks vLLM for the top-{top_k} log-probs "
                  "of every token, and vLLM refuses more than max_logprobs")
    return out


def _splits_heads(size: int, heads: int, kv_heads: int) -> str | None:
    """Why ``size``-way head parallelism cannot split the model's heads (vLLM's and verl's rule), or None."""
    if heads % size:
        return f"the model's {heads} attention heads are not divisible by {size}"
    if kv_heads % size and size % kv_heads:
        return (f"the model's {kv_heads} KV heads are neither divisible by {size} nor a divisor of it (split or "
                "replicated evenly)")
    return None


def check_model_parallelism(cfg: DictConfig, extra: dict[str, Any]) -> None:
    """Tensor parallelism of the rollout, sequence parallelism and micro-batches of the trainer against the
    model and the batch (the module doc); skipped where the model's shape is unknown before verl downloads it."""
    place = "backend.placement"
    tp = int(_value(cfg, f"{place}.rollout_tensor_parallel"))
    sp = extra.get(SEQUENCE_PARALLEL, 1)
    if not (isinstance(sp, int) and not isinstance(sp, bool) and sp >= 1):
        _fail("backend.extra_overrides", f"{SEQUENCE_PARALLEL}={sp}", "an integer >= 1")
    trainer_gpus = int(_value(cfg, f"{place}.nnodes")) * int(_value(cfg, f"{place}.trainer_gpus_per_node"))
    if trainer_gpus % sp:
        _fail("backend.extra_overrides", f"{SEQUENCE_PARALLEL}={sp}",
              f"a divisor of the trainer GPUs ({trainer_gpus}: {place}.nnodes x trainer_gpus_per_node)")
    if not _value(cfg, "backend.actor.use_dynamic_bsz"):
        micro = extra.get(MICRO_BATCH)
        prompts = int(_value(cfg, "trainer.prompts_per_step")) // int(_value(cfg, "rollout.parameter_sync_step"))
        responses = prompts * int(_value(cfg, "trainer.n"))
        ranks = trainer_gpus // sp
        if not (isinstance(micro, int) and not isinstance(micro, bool) and micro >= 1):
            _fail("backend.actor.use_dynamic_bsz", False, f"only with {MICRO_BATCH}=<responses per GPU per forward> "
                  f"in backend.extra_overrides (verl needs a micro-batch size without dynamic batch sizes); got {micro!r}")
        if responses % ranks or (responses // ranks) % micro:
            _fail("backend.extra_overrides", f"{MICRO_BATCH}={micro}",
                  f"a divisor of each data-parallel rank's share of a mini-batch: {responses} responses "
                  f"(trainer.prompts_per_step / rollout.parameter_sync_step x trainer.n) over {ranks} ranks "
                  f"(trainer GPUs / sequence parallel) must split evenly into micro-batches of {micro}")
    found = known_shape(cfg)
    if found is None:  # unknown before verl downloads it: the capacity plan's warning names it
        return
    shape, source = found
    heads, kv = shape.num_attention_heads, shape.num_key_value_heads
    if (why := _splits_heads(tp, heads, kv)) is not None:
        _fail(f"{place}.rollout_tensor_parallel", tp, f"vLLM splits the heads across the tensor-parallel GPUs, and "
              f"{why} (model.path={cfg.model.path}, shape from {source})")
    if sp > 1 and (why := _splits_heads(sp, heads, kv)) is not None:
        _fail("backend.extra_overrides", f"{SEQUENCE_PARALLEL}={sp}", f"Ulysses sequence parallelism splits the heads, "
              f"and {why} (model.path={cfg.model.path}, shape from {source})")
