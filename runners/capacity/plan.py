"""The capacity plan of a resolved verl launch config: ``capacity.json``, ``capacity.md`` and the refusal.

:func:`plan` is the estimate of :mod:`~runners.capacity.estimate` (memory per trainer and rollout GPU, the
requests in flight, the time with its range, the disk) plus, for a side that does not fit, the fixes of
:mod:`~runners.capacity.fixes`, each checked by the launcher's checks and re-planned. :func:`refusal` is the
launch's verdict and :func:`check_fits` the launch check that applies it (``backend.capacity.enforce``);
:func:`markdown` is ``capacity.md``.

The names of the estimate (:class:`Inputs`, :func:`inputs_of`, :func:`evaluate`, :func:`model_shape`) are
importable from here as before.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from runners.capacity import fixes as fix_search
from runners.capacity import launch_checks
from runners.capacity.estimate import (  # noqa: F401  (the names of the estimate, importable from here as before)
    DTYPE_BYTES,
    Inputs,
    evaluate,
    gb,
    inputs_of,
    known_shape,
    limiting_term,
    model_shape,
    rollout_side,
    time_side,
    trainer_side,
)
from runners.config.config_error import ConfigError

log = logging.getLogger(__name__)

JSON, MARKDOWN = "capacity.json", "capacity.md"
ESTIMATE = ("an estimate from closed-form terms (runners/capacity, docs/capacity.md), not a measurement: "
            "memory against torch's own accounting and time against published runs are in docs/capacity.md")


def plan(cfg: DictConfig) -> dict[str, Any]:
    """The capacity plan of a resolved verl-backend config (``capacity.json``); ConfigError (a ValueError)
    where the config gives nothing to plan with (unknown model, a number that is not finite). Made inside the
    launcher's checks of a fix (:func:`runners.capacity.launch_checks.in_checks`) it searches no fixes."""
    i = inputs_of(cfg)
    out = evaluate(i)
    cache: dict = {}
    for side in ("trainer", "rollout"):
        if not out[side]["fits"] and not launch_checks.in_checks():  # inside the checks: the verdict is enough
            terms = out[side]["limiting_terms"]
            out[side]["fixes"] = fix_search.single_fixes(cfg, side, terms, cache)
            out[side]["combined_fix"] = fix_search.combined_fix(cfg, side, terms, cache=cache)
    return {"estimate": ESTIMATE, "run": str(cfg.run_name), "method": str(cfg.method.name),
            "gpu": {"name": i.gpu_name, "memory_bytes": i.gpu_bytes, "memory_bandwidth_bytes_per_s": i.bandwidth,
                    "bf16_dense_flops": i.flops},
            "model": {"path": str(cfg.model.path), "shape": i.shape.as_dict(), "shape_source": i.shape_source,
                      "parameters": i.shape.parameters},
            "placement": {"trainer_gpus": i.trainer_gpus, "rollout_gpus": i.rollout_gpus,
                          "tensor_parallel": i.tensor_parallel, "shared_gpu": i.shared_gpu},
            "enforce": bool(cfg.backend.capacity.enforce), **out}


# -- what a user reads ---------------------------------------------------------------------------
_gb = gb


def changes_text(changes: dict[str, Any] | list[dict[str, Any]]) -> str:
    """``key=value`` pairs, space-separated, as a command line takes them."""
    pairs = changes.items() if isinstance(changes, dict) else ((c["key"], c["value"]) for c in changes)
    return " ".join(f"{k}={_value_text(v)}" for k, v in pairs)


def _value_text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _fix_text(f: dict[str, Any]) -> str:
    label = "" if f["same_experiment"] else f" ({fix_search.DIFFERENT_EXPERIMENT})"
    return f"{changes_text(f['changes'])}{label}"


def refusal(p: dict[str, Any]) -> str | None:
    """The launch's refusal of a plan that does not fit (None when it fits): each side's limiting term and the
    fixes that would make it fit (those that keep the experiment first), or the ones tried."""
    reasons = []
    for side in ("trainer", "rollout"):
        s = p[side]
        if s["fits"]:
            continue
        allowed = [f for f in s.get("fixes", []) if f["refused"] is None]
        good = sorted((f for f in allowed if f["fits"]), key=lambda f: not f["same_experiment"])
        combined = s.get("combined_fix")
        if good:
            fix = f"fits with {' or '.join(_fix_text(f) for f in good)}"
        elif combined:
            label = "" if combined["same_experiment"] else f" ({fix_search.DIFFERENT_EXPERIMENT})"
            fix = (f"no single change fixes it (tried {', '.join(_fix_text(f) for f in allowed) or 'none'}); fits with "
                   f"all of {changes_text(combined['changes'])}{label}")
        else:
            fix = (f"no change fixes it (tried {', '.join(_fix_text(f) for f in allowed) or 'none'}): a larger gpu=, "
                   "more GPUs or a smaller model")
        reasons.append(f"{side} GPU needs {_gb(s['per_gpu_bytes']['total'])} of {_gb(s['gpu_bytes'])} ({p['gpu']['name']}); "
                       f"limiting: {', '.join(s['limiting_terms'])}; {'; '.join(s.get('problems', []))}"
                       f"{'; ' if s.get('problems') else ''}{fix}")
    if not reasons:
        return None
    return (f"the capacity plan of {p['run']} does not fit: " + " | ".join(reasons)
            + " (the plan is an estimate: see capacity.md; backend.capacity.enforce=false launches anyway)")


def check_fits(cfg: DictConfig) -> None:
    """The launch check (``runners.verl_side.backend.checks``): a GPU launch whose plan does not fit is a
    :class:`ConfigError` (:func:`refusal`), a warning with ``backend.capacity.enforce=false``. A dry run writes
    the plan instead of refusing (``capacity.md``), but its plan must be computable before the dry run writes or
    moves anything, unless the model's shape is unknown (no config.json before verl downloads it: the dry run
    writes "Capacity plan: none"). Only a launch on GPUs is checked (the verl platform's ``fits_gpus``: the CPU
    rehearsal has none to fit)."""
    enforce = bool(cfg.backend.capacity.enforce)
    if known_shape(cfg) is None:  # no config.json before verl downloads the model
        if cfg.backend.dry_run:
            return
        if not enforce:
            log.warning("no capacity plan: the shape of model %s is unknown before verl downloads it; launching anyway "
                        "(backend.capacity.enforce=false)", cfg.model.path)
            return
    try:
        p = plan(cfg)  # an unknown shape with enforce=true: ModelConfigError (a ConfigError) naming model.path
    except ConfigError:
        raise
    except (ArithmeticError, TypeError, KeyError, ValueError) as err:  # numbers the plan cannot use
        raise ConfigError(f"the capacity plan cannot be computed from this config ({type(err).__name__}: {err}); "
                          "check backend.capacity.*, gpu.* and the model's config.json") from err
    if cfg.backend.dry_run:
        return
    reason = refusal(p)
    if reason is not None and enforce:
        raise ConfigError(reason)
    if reason is not None:
        log.warning("%s; launching anyway (backend.capacity.enforce=false)", reason)


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
    inflight = r["in_flight"]
    if inflight["preempts"]:
        lines += [f"**vLLM would preempt**: a replica may hold {inflight['requests_per_replica']} requests in flight "
                  f"(max_num_seqs, and separate_async's steps ahead) but its KV cache holds "
                  f"{inflight['full_length_sequences_held']} sequences at full length: as responses grow it evicts and "
                  f"recomputes them. Fix: `{changes_text([inflight['fix']])}` (or more tensor parallelism, or more of "
                  "the GPU for vLLM).", ""]
    for side in ("trainer", "rollout"):
        s = p[side]
        if s["fits"]:
            continue
        lines += [f"**The {side} GPU does not fit**: limiting {', '.join(s['limiting_terms'])}.", ""]
        lines += [f"- {problem}" for problem in s.get("problems", [])] + ([""] if s.get("problems") else [])
        lines += ["| what a researcher would try | change | its GPU needs | fits | what it changes in the experiment |",
                  "|---|---|---:|---|---|"]
        for f in s.get("fixes", []):
            if f["refused"] is not None:
                lines.append(f"| {f['name']} | `{changes_text(f['changes'])}` | - | refused by the launch checks | "
                             f"{f['effect']}; here: {f['refused']} |")
            else:
                lines.append(f"| {f['name']} | `{changes_text(f['changes'])}` | {_gb(f['total_bytes'])} | "
                             f"{'yes' if f['fits'] else 'no'} | {f['effect']} |")
        combined = s.get("combined_fix")
        if combined:
            label = "" if combined["same_experiment"] else f" ({fix_search.DIFFERENT_EXPERIMENT})"
            lines += ["", f"All together ({', '.join(combined['fixes'])}): `{changes_text(combined['changes'])}` fits, "
                          f"{_gb(combined['total_bytes'])}{label}."]
        lines.append("")
    g, bill, parts = tm["generation"], tm["bill"], tm["generation"]["decode_iteration_parts"]
    link = tm["intra_node_link"]
    how = (f"continuous: {g['requests_per_replica']} requests in flight per replica (separate_async's steps ahead), "
           f"{g['concurrent_sequences_per_replica']} decoding at once (the KV cache at the mean length)"
           if g["pipelined"] else f"{g['concurrent_sequences_per_replica']} sequences per replica at once, {g['waves']} "
           "wave(s), until the longest response")
    lines += ["## Time (an estimate)", "",
              "| part | seconds |", "|---|---:|",
              f"| generation of a step (prefill {g['prefill_seconds']:.1f} s, decode {g['decode_seconds']:.1f} s; {how}) | "
              f"{g['seconds']:.1f} |",
              f"| of it per decode iteration: weights and KV reads (or FLOPs) {parts['memory_or_flops'] * 1e3:.2f} ms, "
              f"TP all-reduces over {link['name']} {parts['tp_all_reduce'] * 1e3:.2f} ms, the sampler's log-prob path "
              f"{parts['sampler'] * 1e3:.2f} ms, the engine's overhead {parts['engine_overhead'] * 1e3:.2f} ms "
              f"({g['decode_iterations']:.0f} iterations) | {g['decode_iteration_seconds'] * 1e3:.2f} ms |",
              f"| training of a step (host offload {tm['offload_seconds']:.1f} s, Ulysses all-to-alls "
              f"{tm['sequence_parallel_seconds']:.1f} s of it; SP {tm['sequence_parallel']}) | {tm['train_seconds']:.1f} |",
              f"| weight sync | {tm['weight_sync_seconds']:.1f} |",
              f"| SC head transport | {tm['sc_head_seconds']:.1f} |",
              f"| **step** ({'rollout and training one after the other: one shared GPU' if p['placement']['shared_gpu'] else 'the slower of rollout and training: they overlap'}; bound by {tm['bound_by']}) | **{tm['step_seconds']:.1f}** |",
              f"| one evaluation (mean response {tm['eval_mean_response_tokens']:.0f} tokens, longest "
              f"{tm['eval_longest_response_tokens']:.0f}; {tm['evaluations']} in the run) | {tm['evaluation_seconds']:.1f} |",
              f"| the bill: start-up x {1 + bill['restarts']:g} attempts {bill['startup_seconds']:.0f} s, work lost in "
              f"{bill['restarts']:g} restart(s) {bill['lost_work_seconds']:.0f} s, {bill['saves']} checkpoint writes "
              f"{bill['checkpoint_write_seconds']:.0f} s | {bill['seconds']:.0f} |", "",
              f"Experiment: **{tm['total_hours']:.1f} hours** per arm, **{tm['gpu_hours_per_arm']:.0f} GPU-hours** per arm "
              f"({tm['gpus']} GPUs); four arms {4 * tm['gpu_hours_per_arm']:.0f} GPU-hours"
              + (f"; lengths over training: the first steps at {lot['early_mean_response_fraction']:g} of the cap with "
                 f"{lot['early_response_at_cap_fraction']:g} at it (step {tm['early_step_seconds']:.0f} s), the "
                 f"config's shape from step {lot['settle_steps']}" if (lot := tm["lengths_over_training"]) else "")
              + ". **Range: "
              f"{tm['range']['low_gpu_hours_per_arm']:.0f} to {tm['range']['high_gpu_hours_per_arm']:.0f} "
              f"GPU-hours per arm** (step {tm['range']['low_step_seconds']:.0f} to {tm['range']['high_step_seconds']:.0f} "
              "s): from every response a quarter of the cap, the fast end's engine overhead and no restart, to every "
              "response at the cap, the slow end's decode (the 8 x RTX 4090 run's) and the most restarts, each losing "
              "every step since the last save (docs/capacity.md: the published runs against this range).", "",
              "Assumptions: " + ", ".join(f"{k} {v:g}" for k, v in tm["assumptions"].items() if v is not None)
              + "; engine costs: " + ", ".join(f"{k} {v:g}" for k, v in tm["engine_costs"].items())
              + f"; intra-node link {link['name']} {link['bytes_per_s'] / 1e9:g} GB/s, {link['latency_s'] * 1e6:g} us"
              + f"; mean prompt {tm['mean_prompt_tokens']:.0f} and response {tm['mean_response_tokens']:.0f} tokens, the "
              f"step's longest response {tm['longest_response_tokens']:.0f}. train_mfu is {tm['mfu_convention']}: a "
              "run's logged value can be copied here, or the whole time replanned from a run's first steps: "
              "`python -m runners.capacity --from-run RUN_DIR`.", ""]
    d = p["disk"]
    lines += ["## Disk (an estimate)", "", "| what | GB |", "|---|---:|",
              f"| one checkpoint ({d['saves']} saved, {d['kept']} kept) | {d['checkpoint_bytes'] / 1e9:.1f} |",
              f"| the kept checkpoints | {d['checkpoints_bytes'] / 1e9:.1f} |",
              f"| rollout and validation dumps | {d['dumps_bytes'] / 1e9:.1f} |",
              f"| the exported bf16 model | {d['export_bytes'] / 1e9:.1f} |",
              f"| **per arm** | **{d['per_arm_bytes'] / 1e9:.1f}** |",
              f"| the four arms of a seed | {d['per_sweep_bytes'] / 1e9:.1f} |", ""]
    if d["warning"]:
        lines += [f"**Disk**: {d['warning']}.", ""]
    return "\n".join(lines)


def write(p: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    """Write ``capacity.json`` and ``capacity.md`` into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / JSON).write_text(json.dumps(p, indent=1, allow_nan=False) + "\n")
    (out_dir / MARKDOWN).write_text(markdown(p))
    return out_dir / JSON, out_dir / MARKDOWN

