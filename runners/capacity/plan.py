"""The capacity plan of a resolved verl launch config: ``capacity.json``, ``capacity.md`` and the refusal.

:func:`inputs_of` reads what decides memory and time from the config (the model's shape by
:func:`runners.capacity.shapes.shape_of`, the GPU from ``gpu``, the assumptions from ``backend.capacity``);
:func:`evaluate` turns those into the plan (:mod:`~runners.capacity.trainer`, :mod:`~runners.capacity.rollout`,
:mod:`~runners.capacity.timing`): per GPU side its terms, ``fits`` and its margin, and for a side that
does not fit the term that limits it and the single-knob changes (:data:`KNOBS`) that would make it fit,
each re-planned. :func:`refusal` is the launch's check (``backend.capacity.enforce``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from runners.capacity import rollout as rollout_mem
from runners.capacity import timing
from runners.capacity import trainer as trainer_mem
from runners.capacity.shapes import ModelShape, shape_of

JSON, MARKDOWN = "capacity.json", "capacity.md"
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
ESTIMATE = ("an estimate from closed-form terms (runners/capacity, docs/capacity.md), not a measurement: "
            "memory against torch's own accounting and time against published runs are in docs/capacity.md")


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


@dataclasses.dataclass(frozen=True)
class Knob:
    """A single change that may make a side fit: the config key it sets and how it changes the :class:`Inputs`.

    ``proposed(inputs)`` is the value the key would get (None where the knob does not apply); ``apply(inputs,
    value)`` the inputs with it (by default the :class:`Inputs` field ``field`` set to the value).
    """

    key: str
    field: str
    propose: Any  # (inputs) -> value or None

    def proposed(self, inputs: Inputs) -> Any:
        return self.propose(inputs)

    def apply(self, inputs: Inputs, value: Any) -> Inputs:
        if self.field == "trainer_gpus":  # the key is per node; FSDP shards over all nodes' GPUs
            return dataclasses.replace(inputs, trainer_gpus=value * inputs.trainer_nodes)
        if self.field == "max_response_length":  # the micro-batch must still hold one whole sequence
            work = dataclasses.replace(inputs.workload, max_response_length=value)
            return dataclasses.replace(inputs, workload=work, tokens=min(inputs.tokens, work.max_prompt_length + value))
        return dataclasses.replace(inputs, **{self.field: value})


def _smaller_tokens(i: Inputs) -> int | None:
    floor = i.workload.max_prompt_length + i.workload.max_response_length
    return max(i.tokens // 2, floor) if i.tokens > floor else None


def _shorter_responses(i: Inputs) -> int | None:
    """Half the response cap where the micro-batch is already one sequence: changes the experiment, said so."""
    floor = i.workload.max_prompt_length + i.workload.max_response_length
    return i.workload.max_response_length // 2 if i.tokens <= floor and i.workload.max_response_length >= 1024 else None


_TOKENS = Knob("backend.actor.max_token_len_per_gpu", "tokens", _smaller_tokens)
_RESPONSES = Knob("rollout.max_response_length", "max_response_length", _shorter_responses)
_TP = Knob("backend.placement.rollout_tensor_parallel", "tensor_parallel",
           lambda i: 2 * i.tensor_parallel if 2 * i.tensor_parallel <= i.rollout_gpus else None)
_UTILISATION = Knob("backend.rollout_engine.gpu_memory_utilization", "gpu_memory_utilization",
                    lambda i: 0.9 if i.gpu_memory_utilization < 0.9 else None)
#: What a user must know of a knob beyond its value.
KNOB_NOTES = {"rollout.max_response_length": "shorter responses: a different experiment, not comparable to the reference"}
#: The knobs tried on a side that does not fit, by the term they shrink. (verl's entropy_checkpointing is not
#: one: it recomputes the whole chunked entropy in the backward, which peaks higher than eager mode.)
KNOBS: dict[str, tuple[Knob, ...]] = {
    "model_states": (Knob("backend.actor.offload_policy", "offload_policy", lambda i: True if not i.offload_policy else None),
                     Knob("backend.placement.trainer_gpus_per_node", "trainer_gpus",
                          lambda i: 2 * i.trainer_gpus // i.trainer_nodes if not i.shared_gpu else None)),
    "logits": (_TOKENS, _RESPONSES),
    "activations": (Knob("backend.actor.gradient_checkpointing", "gradient_checkpointing",
                         lambda i: True if not i.gradient_checkpointing else None), _TOKENS, _RESPONSES),
    "sc_head": (_TOKENS, _RESPONSES),
    "gathered": (),
    "weights": (_TP, _UTILISATION),
    "kv_cache": (_TP, _UTILISATION, Knob("backend.rollout_engine.max_num_seqs", "max_num_seqs",
                                         lambda i: i.max_num_seqs // 2 if i.max_num_seqs > 16 else None)),
    "cuda_context": (Knob("backend.rollout_engine.gpu_memory_utilization", "gpu_memory_utilization",
                          lambda i: round(i.gpu_memory_utilization - 0.05, 2)),),
}


def model_shape(cfg: DictConfig) -> tuple[ModelShape, str]:
    """The trained model's shape: the rehearsal's tiny Qwen3 (its yaml and tokenizer), else ``model.path``'s
    config.json (:func:`runners.capacity.shapes.shape_of`); ``ValueError`` naming ``model.path`` when unknown."""
    from runners.verl_backend import rehearsal

    if rehearsal.is_rehearsal(cfg):
        from omegaconf import OmegaConf

        from runners.local.tokenizer import build_tokenizer

        tiny = OmegaConf.load(rehearsal.MODEL_YAML)
        config = {k: tiny[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                                       "num_key_value_heads", "head_dim", "tie_word_embeddings")}
        return ModelShape.from_config({**config, "vocab_size": len(build_tokenizer())}), str(rehearsal.MODEL_YAML)
    found = shape_of(str(cfg.model.path))
    if found is None:
        raise ValueError(f"model.path={cfg.model.path}: no config.json to plan the launch's capacity from (not a local "
                         "folder, not in the Hugging Face cache offline, not a published shape of "
                         "runners/capacity/shapes.py); download the model's config.json, or set "
                         "backend.capacity.enforce=false to launch without a plan")
    return found


def inputs_of(cfg: DictConfig) -> Inputs:
    """The plan's inputs from a resolved verl-backend config."""
    from runners.schema import arm_traits

    b = cfg.backend
    place, actor, engine, cap = b.placement, b.actor, b.rollout_engine, b.capacity
    shape, source = model_shape(cfg)
    workload = timing.Workload(
        prompts_per_step=int(cfg.trainer.prompts_per_step), n=int(cfg.trainer.n),
        max_prompt_length=int(cfg.rollout.max_prompt_length), max_response_length=int(cfg.rollout.max_response_length),
        total_steps=int(cfg.trainer.total_steps), test_freq=int(cfg.trainer.test_freq),
        eval_prompts=sum(int(s.size) for s in cfg.data.eval_sets), eval_n=int(cfg.eval.n),
        gradient_checkpointing=bool(actor.gradient_checkpointing), tokens_per_micro_batch=int(actor.max_token_len_per_gpu),
        offload_policy=bool(actor.offload_policy), head_bytes_per_token=_head_bytes(int(cfg.method.top_k)) if arm_traits(cfg.method).sc else 0)
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
        temperature=float(cfg.rollout.temperature), sc_top_k=int(cfg.method.top_k) if arm_traits(cfg.method).sc else 0,
        gpu_memory_utilization=float(engine.gpu_memory_utilization), rollout_dtype_bytes=DTYPE_BYTES[str(engine.dtype)],
        max_num_seqs=int(engine.max_num_seqs), max_num_batched_tokens=int(engine.max_num_batched_tokens),
        cuda_context_bytes=int(cap.cuda_context_bytes), trainer_nccl_bytes=int(cap.trainer_nccl_bytes),
        fragmentation=float(cap.fragmentation), vllm_outside_torch_bytes=int(cap.vllm_outside_torch_bytes),
        vllm_cuda_graph_bytes=int(cap.vllm_cuda_graph_bytes), workload=workload,
        time=timing.TimeAssumptions(**{f.name: float(cap.time[f.name]) for f in dataclasses.fields(timing.TimeAssumptions)}))


def _head_bytes(k: int) -> int:
    from runners.verl_head.layout import bytes_per_token

    return bytes_per_token(k)


# -- the plan ----------------------------------------------------------------------------------
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
                         f"vLLM's KV cache ({_gb(r['kv_cache'])}) cannot hold one sequence of {sequence:,} tokens "
                         f"({_gb(kv_needed)}): vLLM refuses to start"))
    if not outside_fits:
        problems.append(("cuda_context", f"gpu_memory_utilization x the GPU plus the CUDA context "
                                         f"({_gb(r['total'])}) exceed the GPU ({_gb(i.gpu_bytes)})"))
    per_gpu = {k: r[k] for k in ("weights", "activation_peak", "outside_torch", "cuda_graphs", "kv_cache",
                                 "cuda_context", "total")}
    return {"per_gpu_bytes": per_gpu, "kv_bytes_per_token": r["kv_bytes_per_token"],
            "kv_capacity_tokens": r["kv_capacity_tokens"], "sequence_tokens": sequence,
            "concurrent_sequences": r["concurrent_sequences"], "vllm_budget_bytes": r["vllm_budget"],
            "tensor_parallel": i.tensor_parallel, "replicas": max(i.rollout_gpus // i.tensor_parallel, 1),
            "gpu_bytes": i.gpu_bytes, "fits": not problems, "margin_bytes": min(r["kv_cache"] - kv_needed,
                                                                               i.gpu_bytes - r["total"]),
            "problems": [text for _, text in problems], "limiting_terms": [term for term, _ in problems]}


def time_side(i: Inputs, rollout: dict[str, Any]) -> dict[str, Any]:
    hw = timing.Hardware(bandwidth_bytes_per_s=i.bandwidth, bf16_flops=i.flops, trainer_gpus=i.trainer_gpus,
                         rollout_gpus=i.rollout_gpus, tensor_parallel=i.tensor_parallel, shared_gpu=i.shared_gpu,
                         weights_bytes_per_rank=rollout["per_gpu_bytes"]["weights"],
                         kv_bytes_per_token=rollout["kv_bytes_per_token"],
                         kv_capacity_tokens=rollout["kv_capacity_tokens"], max_num_seqs=i.max_num_seqs)
    out = timing.step_and_experiment(i.shape, i.workload, hw, i.time)
    return {**out, "estimate": True, "assumptions": dataclasses.asdict(i.time)}


def evaluate(i: Inputs) -> dict[str, Any]:
    """The plan of these inputs (no knob search): trainer, rollout and time."""
    rollout = rollout_side(i)
    trainer = trainer_side(i, rollout["per_gpu_bytes"]["total"])
    if not trainer["fits"]:
        trainer["limiting_terms"] = [limiting_term(trainer["per_gpu_bytes"])]
    return {"trainer": trainer, "rollout": rollout, "time": time_side(i, rollout),
            "fits": trainer["fits"] and rollout["fits"]}


def limiting_term(per_gpu: dict[str, int]) -> str:
    """The trainer term most worth shrinking: the largest one a knob can change."""
    return max(("model_states", "activations", "logits", "sc_head", "gathered"), key=lambda k: per_gpu.get(k, 0))


def fixes(i: Inputs, side: str, terms: list[str]) -> list[dict[str, Any]]:
    """The single-knob changes of the ``terms``' knobs, each re-planned: key, value, whether ``side`` then fits."""
    out, seen = [], set()
    for term in terms:
        for knob in KNOBS.get(term, ()):
            value = knob.proposed(i)
            if value is None or knob.key in seen:
                continue
            seen.add(knob.key)
            plan = evaluate(knob.apply(i, value))[side]
            out.append({"key": knob.key, "value": value, "fits": plan["fits"], "margin_bytes": plan["margin_bytes"]})
    return out


def combined_fix(i: Inputs, side: str, rounds: int = 4) -> list[dict[str, Any]] | None:
    """Knobs applied one after another, each the one that gains ``side`` the most margin on its limiting term
    at that point, until the side fits: the changes (key, value) that make it fit, or None."""
    changes: list[dict[str, Any]] = []
    for _ in range(rounds):
        plan = evaluate(i)[side]
        if plan["fits"]:
            return changes
        best = None
        for term in plan["limiting_terms"]:
            for knob in KNOBS.get(term, ()):
                value = knob.proposed(i)
                if value is None:
                    continue
                trial = knob.apply(i, value)
                margin = evaluate(trial)[side]["margin_bytes"]
                if best is None or margin > best[0]:
                    best = (margin, knob, value, trial)
        if best is None:
            return None
        _, knob, value, i = best
        changes.append({"key": knob.key, "value": value})
    return changes if evaluate(i)[side]["fits"] else None


def plan(cfg: DictConfig) -> dict[str, Any]:
    """The capacity plan of a resolved verl-backend config (``capacity.json``)."""
    i = inputs_of(cfg)
    out = evaluate(i)
    for side in ("trainer", "rollout"):
        if not out[side]["fits"]:
            out[side]["fixes"] = fixes(i, side, out[side]["limiting_terms"])
            out[side]["combined_fix"] = combined_fix(i, side)
    return {"estimate": ESTIMATE, "run": str(cfg.run_name), "method": str(cfg.method.name),
            "gpu": {"name": i.gpu_name, "memory_bytes": i.gpu_bytes, "memory_bandwidth_bytes_per_s": i.bandwidth,
                    "bf16_dense_flops": i.flops},
            "model": {"path": str(cfg.model.path), "shape": i.shape.as_dict(), "shape_source": i.shape_source,
                      "parameters": i.shape.parameters},
            "placement": {"trainer_gpus": i.trainer_gpus, "rollout_gpus": i.rollout_gpus,
                          "tensor_parallel": i.tensor_parallel, "shared_gpu": i.shared_gpu},
            "enforce": bool(cfg.backend.capacity.enforce), **out}


# -- what a user reads ---------------------------------------------------------------------------
def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def _knob_text(change: dict[str, Any]) -> str:
    note = KNOB_NOTES.get(change["key"])
    return f"{change['key']}={change['value']}" + (f" ({note})" if note else "")


def refusal(p: dict[str, Any]) -> str | None:
    """The launch's refusal of a plan that does not fit (None when it fits): each side's limiting term and the
    knobs that would make it fit, or the ones tried."""
    reasons = []
    for side in ("trainer", "rollout"):
        s = p[side]
        if s["fits"]:
            continue
        terms = ", ".join(s["limiting_terms"])
        good = [_knob_text(f) for f in s.get("fixes", []) if f["fits"]]
        tried = [_knob_text(f) for f in s.get("fixes", [])]
        combined = [_knob_text(c) for c in s.get("combined_fix") or []]
        if good:
            fix = f"fits with {' or '.join(good)}"
        elif combined:
            fix = f"no single knob fixes it (tried {', '.join(tried)}); fits with all of {', '.join(combined)}"
        else:
            fix = (f"no knob fixes it (tried {', '.join(tried) or 'none'}): a larger gpu=, more GPUs or a smaller "
                   "model")
        reasons.append(f"{side} GPU needs {_gb(s['per_gpu_bytes']['total'])} of {_gb(s['gpu_bytes'])} ({p['gpu']['name']}); "
                       f"limiting: {terms}; {'; '.join(s.get('problems', []))}{'; ' if s.get('problems') else ''}{fix}")
    if not reasons:
        return None
    return (f"the capacity plan of {p['run']} does not fit: " + " | ".join(reasons)
            + " (the plan is an estimate: see capacity.md; backend.capacity.enforce=false launches anyway)")


def markdown(p: dict[str, Any]) -> str:
    """``capacity.md``: the plan as a reader sees it."""
    t, r, tm = p["trainer"], p["rollout"], p["time"]
    shape = p["model"]["shape"]
    lines = [f"# Capacity plan: {p['run']} on {p['gpu']['name']}", "",
             f"*{p['estimate'][0].upper()}{p['estimate'][1:]}.*", "",
             f"Model `{p['model']['path']}`: {p['model']['parameters'] / 1e9:.3f} B parameters, {shape['num_hidden_layers']} "
             f"layers, hidden {shape['hidden_size']}, vocabulary {shape['vocab_size']:,} (shape from "
             f"{p['model']['shape_source']}). GPU {p['gpu']['name']}: {_gb(p['gpu']['memory_bytes'])}, "
             f"{p['gpu']['memory_bandwidth_bytes_per_s'] / 1e12:.2f} TB/s, {p['gpu']['bf16_dense_flops'] / 1e12:.0f} "
             f"dense bf16 TFLOPS. Placement: {p['placement']['trainer_gpus']} trainer + {p['placement']['rollout_gpus']} "
             f"rollout GPUs at tensor parallel {p['placement']['tensor_parallel']}"
             + (" (one GPU shared by both)" if p["placement"]["shared_gpu"] else "") + ".", "",
             f"**{'Fits' if p['fits'] else 'Does not fit'}.** Trainer GPU: {_gb(t['per_gpu_bytes']['total'])} of "
             f"{_gb(t['gpu_bytes'])} ({'fits' if t['fits'] else 'does NOT fit'}, margin {_gb(t['margin_bytes'])}). "
             f"Rollout GPU: {_gb(r['per_gpu_bytes']['total'])} of {_gb(r['gpu_bytes'])} "
             f"({'fits' if r['fits'] else 'does NOT fit'}, margin {_gb(r['margin_bytes'])}).", ""]
    lines += ["## Trainer GPU (FSDP2, one packed micro-batch)", "", "| term | bytes | GB |", "|---|---:|---:|"]
    labels = {"model_states": f"model states (fp32 weights, gradients, AdamW; sharded over {t['dp_size']})",
              "gathered": "gathered units (the root's bf16 weight and gradient and two layers; at the end, 9 V h)",
              "activations": f"activations at {t['tokens_per_micro_batch']:,} tokens (the stack's own peak)",
              "logits": "logits block, log-softmax / entropy temporaries, their gradient",
              "sc_head": "score-centering head and its gather workspace",
              "peak": "peak (the largest moment, not the sum of the terms' peaks)",
              "reserve": "reserve (CUDA context, NCCL, allocator slack)", "total": "**total**"}
    lines += [f"| {labels[k]} | {v:,} | {v / 1e9:.2f} |" for k, v in t["per_gpu_bytes"].items()]
    lines += ["", f"Activations with gradient checkpointing {_gb(t['activations_with_checkpointing'])}, without "
                  f"{_gb(t['activations_without_checkpointing'])}.", ""]
    lines += ["## Rollout GPU (vLLM)", "", "| term | bytes | GB |", "|---|---:|---:|"]
    labels = {"weights": f"weights per tensor-parallel rank (TP {r['tensor_parallel']})",
              "activation_peak": "vLLM's profiling activation peak and the sampler's fp32 rows",
              "outside_torch": "NCCL / all-reduce buffers", "cuda_graphs": "CUDA graphs",
              "kv_cache": "KV cache (the rest of gpu_memory_utilization)",
              "cuda_context": "CUDA context (outside vLLM's budget)", "total": "**total**"}
    lines += [f"| {labels[k]} | {v:,} | {v / 1e9:.2f} |" for k, v in r["per_gpu_bytes"].items()]
    lines += ["", f"KV cache: {r['kv_bytes_per_token']:,} bytes per token per rank; a replica holds "
                  f"{r['kv_capacity_tokens']:,} tokens, {r['concurrent_sequences']:.1f} sequences of "
                  f"{r['sequence_tokens']:,} tokens (prompt + response) at once; {r['replicas']} replica(s).", ""]
    for side in ("trainer", "rollout"):
        s = p[side]
        if s["fits"]:
            continue
        lines += [f"**The {side} GPU does not fit**: limiting {', '.join(s['limiting_terms'])}."]
        lines += [f"- {problem}" for problem in s.get("problems", [])]
        lines += [f"- {_knob_text(f)}: {'fits' if f['fits'] else 'still does not fit'} (margin "
                  f"{_gb(f['margin_bytes'])})" for f in s.get("fixes", [])]
        if s.get("combined_fix"):
            lines.append("- all together: " + ", ".join(_knob_text(c) for c in s["combined_fix"]) + ": fits")
        lines.append("")
    g = tm["generation"]
    lines += ["## Time (an estimate)", "",
              "| part | seconds |", "|---|---:|",
              f"| generation of a step (prefill {g['prefill_seconds']:.1f} s, decode {g['decode_seconds']:.1f} s; "
              f"{g['concurrent_sequences_per_replica']} sequences per replica at once, {g['waves']} wave(s)) | "
              f"{g['seconds']:.1f} |",
              f"| training of a step (host offload {tm['offload_seconds']:.1f} s of it) | {tm['train_seconds']:.1f} |",
              f"| weight sync | {tm['weight_sync_seconds']:.1f} |",
              f"| SC head transport | {tm['sc_head_seconds']:.1f} |",
              f"| **step** ({'rollout and training one after the other: one shared GPU' if p['placement']['shared_gpu'] else 'the slower of rollout and training: they overlap'}; bound by {tm['bound_by']}) | **{tm['step_seconds']:.1f}** |",
              f"| one evaluation ({tm['evaluations']} in the run) | {tm['evaluation_seconds']:.1f} |", "",
              f"Experiment: **{tm['total_hours']:.1f} hours** per arm, **{tm['gpu_hours_per_arm']:.0f} GPU-hours** per arm "
              f"({tm['gpus']} GPUs); four arms {4 * tm['gpu_hours_per_arm']:.0f} GPU-hours.", "",
              "Assumptions: " + ", ".join(f"{k} {v:g}" for k, v in tm["assumptions"].items())
              + f"; mean prompt {tm['mean_prompt_tokens']:.0f} and response {tm['mean_response_tokens']:.0f} tokens.", ""]
    return "\n".join(lines)


def write(p: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    """Write ``capacity.json`` and ``capacity.md`` into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / JSON).write_text(json.dumps(p, indent=1, allow_nan=False) + "\n")
    (out_dir / MARKDOWN).write_text(markdown(p))
    return out_dir / JSON, out_dir / MARKDOWN

