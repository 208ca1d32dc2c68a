"""The estimate of one resolved verl launch config: its inputs, each GPU side's terms, the time, the disk.

:func:`inputs_of` reads what decides memory, time and disk from the config (the model's shape by
:func:`runners.config.model_shapes.shape_of`, the GPU from ``gpu``, the assumptions from ``backend.capacity``);
:func:`evaluate` turns those into the estimate (:mod:`~runners.capacity.trainer_memory`, :mod:`~runners.capacity.rollout_memory`,
:mod:`~runners.capacity.timing`, :mod:`~runners.capacity.disk`): per GPU side its terms, ``fits`` and its
margin, the requests in flight against the KV cache, the time with the range of the length assumption, the
disk. The search for fixes is :mod:`~runners.capacity.fixes`; the plan a user reads, :mod:`~runners.capacity.plan`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from omegaconf import DictConfig

from runners.capacity import disk, nodes, timing
from runners.capacity import rollout_memory as rollout_mem
from runners.capacity import trainer_memory as trainer_mem
from runners.capacity.nodes import Nodes
from runners.config.config_error import ConfigError
from runners.config.model_shapes import ModelConfigError, ModelShape, shape_of

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclasses.dataclass(frozen=True)
class Inputs:
    """Everything of a launch the plan reads, flat, so a knob can be changed with ``dataclasses.replace``."""

    shape: ModelShape
    shape_source: str
    gpu_name: str
    gpu_bytes: int
    bandwidth: float
    flops: float
    trainer_gpus: int  # all nodes'
    trainer_nodes: int
    rollout_gpus: int
    tensor_parallel: int
    shared_gpu: bool
    tokens: int
    gradient_checkpointing: bool
    offload_policy: bool
    calculate_entropy: bool
    entropy_chunking: bool
    entropy_chunk_rows: int
    entropy_checkpointing: bool
    flash_attn: bool
    temperature: float
    sc_top_k: int
    gpu_memory_utilization: float
    rollout_dtype_bytes: int
    max_num_seqs: int
    max_num_batched_tokens: int
    cuda_context_bytes: int
    trainer_nccl_bytes: int
    fragmentation: float
    vllm_outside_torch_bytes: int
    vllm_cuda_graph_bytes: int
    workload: timing.Workload
    time: timing.TimeAssumptions
    disk: disk.DiskInputs
    intra_node_link: timing.Link  # the GPU preset's (gpu.intra_node_link)
    max_staleness: int = 0
    extra_overrides: tuple[str, ...] = ()  # backend.extra_overrides (a fix that sets SP keeps the others)
    sequence_parallel: int = 1  # Ulysses (actor_rollout_ref.actor.ulysses_sequence_parallel_size)
    nodes: Nodes | None = None  # the nodes and the link between them (runners/capacity/nodes.py)



def known_shape(cfg: DictConfig) -> tuple[ModelShape, str] | None:
    """``(shape, where it was read)`` of the trained model: one of the project's tiny models, as the rehearsal
    trains (:func:`runners.tiny.model.tiny_model_yaml`; its shape from its yaml and tokenizer), else ``model.path``'s config.json
    (:func:`runners.config.model_shapes.shape_of`); None when no config.json is found (before verl downloads it),
    a :class:`ModelConfigError` naming ``model.path`` for one that is found but gives no shape."""
    from runners.tiny.model import shape_config, tiny_model_yaml

    if (tiny := tiny_model_yaml(cfg)) is not None:  # the rehearsal trains the tiny model: no config.json before it
        return ModelShape.from_config(shape_config(tiny)), str(tiny)
    try:
        return shape_of(str(cfg.model.path))
    except ModelConfigError as err:
        raise ModelConfigError(f"model.path={cfg.model.path}: {err}") from None


def model_shape(cfg: DictConfig) -> tuple[ModelShape, str]:
    """:func:`known_shape`, where an unknown shape is a :class:`ModelConfigError` (a ``ConfigError``) naming ``model.path``."""
    found = known_shape(cfg)
    if found is None:
        raise ModelConfigError(f"model.path={cfg.model.path}: no config.json to plan the launch's capacity from (not a local "
                         "folder, not in the Hugging Face cache offline, not a published shape of "
                         "runners/config/model_shapes.py); download the model's config.json, or set "
                         "backend.capacity.enforce=false to launch without a plan")
    return found


def inputs_of(cfg: DictConfig) -> Inputs:
    """The plan's inputs from a resolved verl-backend config; :class:`ConfigError` naming the key where a
    value cannot be planned with (a number that is not finite, lengths no distribution has)."""
    from ablations.arms import ArmSpec

    for key in ("gpu.memory_bytes", "gpu.memory_bandwidth_bytes_per_s", "gpu.bf16_dense_flops",
                *(f"backend.capacity.{k}" for k in ("cuda_context_bytes", "trainer_nccl_bytes", "fragmentation",
                                                     "vllm_outside_torch_bytes", "vllm_cuda_graph_bytes",
                                                     "disk_budget_bytes")),
                *(f"backend.capacity.time.{f.name}" for f in dataclasses.fields(timing.TimeAssumptions))):
        value = _select(cfg, key)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ConfigError(f"{key}={value!r}: the capacity plan needs a finite number")

    b = cfg.backend
    place, actor, engine, cap = b.placement, b.actor, b.rollout_engine, b.capacity
    shape, source = model_shape(cfg)
    checkpoints = disk.inputs_of(cfg, shape)
    workload = timing.Workload(
        prompts_per_step=int(cfg.trainer.prompts_per_step), n=int(cfg.trainer.n),
        max_prompt_length=int(cfg.rollout.max_prompt_length), max_response_length=int(cfg.rollout.max_response_length),
        total_steps=int(cfg.trainer.total_steps), test_freq=int(cfg.trainer.test_freq),
        eval_prompts=sum(int(s.size) for s in cfg.data.eval_sets), eval_n=int(cfg.eval.n),
        gradient_checkpointing=bool(actor.gradient_checkpointing), tokens_per_micro_batch=int(actor.max_token_len_per_gpu),
        offload_policy=bool(actor.offload_policy), head_bytes_per_token=_head_bytes(int(cfg.method.top_k)) if ArmSpec.of(cfg.method).sc else 0,
        save_freq=int(cfg.trainer.save_freq), checkpoint_bytes=float(disk.estimate(checkpoints)["checkpoint_bytes"]))
    link = cfg.gpu.intra_node_link
    return Inputs(
        shape=shape, shape_source=source, gpu_name=str(cfg.gpu.name), gpu_bytes=int(cfg.gpu.memory_bytes),
        bandwidth=float(cfg.gpu.memory_bandwidth_bytes_per_s), flops=float(cfg.gpu.bf16_dense_flops),
        trainer_gpus=int(place.nnodes) * int(place.trainer_gpus_per_node), trainer_nodes=int(place.nnodes),
        rollout_gpus=int(place.rollout_nnodes) * int(place.rollout_gpus_per_node),
        tensor_parallel=int(place.rollout_tensor_parallel), shared_gpu=bool(place.shared_gpu),
        tokens=int(actor.max_token_len_per_gpu), gradient_checkpointing=bool(actor.gradient_checkpointing),
        offload_policy=bool(actor.offload_policy), calculate_entropy=bool(actor.calculate_entropy),
        entropy_chunking=bool(actor.entropy_from_logits_with_chunking), entropy_chunk_rows=int(actor.entropy_chunk_size),
        entropy_checkpointing=bool(actor.entropy_checkpointing), flash_attn=bool(cap.flash_attn),
        temperature=float(cfg.rollout.temperature), sc_top_k=int(cfg.method.top_k) if ArmSpec.of(cfg.method).sc else 0,
        gpu_memory_utilization=float(engine.gpu_memory_utilization), rollout_dtype_bytes=DTYPE_BYTES[str(engine.dtype)],
        max_num_seqs=int(engine.max_num_seqs), max_num_batched_tokens=int(engine.max_num_batched_tokens),
        cuda_context_bytes=int(cap.cuda_context_bytes), trainer_nccl_bytes=int(cap.trainer_nccl_bytes),
        fragmentation=float(cap.fragmentation), vllm_outside_torch_bytes=int(cap.vllm_outside_torch_bytes),
        vllm_cuda_graph_bytes=int(cap.vllm_cuda_graph_bytes), workload=workload,
        time=_time_assumptions(cfg), disk=checkpoints, max_staleness=int(cfg.rollout.max_staleness),
        intra_node_link=timing.Link(str(link.name), float(link.bytes_per_s), float(link.latency_s)),
        extra_overrides=tuple(str(e) for e in cfg.backend.get("extra_overrides", None) or []),
        sequence_parallel=sequence_parallel(cfg), nodes=_nodes(cfg))


#: verl's Ulysses sequence parallelism of the actor, set through ``backend.extra_overrides``.
SEQUENCE_PARALLEL = "actor_rollout_ref.actor.ulysses_sequence_parallel_size"


def sequence_parallel(cfg: DictConfig) -> int:
    """The Ulysses size of ``backend.extra_overrides`` (the last entry of the key wins, as in verl's composition;
    1 without one). verl packs ``max_token_len_per_gpu x SP`` tokens into a micro-batch and gives each of the SP
    ranks its ``max_token_len_per_gpu`` (``verl/workers/engine/utils.py``); ConfigError for a value that is not an
    integer >= 1."""
    from runners.config.hydra_override import parse

    size: object = 1
    for item in cfg.backend.get("extra_overrides", None) or []:
        try:
            key, value, _ = parse(str(item))
        except Exception:  # noqa: BLE001 - the verl backend's checks name a malformed entry
            continue
        if key == SEQUENCE_PARALLEL:
            size = value
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ConfigError(f"backend.extra_overrides: {SEQUENCE_PARALLEL}={size!r}: an integer >= 1")
    return int(size)


def _nodes(cfg: DictConfig) -> Nodes:
    """The launch's nodes and the per-GPU link between them (the key, else the GPU preset's); a launch across nodes
    on a GPU without a known link is a config error naming the key."""
    place = cfg.backend.placement
    configured = _select(cfg, nodes.KEY)
    out = Nodes(int(place.nnodes), int(place.rollout_nnodes), nodes.link_of(str(cfg.gpu.name), configured))
    if out.spans_nodes and not out.internode_bytes_per_s_per_gpu > 0:
        raise ConfigError(f"{nodes.KEY}={configured}: the capacity plan of a launch across nodes needs the link between "
                          f"them for gpu={cfg.gpu.name} (no preset value); set it in bytes per second and GPU")
    return out


def _select(cfg: DictConfig, key: str) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.select(cfg, key)


def _time_assumptions(cfg: DictConfig) -> timing.TimeAssumptions:
    """``backend.capacity.time`` as :class:`~runners.config.schema.TimeAssumptions`, its lengths checked."""
    t = cfg.backend.capacity.time
    ta = timing.TimeAssumptions(**{f.name: float(t[f.name]) for f in dataclasses.fields(timing.TimeAssumptions)})
    for lengths, (mean, at_cap) in ((timing.train_lengths, ("mean_response_fraction", "response_at_cap_fraction")),
                                    (timing.eval_lengths, ("eval_mean_response_fraction",
                                                           "eval_response_at_cap_fraction"))):
        try:
            lengths(ta, 1)
        except ValueError as err:
            raise ConfigError(f"backend.capacity.time.{at_cap}={t[at_cap]} with backend.capacity.time.{mean}="
                              f"{t[mean]}: {err}; allowed: {at_cap} <= {mean}") from None
    return ta


#: Bytes of the sampler's head per generated token and head id: an int32 id and its float32 log-prob, the layout
#: of ``runners/verl_side/head/head_layout.py`` (``BYTES_PER_TOKEN_PER_ID``), copied so that the plan imports no
#: backend; tests/test_import_layers.py holds the two equal.
HEAD_BYTES_PER_ID = 4 + 4


def _head_bytes(k: int) -> int:
    return k * HEAD_BYTES_PER_ID


# -- the sides ---------------------------------------------------------------------------------
def trainer_side(i: Inputs, rollout_total: int) -> dict[str, Any]:
    """The trainer GPU's plan; on a GPU shared with vLLM (``rollout_total`` bytes) the trainer gets the rest."""
    setup = {"offload_policy": i.offload_policy, "calculate_entropy": i.calculate_entropy,
             "entropy_chunk_rows": i.entropy_chunk_rows if i.entropy_chunking else i.tokens,
             "entropy_checkpointing": i.entropy_checkpointing, "flash_cross_entropy": i.flash_attn,
             "temperature_copy": i.temperature != 1.0, "sc_top_k": i.sc_top_k}
    terms = trainer_mem.trainer_terms(i.shape, i.tokens, gradient_checkpointing=i.gradient_checkpointing,
                                      dp_size=i.trainer_gpus, **setup)
    reserve = i.cuda_context_bytes + i.trainer_nccl_bytes + int(i.fragmentation * terms["peak"])
    terms.update(reserve=reserve, total=terms["peak"] + reserve)
    other = trainer_mem.trainer_terms(i.shape, i.tokens, gradient_checkpointing=not i.gradient_checkpointing,
                                      dp_size=i.trainer_gpus, **setup)["activations"]
    with_ckpt, without = (terms["activations"], other) if i.gradient_checkpointing else (other, terms["activations"])
    budget = i.gpu_bytes - (rollout_total if i.shared_gpu else 0)
    return {"per_gpu_bytes": terms, "activations_with_checkpointing": with_ckpt,
            "activations_without_checkpointing": without, "gpu_bytes": budget, "tokens_per_micro_batch": i.tokens,
            "dp_size": i.trainer_gpus, "setup": setup, "fits": terms["total"] <= budget,
            "margin_bytes": budget - terms["total"]}


def rollout_side(i: Inputs) -> dict[str, Any]:
    sequence = i.workload.max_prompt_length + i.workload.max_response_length
    setup = rollout_mem.RolloutSetup(
        gpu_bytes=i.gpu_bytes, gpu_memory_utilization=i.gpu_memory_utilization, tensor_parallel=i.tensor_parallel,
        dtype_bytes=i.rollout_dtype_bytes, kv_dtype_bytes=i.rollout_dtype_bytes, max_num_batched_tokens=i.max_num_batched_tokens,
        max_num_seqs=i.max_num_seqs, sequence_tokens=sequence, outside_torch_bytes=i.vllm_outside_torch_bytes,
        cuda_graph_bytes=i.vllm_cuda_graph_bytes, context_bytes=i.cuda_context_bytes)
    r = rollout_mem.rollout_terms(i.shape, setup)
    kv_needed = sequence * r["kv_bytes_per_token"]
    outside_fits = r["total"] <= i.gpu_bytes
    problems = []
    if r["kv_cache"] < kv_needed:
        problems.append(("kv_cache" if r["weights"] < r["vllm_budget"] / 2 else "weights",
                         f"vLLM's KV cache ({gb(r['kv_cache'])}) cannot hold one sequence of {sequence:,} tokens "
                         f"({gb(kv_needed)}): vLLM refuses to start"))
    if not outside_fits:
        problems.append(("cuda_context", f"gpu_memory_utilization x the GPU plus the CUDA context "
                                         f"({gb(r['total'])}) exceed the GPU ({gb(i.gpu_bytes)})"))
    per_gpu = {k: r[k] for k in ("weights", "activation_peak", "outside_torch", "cuda_graphs", "kv_cache",
                                 "cuda_context", "total")}
    return {"per_gpu_bytes": per_gpu, "kv_bytes_per_token": r["kv_bytes_per_token"],
            "in_flight": in_flight(i, r["concurrent_sequences"]),
            "kv_capacity_tokens": r["kv_capacity_tokens"], "sequence_tokens": sequence,
            "concurrent_sequences": r["concurrent_sequences"], "vllm_budget_bytes": r["vllm_budget"],
            "tensor_parallel": i.tensor_parallel, "replicas": max(i.rollout_gpus // i.tensor_parallel, 1),
            "gpu_bytes": i.gpu_bytes, "fits": not problems, "margin_bytes": min(r["kv_cache"] - kv_needed,
                                                                               i.gpu_bytes - r["total"]),
            "problems": [text for _, text in problems], "limiting_terms": [term for term, _ in problems]}


def in_flight(i: Inputs, full_length_sequences: float) -> dict[str, Any]:
    """The requests a replica may decode at once against what its KV cache holds at full length: the
    :class:`~runners.capacity.timing.ReplicaLoad` the time model decodes with (one structure for both).

    separate_async keeps generating while the trainer trains, up to ``rollout.max_staleness`` versions ahead, so
    a replica may hold up to ``(1 + max_staleness) x`` its share of a step's sequences, at most ``max_num_seqs``.
    Where that exceeds the sequences of ``max_prompt_length + max_response_length`` tokens the KV cache holds,
    vLLM preempts (and recomputes) sequences as they grow: ``preempts`` and the fix, ``max_num_seqs`` at the KV
    capacity."""
    hw = _hardware(i, weights=0, kv_bytes_per_token=1, kv_capacity_tokens=0)
    sequence = i.workload.max_prompt_length + i.workload.max_response_length
    load = timing.replica_load(i.workload.prompts_per_step * i.workload.n, hw, sequence, sequence)
    holds = int(full_length_sequences) if math.isfinite(full_length_sequences) else load.requests
    preempts = load.requests > holds
    return {"requests_per_replica": load.requests, "full_length_sequences_held": holds, "preempts": preempts,
            "fix": {"key": "backend.rollout_engine.max_num_seqs", "value": max(holds, 1)} if preempts else None}


def _hardware(i: Inputs, weights: int, kv_bytes_per_token: int, kv_capacity_tokens: int) -> timing.Hardware:
    return timing.Hardware(bandwidth_bytes_per_s=i.bandwidth, bf16_flops=i.flops, trainer_gpus=i.trainer_gpus,
                           rollout_gpus=i.rollout_gpus, tensor_parallel=i.tensor_parallel, shared_gpu=i.shared_gpu,
                           weights_bytes_per_rank=weights, kv_bytes_per_token=kv_bytes_per_token,
                           kv_capacity_tokens=kv_capacity_tokens, max_num_seqs=i.max_num_seqs,
                           intra_node_link=i.intra_node_link, max_staleness=i.max_staleness,
                           sequence_parallel=i.sequence_parallel, top_k=i.sc_top_k, nodes=i.nodes)


def time_side(i: Inputs, rollout: dict[str, Any]) -> dict[str, Any]:
    hw = _hardware(i, rollout["per_gpu_bytes"]["weights"], rollout["kv_bytes_per_token"], rollout["kv_capacity_tokens"])
    out = timing.step_and_experiment(i.shape, i.workload, hw, i.time)
    return {**out, "range": timing.length_range(i.shape, i.workload, hw, i.time), "estimate": True,
            "mfu_convention": "verl's perf/mfu/actor (6N FLOPs per token plus attention; recomputation not counted)",
            "assumptions": dataclasses.asdict(i.time), "engine_costs": dataclasses.asdict(timing.ENGINE),
            "intra_node_link": dataclasses.asdict(i.intra_node_link), "sequence_parallel": i.sequence_parallel}


def evaluate(i: Inputs) -> dict[str, Any]:
    """The plan of these inputs (no knob search): trainer, rollout and time."""
    rollout = rollout_side(i)
    trainer = trainer_side(i, rollout["per_gpu_bytes"]["total"])
    if not trainer["fits"]:
        trainer["limiting_terms"] = [limiting_term(trainer["per_gpu_bytes"])]
    return {"trainer": trainer, "rollout": rollout, "time": time_side(i, rollout),
            "disk": disk.estimate(i.disk), "fits": trainer["fits"] and rollout["fits"]}


def limiting_term(per_gpu: dict[str, int]) -> str:
    """The trainer term most worth shrinking: the largest one a knob can change."""
    return max(("model_states", "activations", "logits", "sc_head", "gathered"), key=lambda k: per_gpu.get(k, 0))


def gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"
