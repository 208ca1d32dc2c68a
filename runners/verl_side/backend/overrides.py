"""The project config -> verl override list, as a pure function (docs/verl_reference.md, "How each arm runs in
verl").

:func:`build_overrides` reads the resolved run (:class:`~runners.verl_side.backend.verl_run.VerlRun`) and the attempt's absolute paths and
returns the ``key=value`` strings ``python -m verl.trainer.main_ppo`` receives. Every value comes
from the config; the only literals are what *defines* the arms in verl and never varies between
experiments: GRPO advantages with group-mean centring and no std division, no KL, no entropy
bonus, AdamW at a constant lr without warm-up, one PPO epoch over one mini-batch per weight sync;
bypass-mode REINFORCE, written on the driver *and* the actor side (the V1 trainer does not copy one
to the other); the project's registered loss (``method.loss_mode``); overlong prompts dropped, never
cut (``data.truncation=error``); evaluation before training. A TIS arm adds token-level IS with cap
``method.tis_cap``, an arm with verl's rollout correction its block (``method.rollout_correction``; the
score-centering correction reads the same block). An SC arm adds what its head
carrier (:func:`runners.verl_side.revisions.installed.head_carrier`) needs: verl carrying it, the keys of newer
verl (:data:`runners.verl_side.revisions.newer_keys.NEWER_KEYS`) and the seam hook; the project carrying it
(:mod:`runners.verl_side.head`), the agent-loop manager class, k in ``rollout.custom``, vLLM's
``max_logprobs``, the engine's vendor key and the head plug-in module. The platform adds its keys last
(:meth:`runners.verl_side.platform.base.Platform.overrides`), then ``backend.extra_overrides``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from ablations.arms import ArmSpec
from runners.config.hydra_override import override
from runners.run.verl_files import AttemptPaths
from runners.verl_side import head as verl_head
from runners.verl_side import logits_processor
from runners.verl_side.backend.verl_run import VerlRun
from runners.verl_side.cluster import ray_cluster
from runners.verl_side.revisions import config_facts, defects, newer_keys

#: Modules every verl process imports at ``import verl`` (``VERL_USE_EXTERNAL_MODULES``; see
#: docs/verl_reference.md): the project's loss registration, loudly, and for SC arms the seam.
REGISTRY_MODULE = "ablations.registry"
SC_HOOK_MODULE = f"{__package__}.sc_hook"
#: Set where the trainer and vLLM share one GPU (``backend.placement.shared_gpu``): Ray then leaves
#: CUDA_VISIBLE_DEVICES alone, so both pools' workers see the one device.
SHARED_GPU_ENV = "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"


# -- the mapping -------------------------------------------------------------------------------
def data_files(cfg: DictConfig) -> tuple[Path, list[Path]]:
    """Absolute paths of the training parquet and the evaluation parquets (in ``data.eval_sets`` order)."""
    root = Path(str(cfg.data.dir)).expanduser()
    root = root if root.is_absolute() else root.resolve()
    return root / str(cfg.data.train.file), [root / str(s.file) for s in cfg.data.eval_sets]


def process_env(run: VerlRun, paths: AttemptPaths) -> dict[str, str]:
    """Environment of the verl driver and (through Ray's runtime_env) of every Ray actor: the file
    logger's path, the modules every verl process imports (for an SC arm its head carrier's), what the
    installed verl needs to avoid its known defects (:func:`runners.verl_side.revisions.defects.environment_fixes`),
    the head engine's vendor key where the project carries the head, and the platform's
    (:meth:`runners.verl_side.platform.base.Platform.environment`; its modules right after the loss registration: the
    head plugin's engine asks verl for the device at import)."""
    platform_env, platform_modules = run.platform.environment(paths.cpu_state)
    modules = [REGISTRY_MODULE, *platform_modules]
    env = {"VERL_FILE_LOGGER_PATH": str(paths.file_logger), **defects.environment_fixes()}
    if run.project_carries_head:
        modules.append(verl_head.PLUGIN_MODULE)
        env["VERL_ENGINE_VENDOR"] = verl_head.ENGINE_VENDOR
    elif run.verl_carries_head:
        modules.append(SC_HOOK_MODULE)
    if run.log_probs_by_processor and not run.project_carries_head:  # the plugin's vLLM replica serves every arm
        modules.append(verl_head.PLUGIN_MODULE)
    if run.placement.shared_gpu:  # both pools on one GPU: Ray must not pin each to a device of its own
        env[SHARED_GPU_ENV] = "1"
    return {**env, **platform_env, "VERL_USE_EXTERNAL_MODULES": ",".join(modules)}


def _rollout_correction(cfg: DictConfig) -> dict[str, Any]:
    """The rollout-correction block, identical on the driver and the actor side, every key explicit
    (the score-centering verl compares the two blocks key by key with no defaults): bypass-mode REINFORCE and the arm's
    correction (:meth:`ablations.arms.ArmSpec.verl_rollout_correction`). The two keys of verl 0.9.1's
    rejection mask are written only for an arm that has one, so the four arms' override lists are unchanged."""
    block = ArmSpec.of(cfg.method).verl_rollout_correction()
    if block["rollout_rs"] is None:
        del block["rollout_rs"], block["rollout_rs_threshold"]
    if block["rollout_is_threshold"] is not None and not isinstance(block["rollout_is_threshold"], str):
        block["rollout_is_threshold"] = float(block["rollout_is_threshold"])
    return {**config_facts.BYPASS_REINFORCE, **block}


def build_overrides(run: VerlRun, paths: AttemptPaths) -> list[str]:
    """The verl override list of one arm and attempt (see the module docstring): the sections below in order,
    then the platform's keys (:meth:`runners.verl_side.platform.base.Platform.overrides`), then
    ``backend.extra_overrides``."""
    cfg = run.cfg
    correction = _rollout_correction(cfg)
    ov = [*trainer_overrides(run, paths), *data_overrides(cfg), *actor_overrides(cfg), *loss_overrides(cfg, correction),
          *rollout_overrides(cfg), *advantage_and_reward_overrides(cfg, correction), *score_centering_overrides(run),
          *head_processor_overrides(run), *actor_environment_overrides(run, paths)]
    ov = run.platform.overrides(ov, paths.cpu_state)
    return [*ov, *(str(x) for x in cfg.backend.extra_overrides)]


class OverrideList(list[str]):
    """A list of verl overrides written one ``put`` at a time."""

    def put(self, key: str, value: Any, *, add: bool = False) -> None:
        self.append(override(key, value, add=add))


# -- the sections ------------------------------------------------------------------------------
def trainer_overrides(run: VerlRun, paths: AttemptPaths) -> list[str]:
    """The trainer: V1 ``separate_async``, the placement, the Ray verl starts or joins, the schedule, the outputs."""
    cfg = run.cfg
    b, t, r, place = cfg.backend, cfg.trainer, cfg.rollout, cfg.backend.placement
    actor, engine = b.actor, b.rollout_engine
    ov = OverrideList()
    ov.put("trainer.use_v1", True)
    ov.put("trainer.v1.trainer_mode", b.trainer_mode)
    ov.put("trainer.v1.separate_async.parameter_sync_step", int(r.parameter_sync_step))
    ov.put("trainer.v1.separate_async.num_warmup_batches", int(b.num_warmup_batches))
    ov.put("trainer.v1.sampler.max_off_policy_threshold", int(r.max_staleness))
    ov.put("trainer.v1.sampler.max_off_policy_strategy", b.off_policy_strategy)
    ov.put("actor_rollout_ref.hybrid_engine", False)
    ov.put("trainer.nnodes", int(place.nnodes))
    ov.put("trainer.n_gpus_per_node", int(place.trainer_gpus_per_node))
    ov.put("actor_rollout_ref.rollout.nnodes", int(place.rollout_nnodes))
    ov.put("actor_rollout_ref.rollout.n_gpus_per_node", int(place.rollout_gpus_per_node))
    ov.put("actor_rollout_ref.rollout.tensor_model_parallel_size", int(place.rollout_tensor_parallel))
    ov.put("actor_rollout_ref.rollout.checkpoint_engine.backend", engine.checkpoint_engine)
    # the Ray verl's driver starts or joins: never a cluster it happens to find (runners/verl_side/cluster/ray_cluster.py)
    ov.put("ray_kwargs.ray_init.address", ray_cluster.init_address(cfg), add=True)
    if place.shared_gpu:  # Ray is told of a GPU per pool; both use the one device (SHARED_GPU_ENV)
        ov.put("ray_kwargs.ray_init.num_gpus", int(place.trainer_gpus_per_node) + int(place.rollout_gpus_per_node), add=True)
    ov.put("trainer.total_training_steps", int(t.total_steps))
    ov.put("trainer.test_freq", int(t.test_freq))
    ov.put("trainer.save_freq", int(t.save_freq))
    ov.put("trainer.val_before_train", True)
    ov.put("trainer.resume_mode", str(t.resume))
    ov.put("trainer.default_local_dir", paths.checkpoints)
    ov.put("trainer.validation_data_dir", paths.validation_dump)
    if b.dump_rollouts:
        ov.put("trainer.rollout_data_dir", paths.rollout_dump)
    ov.put("trainer.logger", list(b.logger))
    ov.put("trainer.project_name", b.project_name)
    ov.put("trainer.experiment_name", cfg.run_name)
    if actor.max_ckpt_to_keep is not None:
        ov.put("trainer.max_actor_ckpt_to_keep", int(actor.max_ckpt_to_keep))
    return ov


def data_overrides(cfg: DictConfig) -> list[str]:
    """The data: the training and evaluation parquets, the batch, the lengths (overlong prompts dropped, never cut)."""
    t, r = cfg.trainer, cfg.rollout
    train_file, eval_files = data_files(cfg)
    ov = OverrideList()
    ov.put("data.train_files", [train_file])
    ov.put("data.val_files", eval_files)
    ov.put("data.train_batch_size", int(t.prompts_per_step))
    ov.put("data.max_prompt_length", int(r.max_prompt_length))
    ov.put("data.max_response_length", int(r.max_response_length))
    ov.put("data.filter_overlong_prompts", True)
    ov.put("data.truncation", "error")
    ov.put("data.seed", int(cfg.seed))
    if cfg.model.get("enable_thinking") is not None:
        ov.put("data.apply_chat_template_kwargs.enable_thinking", bool(cfg.model.enable_thinking), add=True)
    return ov


def actor_overrides(cfg: DictConfig) -> list[str]:
    """The model and the actor (the FSDP2 trainer): AdamW at a constant lr, one epoch over one mini-batch per sync."""
    t, r, actor = cfg.trainer, cfg.rollout, cfg.backend.actor
    mini_batch = int(t.prompts_per_step) // int(r.parameter_sync_step)
    ov = OverrideList()
    ov.put("actor_rollout_ref.model.path", str(cfg.model.path))
    ov.put("actor_rollout_ref.model.use_remove_padding", bool(actor.remove_padding))
    ov.put("actor_rollout_ref.model.enable_gradient_checkpointing", bool(actor.gradient_checkpointing))
    ov.put("actor_rollout_ref.model.use_fused_kernels", False)  # the head gather needs the full logits
    ov.put("actor_rollout_ref.actor.strategy", actor.strategy)
    # verl's FSDP engine takes its compute dtype from mixed_precision.param_dtype (bf16 when unset);
    # fsdp_config.dtype is read by the Megatron engine only
    ov.put("actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype", actor.dtype, add=True)
    ov.put("actor_rollout_ref.actor.fsdp_config.seed", int(cfg.seed))
    ov.put("actor_rollout_ref.actor.use_torch_compile", bool(actor.use_torch_compile))
    # verl's FSDP engine reads its own copy (torch.compile of the entropy function), which does not follow the
    # actor's key: without this, use_torch_compile=false still compiled (25 s per arm on a CPU rehearsal)
    ov.put("actor_rollout_ref.actor.fsdp_config.use_torch_compile", bool(actor.use_torch_compile))
    ov.put("actor_rollout_ref.actor.optim.optimizer", "AdamW")
    ov.put("actor_rollout_ref.actor.optim.lr", float(t.lr))
    ov.put("actor_rollout_ref.actor.optim.weight_decay", float(t.weight_decay))
    ov.put("actor_rollout_ref.actor.optim.clip_grad", float(t.grad_clip))
    ov.put("actor_rollout_ref.actor.optim.lr_scheduler_type", "constant")
    ov.put("actor_rollout_ref.actor.optim.lr_warmup_steps_ratio", 0.0)
    ov.put("actor_rollout_ref.actor.ppo_mini_batch_size", mini_batch)
    ov.put("actor_rollout_ref.actor.ppo_epochs", 1)
    ov.put("actor_rollout_ref.actor.use_dynamic_bsz", bool(actor.use_dynamic_bsz))
    ov.put("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", int(actor.max_token_len_per_gpu))
    ov.put("actor_rollout_ref.actor.loss_agg_mode", str(t.loss_agg_mode))
    ov.put("actor_rollout_ref.actor.entropy_coeff", 0.0)
    ov.put("actor_rollout_ref.actor.use_kl_loss", False)
    ov.put("actor_rollout_ref.actor.calculate_entropy", bool(actor.calculate_entropy))
    ov.put("actor_rollout_ref.actor.entropy_from_logits_with_chunking", bool(actor.entropy_from_logits_with_chunking))
    ov.put("actor_rollout_ref.actor.entropy_from_logits_chunk_size", int(actor.entropy_chunk_size))
    ov.put("actor_rollout_ref.actor.entropy_checkpointing", bool(actor.entropy_checkpointing))
    ov.put("actor_rollout_ref.actor.fsdp_config.offload_policy", bool(actor.offload_policy))
    ov.put("actor_rollout_ref.actor.data_loader_seed", int(cfg.seed))
    ov.put("actor_rollout_ref.actor.checkpoint.save_contents", list(actor.checkpoint_contents))
    return ov


def loss_overrides(cfg: DictConfig, correction: dict[str, Any]) -> list[str]:
    """The loss: the project's registered arm, bypass-mode REINFORCE on the actor side."""
    m = cfg.method
    ov = OverrideList()
    ov.put("actor_rollout_ref.actor.policy_loss.loss_mode", str(m.loss_mode))
    for key, value in correction.items():
        ov.put(f"{config_facts.ACTOR_RC}.{key}", value, add=True)
    return ov


def rollout_overrides(cfg: DictConfig) -> list[str]:
    """The rollout (standalone vLLM replicas) and the evaluation's sampling."""
    t, r, e, engine = cfg.trainer, cfg.rollout, cfg.eval, cfg.backend.rollout_engine
    ov = OverrideList()
    ov.put("actor_rollout_ref.rollout.name", engine.name)
    ov.put("actor_rollout_ref.rollout.dtype", engine.dtype)
    ov.put("actor_rollout_ref.rollout.gpu_memory_utilization", float(engine.gpu_memory_utilization))
    ov.put("actor_rollout_ref.rollout.agent.num_workers", int(engine.agent_workers))
    ov.put("actor_rollout_ref.rollout.max_num_seqs", int(engine.max_num_seqs))
    ov.put("actor_rollout_ref.rollout.max_num_batched_tokens", int(engine.max_num_batched_tokens))
    ov.put("actor_rollout_ref.rollout.n", int(t.n))
    ov.put("actor_rollout_ref.rollout.do_sample", True)
    ov.put("actor_rollout_ref.rollout.temperature", float(r.temperature))
    ov.put("actor_rollout_ref.rollout.top_p", float(r.top_p))
    ov.put("actor_rollout_ref.rollout.top_k", int(r.top_k))
    ov.put("actor_rollout_ref.rollout.seed", int(cfg.seed))
    ov.put("actor_rollout_ref.rollout.calculate_log_probs", True)
    ov.put("actor_rollout_ref.rollout.logprobs_mode", engine.logprobs_mode)
    ov.put("actor_rollout_ref.rollout.val_kwargs.n", int(e.n))
    ov.put("actor_rollout_ref.rollout.val_kwargs.do_sample", True)
    ov.put("actor_rollout_ref.rollout.val_kwargs.temperature", float(e.temperature))
    ov.put("actor_rollout_ref.rollout.val_kwargs.top_p", float(e.top_p))
    ov.put("actor_rollout_ref.rollout.val_kwargs.top_k", int(r.top_k))
    return ov


def advantage_and_reward_overrides(cfg: DictConfig, correction: dict[str, Any]) -> list[str]:
    """GRPO advantages (no std division, no KL), the rollout correction on the driver side, the reward."""
    b = cfg.backend
    ov = OverrideList()
    ov.put("algorithm.adv_estimator", "grpo")
    ov.put("algorithm.norm_adv_by_std_in_grpo", False)
    ov.put("algorithm.use_kl_in_reward", False)
    for key, value in correction.items():
        ov.put(f"{config_facts.DRIVER_RC}.{key}", value)
    ov.put("reward.custom_reward_function.path", b.reward.function_path)
    ov.put("reward.custom_reward_function.name", b.reward.function_name)
    ov.put("reward.reward_manager.source", b.reward.manager_source)
    ov.put("reward.reward_manager.name", b.reward.manager_name)
    ov.put("reward.reward_manager.module.path", b.reward.manager_module)
    return ov


def score_centering_overrides(run: VerlRun) -> list[str]:
    """Score centering: the sampler's head from vLLM to the trainer's logits, by its carrier."""
    m = run.cfg.method
    ov = OverrideList()
    if run.project_carries_head:
        ov.put(f"{config_facts.ROLLOUT}.agent.agent_loop_manager_class", verl_head.MANAGER_CLASS, add=True)
        ov.put(f"{config_facts.ROLLOUT}.custom.{verl_head.CUSTOM_KEY}", int(m.top_k), add=True)
        ov.put(f"{config_facts.ROLLOUT}.engine_kwargs.vllm.max_logprobs", int(m.top_k), add=True)  # vLLM's default is 20
    elif run.verl_carries_head:  # verl's own (keys of newer verl)
        ov.put(newer_keys.TOPK_KEY, int(m.top_k), add=True)
        ov.put(newer_keys.DRIVER_SC_KEY, True, add=True)
        ov.put(newer_keys.ACTOR_SC_KEY, True, add=True)
    return ov


def head_processor_overrides(run: VerlRun) -> list[str]:
    """The project's logits processor in vLLM (an SC arm's head in files, or every arm's sampled log-prob) and,
    for the sampled log-prob, the server's switch (``rollout.custom``, verl's extension point)."""
    ov = OverrideList()
    if run.loads_head_processor:  # vLLM's engine argument; verl passes it on as --logits-processors
        ov.put(f"{config_facts.ROLLOUT}.engine_kwargs.vllm.logits_processors", logits_processor.PROCESSOR, add=True)
    if run.log_probs_by_processor:
        ov.put(f"{config_facts.ROLLOUT}.custom.{logits_processor.LOG_PROB_CUSTOM_KEY}", logits_processor.LOG_PROBS_BY_PROCESSOR,
               add=True)
    return ov


def actor_environment_overrides(run: VerlRun, paths: AttemptPaths) -> list[str]:
    """The environment of every Ray actor (:func:`process_env`; the driver gets it from the launcher)."""
    ov = OverrideList()
    for name, value in process_env(run, paths).items():
        ov.put(f"ray_kwargs.ray_init.runtime_env.env_vars.{name}", value, add=True)
    return ov


def hydra_overrides(paths: AttemptPaths) -> list[str]:
    """Overrides of verl's *own* Hydra app (not part of the composed verl config)."""
    return [override("hydra.run.dir", paths.hydra_dir)]
