"""The project config -> verl override list, as a pure function (docs/verl_reference.md, "How each arm runs in verl").

:func:`build_overrides` reads the resolved project config and the attempt's absolute paths and
returns the ``key=value`` strings ``python -m verl.trainer.main_ppo`` receives. Every value comes
from the config; the only literals are what *defines* the arms in verl and never varies between
experiments: GRPO advantages with group-mean centring and no std division, no KL, no entropy
bonus, AdamW at a constant lr without warm-up, one PPO epoch over one mini-batch per weight sync;
bypass-mode REINFORCE, written on the driver *and* the actor side (the V1 trainer does not copy one
to the other); the project's registered loss (``method.loss_mode``); overlong prompts dropped, never
cut (``data.truncation=error``); evaluation before training. A TIS arm adds token-level IS with cap
``method.tis_cap``, an arm with verl's rollout correction its block (``method.rollout_correction``; the
score-centering correction reads the same block). An SC arm adds what its head
transport (:func:`runners.verl.revisions.installed.transport`) needs: on verl's own, the keys of newer
verl (:data:`runners.verl.revisions.newer_keys.NEWER_KEYS`) and the seam hook; on the project's
(:mod:`runners.verl.head`), the agent-loop manager class, k in ``rollout.custom``, vLLM's
``max_logprobs``, the engine's vendor key and the transport's plug-in module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from ablations.arms import ArmSpec
from runners.config import is_rehearsal
from runners.config.hydra_override import override
from runners.verl import head as verl_head
from runners.verl.backend import ray_cluster
from runners.verl.backend.run_files import AttemptPaths
from runners.verl.platform.rehearsal import swaps as rehearsal
from runners.verl.revisions import config_facts, defects, installed, newer_keys

#: Modules every verl process imports at ``import verl`` (``VERL_USE_EXTERNAL_MODULES``; see
#: docs/verl_reference.md): the project's loss registration, loudly, and for SC arms the seam.
REGISTRY_MODULE = "ablations.registry"
SC_HOOK_MODULE = "runners.verl.backend.sc_hook"
#: Set where the trainer and vLLM share one GPU (``backend.placement.shared_gpu``): Ray then leaves
#: CUDA_VISIBLE_DEVICES alone, so both pools' workers see the one device.
SHARED_GPU_ENV = "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"


# -- the mapping -------------------------------------------------------------------------------
def data_files(cfg: DictConfig) -> tuple[Path, list[Path]]:
    """Absolute paths of the training parquet and the evaluation parquets (in ``data.eval_sets`` order)."""
    root = Path(str(cfg.data.dir)).expanduser()
    root = root if root.is_absolute() else root.resolve()
    return root / str(cfg.data.train.file), [root / str(s.file) for s in cfg.data.eval_sets]


def uses_project_transport(cfg: DictConfig) -> bool:
    """An SC arm on a verl without its own head transport (:data:`~runners.verl.revisions.installed.PROJECT_TRANSPORT`)."""
    return ArmSpec.of(cfg.method).sc and installed.transport() is installed.PROJECT_TRANSPORT


def process_env(cfg: DictConfig, paths: AttemptPaths) -> dict[str, str]:
    """Environment of the verl driver and (through Ray's runtime_env) of every Ray actor: the file
    logger's path, the modules every verl process imports (for an SC arm its transport's), what the
    installed verl needs to avoid its known defects (:func:`runners.verl.revisions.defects.environment_fixes`),
    the head engine's vendor key on the project's transport and, on the CPU rehearsal, the
    platform's (:func:`runners.verl.platform.rehearsal.swaps.environment`)."""
    modules = [REGISTRY_MODULE]
    env = {"VERL_FILE_LOGGER_PATH": str(paths.file_logger), **defects.environment_fixes()}
    if uses_project_transport(cfg):
        modules.append(verl_head.PLUGIN_MODULE)
        env["VERL_ENGINE_VENDOR"] = verl_head.ENGINE_VENDOR
    elif ArmSpec.of(cfg.method).sc:
        modules.append(SC_HOOK_MODULE)
    if cfg.backend.placement.shared_gpu:  # both pools on one GPU: Ray must not pin each to a device of its own
        env[SHARED_GPU_ENV] = "1"
    if is_rehearsal(cfg):  # the platform first: the head plugin's engine asks verl for the device at import
        cpu_env, cpu_modules = rehearsal.environment(cfg, paths.cpu_state)
        env.update(cpu_env)
        modules[1:1] = cpu_modules
    return {**env, "VERL_USE_EXTERNAL_MODULES": ",".join(modules)}


def _rollout_correction(cfg: DictConfig) -> dict[str, Any]:
    """The rollout-correction block, identical on the driver and the actor side, every key explicit
    (8718ca30 compares the two blocks key by key with no defaults): bypass-mode REINFORCE and the arm's
    correction (:meth:`ablations.arms.ArmSpec.verl_rollout_correction`). The two keys of verl 0.9.1's
    rejection mask are written only for an arm that has one, so the four arms' override lists are unchanged."""
    block = ArmSpec.of(cfg.method).verl_rollout_correction()
    if block["rollout_rs"] is None:
        del block["rollout_rs"], block["rollout_rs_threshold"]
    if block["rollout_is_threshold"] is not None and not isinstance(block["rollout_is_threshold"], str):
        block["rollout_is_threshold"] = float(block["rollout_is_threshold"])
    return {**config_facts.BYPASS_REINFORCE, **block}


def build_overrides(cfg: DictConfig, paths: AttemptPaths) -> list[str]:
    """The verl override list of one arm and attempt (see the module docstring)."""
    b, t, r, e, m = cfg.backend, cfg.trainer, cfg.rollout, cfg.eval, cfg.method
    place, actor, engine = b.placement, b.actor, b.rollout_engine
    train_file, eval_files = data_files(cfg)
    mini_batch = int(t.prompts_per_step) // int(r.parameter_sync_step)
    ov: list[str] = []

    def put(key: str, value: Any, *, add: bool = False) -> None:
        ov.append(override(key, value, add=add))

    # trainer: V1 separate_async, placement, schedule, outputs
    put("trainer.use_v1", True)
    put("trainer.v1.trainer_mode", b.trainer_mode)
    put("trainer.v1.separate_async.parameter_sync_step", int(r.parameter_sync_step))
    put("trainer.v1.separate_async.num_warmup_batches", int(b.num_warmup_batches))
    put("trainer.v1.sampler.max_off_policy_threshold", int(r.max_staleness))
    put("trainer.v1.sampler.max_off_policy_strategy", b.off_policy_strategy)
    put("actor_rollout_ref.hybrid_engine", False)
    put("trainer.nnodes", int(place.nnodes))
    put("trainer.n_gpus_per_node", int(place.trainer_gpus_per_node))
    put("actor_rollout_ref.rollout.nnodes", int(place.rollout_nnodes))
    put("actor_rollout_ref.rollout.n_gpus_per_node", int(place.rollout_gpus_per_node))
    put("actor_rollout_ref.rollout.tensor_model_parallel_size", int(place.rollout_tensor_parallel))
    put("actor_rollout_ref.rollout.checkpoint_engine.backend", engine.checkpoint_engine)
    # the Ray verl's driver starts or joins: never a cluster it happens to find (runners/verl/backend/ray_cluster.py)
    put("ray_kwargs.ray_init.address", ray_cluster.init_address(cfg), add=True)
    if place.shared_gpu:  # Ray is told of a GPU per pool; both use the one device (SHARED_GPU_ENV)
        put("ray_kwargs.ray_init.num_gpus", int(place.trainer_gpus_per_node) + int(place.rollout_gpus_per_node), add=True)
    put("trainer.total_training_steps", int(t.total_steps))
    put("trainer.test_freq", int(t.test_freq))
    put("trainer.save_freq", int(t.save_freq))
    put("trainer.val_before_train", True)
    put("trainer.resume_mode", str(t.resume))
    put("trainer.default_local_dir", paths.checkpoints)
    put("trainer.validation_data_dir", paths.validation_dump)
    if b.dump_rollouts:
        put("trainer.rollout_data_dir", paths.rollout_dump)
    put("trainer.logger", list(b.logger))
    put("trainer.project_name", b.project_name)
    put("trainer.experiment_name", cfg.run_name)
    if actor.max_ckpt_to_keep is not None:
        put("trainer.max_actor_ckpt_to_keep", int(actor.max_ckpt_to_keep))

    # data
    put("data.train_files", [train_file])
    put("data.val_files", eval_files)
    put("data.train_batch_size", int(t.prompts_per_step))
    put("data.max_prompt_length", int(r.max_prompt_length))
    put("data.max_response_length", int(r.max_response_length))
    put("data.filter_overlong_prompts", True)
    put("data.truncation", "error")
    put("data.seed", int(cfg.seed))
    if cfg.model.get("enable_thinking") is not None:
        put("data.apply_chat_template_kwargs.enable_thinking", bool(cfg.model.enable_thinking), add=True)

    # model + actor (FSDP2 trainer)
    put("actor_rollout_ref.model.path", str(cfg.model.path))
    put("actor_rollout_ref.model.use_remove_padding", bool(actor.remove_padding))
    put("actor_rollout_ref.model.enable_gradient_checkpointing", bool(actor.gradient_checkpointing))
    put("actor_rollout_ref.model.use_fused_kernels", False)  # the head gather needs the full logits
    put("actor_rollout_ref.actor.strategy", actor.strategy)
    # verl's FSDP engine takes its compute dtype from mixed_precision.param_dtype (bf16 when unset);
    # fsdp_config.dtype is read by the Megatron engine only
    put("actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype", actor.dtype, add=True)
    put("actor_rollout_ref.actor.fsdp_config.seed", int(cfg.seed))
    put("actor_rollout_ref.actor.use_torch_compile", bool(actor.use_torch_compile))
    # verl's FSDP engine reads its own copy (torch.compile of the entropy function), which does not follow the
    # actor's key: without this, use_torch_compile=false still compiled (25 s per arm on a CPU rehearsal)
    put("actor_rollout_ref.actor.fsdp_config.use_torch_compile", bool(actor.use_torch_compile))
    put("actor_rollout_ref.actor.optim.optimizer", "AdamW")
    put("actor_rollout_ref.actor.optim.lr", float(t.lr))
    put("actor_rollout_ref.actor.optim.weight_decay", float(t.weight_decay))
    put("actor_rollout_ref.actor.optim.clip_grad", float(t.grad_clip))
    put("actor_rollout_ref.actor.optim.lr_scheduler_type", "constant")
    put("actor_rollout_ref.actor.optim.lr_warmup_steps_ratio", 0.0)
    put("actor_rollout_ref.actor.ppo_mini_batch_size", mini_batch)
    put("actor_rollout_ref.actor.ppo_epochs", 1)
    put("actor_rollout_ref.actor.use_dynamic_bsz", bool(actor.use_dynamic_bsz))
    put("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", int(actor.max_token_len_per_gpu))
    put("actor_rollout_ref.actor.loss_agg_mode", str(t.loss_agg_mode))
    put("actor_rollout_ref.actor.entropy_coeff", 0.0)
    put("actor_rollout_ref.actor.use_kl_loss", False)
    put("actor_rollout_ref.actor.calculate_entropy", bool(actor.calculate_entropy))
    put("actor_rollout_ref.actor.entropy_from_logits_with_chunking", bool(actor.entropy_from_logits_with_chunking))
    put("actor_rollout_ref.actor.entropy_from_logits_chunk_size", int(actor.entropy_chunk_size))
    put("actor_rollout_ref.actor.entropy_checkpointing", bool(actor.entropy_checkpointing))
    put("actor_rollout_ref.actor.fsdp_config.offload_policy", bool(actor.offload_policy))
    put("actor_rollout_ref.actor.data_loader_seed", int(cfg.seed))
    put("actor_rollout_ref.actor.checkpoint.save_contents", list(actor.checkpoint_contents))

    # the loss: the project's registered arm, bypass-mode REINFORCE on the actor side
    put("actor_rollout_ref.actor.policy_loss.loss_mode", str(m.loss_mode))
    correction = _rollout_correction(cfg)
    for key, value in correction.items():
        put(f"{config_facts.ACTOR_RC}.{key}", value, add=True)

    # rollout (standalone vLLM replicas) and evaluation sampling
    put("actor_rollout_ref.rollout.name", engine.name)
    put("actor_rollout_ref.rollout.dtype", engine.dtype)
    put("actor_rollout_ref.rollout.gpu_memory_utilization", float(engine.gpu_memory_utilization))
    put("actor_rollout_ref.rollout.agent.num_workers", int(engine.agent_workers))
    put("actor_rollout_ref.rollout.max_num_seqs", int(engine.max_num_seqs))
    put("actor_rollout_ref.rollout.max_num_batched_tokens", int(engine.max_num_batched_tokens))
    put("actor_rollout_ref.rollout.n", int(t.n))
    put("actor_rollout_ref.rollout.do_sample", True)
    put("actor_rollout_ref.rollout.temperature", float(r.temperature))
    put("actor_rollout_ref.rollout.top_p", float(r.top_p))
    put("actor_rollout_ref.rollout.top_k", int(r.top_k))
    put("actor_rollout_ref.rollout.seed", int(cfg.seed))
    put("actor_rollout_ref.rollout.calculate_log_probs", True)
    put("actor_rollout_ref.rollout.logprobs_mode", engine.logprobs_mode)
    put("actor_rollout_ref.rollout.val_kwargs.n", int(e.n))
    put("actor_rollout_ref.rollout.val_kwargs.do_sample", True)
    put("actor_rollout_ref.rollout.val_kwargs.temperature", float(e.temperature))
    put("actor_rollout_ref.rollout.val_kwargs.top_p", float(e.top_p))
    put("actor_rollout_ref.rollout.val_kwargs.top_k", int(r.top_k))

    # advantages, rollout correction (driver side), reward
    put("algorithm.adv_estimator", "grpo")
    put("algorithm.norm_adv_by_std_in_grpo", False)
    put("algorithm.use_kl_in_reward", False)
    for key, value in correction.items():
        put(f"{config_facts.DRIVER_RC}.{key}", value)
    put("reward.custom_reward_function.path", b.reward.function_path)
    put("reward.custom_reward_function.name", b.reward.function_name)
    put("reward.reward_manager.source", b.reward.manager_source)
    put("reward.reward_manager.name", b.reward.manager_name)
    put("reward.reward_manager.module.path", b.reward.manager_module)

    # score centering: the sampler's head from vLLM to the trainer's logits, by the arm's transport
    if uses_project_transport(cfg):
        put(f"{config_facts.ROLLOUT}.agent.agent_loop_manager_class", verl_head.MANAGER_CLASS, add=True)
        put(f"{config_facts.ROLLOUT}.custom.{verl_head.CUSTOM_KEY}", int(m.top_k), add=True)
        put(f"{config_facts.ROLLOUT}.engine_kwargs.vllm.max_logprobs", int(m.top_k), add=True)  # vLLM's default is 20
        if engine.head_transport == "logits_processor":  # vLLM's engine argument; verl passes it on as --logits-processors
            put(f"{config_facts.ROLLOUT}.engine_kwargs.vllm.logits_processors", verl_head.HEAD_PROCESSOR, add=True)
    elif ArmSpec.of(cfg.method).sc:  # verl's own (keys of newer verl)
        put(newer_keys.TOPK_KEY, int(m.top_k), add=True)
        put(newer_keys.DRIVER_SC_KEY, True, add=True)
        put(newer_keys.ACTOR_SC_KEY, True, add=True)

    # environment of every Ray actor (the driver gets the same variables from the launcher)
    for name, value in process_env(cfg, paths).items():
        put(f"ray_kwargs.ray_init.runtime_env.env_vars.{name}", value, add=True)

    if is_rehearsal(cfg):
        ov = rehearsal.apply(ov, cfg, paths.cpu_state)
    ov.extend(str(x) for x in b.extra_overrides)
    return ov


def hydra_overrides(paths: AttemptPaths) -> list[str]:
    """Overrides of verl's *own* Hydra app (not part of the composed verl config)."""
    return [override("hydra.run.dir", paths.hydra_dir)]
