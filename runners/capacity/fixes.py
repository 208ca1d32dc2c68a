"""What a researcher would try on a launch that does not fit, each change re-planned and checked.

A :class:`Fix` proposes config changes (``key: value``) from the plan's inputs. :func:`single_fixes` applies
each fix of a side alone to the config, runs the launcher's checks on the changed config
(:func:`runners.capacity.launch_checks.refused`: a fix that a launch would refuse is listed as refused, with
the reason, never proposed) and re-plans it: its memory per GPU, whether the side fits, what it changes in
the experiment. :func:`combined_fix` applies the allowed fixes one after another, each round the one that
gains the most margin, those that keep the experiment first; a change of the experiment (shorter responses)
comes last and is labelled. Fixes change only keys that exist in the config: more trainer GPUs come as more
trainer nodes of the same size (``backend.placement.nnodes``), never as a node larger than the preset's.

The trainer's fixes, in the order they are shown:

* **the entropy metric off** (``backend.actor.calculate_entropy=false``): the update no longer computes the
  entropy that bypass mode logs as ``actor/entropy`` (its coefficient is 0: the loss is unchanged), so its
  fp32 chunks and their backward go, and flash-attn's cross-entropy runs in place. Allowed for the arms
  without score centering (PG, TIS); an SC arm's head backward reads the logits that in-place backward
  overwrites, which the launch check (``runners/verl_side/backend/sc_requirements.py``, ``SC_REQUIRES``:
  ``calculate_entropy`` true) and the engine's guard (``runners/verl_side/head/engine.py``,
  ``check_no_inplace_cross_entropy``) refuse;
* **model states on the host** (``backend.actor.offload_policy=true``): same experiment, slower;
* **a smaller micro-batch** (``backend.actor.max_token_len_per_gpu``, halved, at least one whole
  sequence): same experiment, more micro-batches per update;
* **gradient checkpointing** where it is off: same experiment, slower;
* **more trainer nodes** (``backend.placement.nnodes`` doubled): same experiment, more GPUs, launched by
  ``hydra/launcher=slurm_multinode`` or onto a cluster at ``backend.ray_address`` (:data:`MORE_NODES_EFFECT`);
* **shorter responses** (``rollout.max_response_length`` halved, the micro-batch one such sequence; only
  once the micro-batch is one whole sequence): a different experiment, not comparable with the reference.

The rollout's: tensor parallelism doubled (same samples, fewer replicas), ``gpu_memory_utilization`` up to
0.9 (or down by 0.05 where the CUDA context does not fit beside it), ``max_num_seqs`` halved, shorter
responses last.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig

from runners.capacity import launch_checks
from runners.capacity.estimate import SEQUENCE_PARALLEL, Inputs, evaluate, inputs_of
from runners.config.config_error import ConfigError

DIFFERENT_EXPERIMENT = "a different experiment, not comparable with the reference"
#: The launches that run more trainer nodes (docs/multinode.md).
MORE_NODES_EFFECT = ("same experiment on twice the trainer GPUs (nodes of the same size); launch it with "
                     "hydra/launcher=slurm_multinode (one SLURM job of backend.placement.nnodes nodes per arm, a Ray "
                     "cluster over them) or onto a running Ray cluster with backend.ray_address=HOST:PORT "
                     "(docs/multinode.md)")


@dataclasses.dataclass(frozen=True)
class Fix:
    """One change a researcher would try: its config changes (None where it does not apply) and its effect."""

    name: str
    side: str  # "trainer" or "rollout"
    effect: str  # what it changes in the experiment
    propose: Callable[[Inputs], dict[str, Any] | None]
    terms: tuple[str, ...] = ()  # the rollout terms it helps (a rollout fix is tried only for those)
    same_experiment: bool = True


def _floor(i: Inputs) -> int:
    """The smallest micro-batch budget per GPU that holds one sequence: verl packs ``budget x SP`` tokens."""
    return -(-(i.workload.max_prompt_length + i.workload.max_response_length) // i.sequence_parallel)


def _override_key(item: str) -> str | None:
    from runners.config.hydra_override import parse

    try:
        return parse(str(item))[0]
    except Exception:  # noqa: BLE001 - Hydra's parser raises its own grammar errors (the launch checks name them)
        return None


def _sequence_parallel(i: Inputs) -> dict[str, Any] | None:
    """Ulysses SP doubled with the budget per GPU at one sequence over the SP ranks: each rank's logits and
    activations cover half the tokens. Only where the trainer GPUs split into SP groups (the launch checks refuse
    attention heads that do not split)."""
    size = 2 * i.sequence_parallel
    if i.shared_gpu or i.trainer_gpus % size:
        return None
    length = i.workload.max_prompt_length + i.workload.max_response_length
    kept = [e for e in i.extra_overrides if _override_key(e) != SEQUENCE_PARALLEL]
    return {"backend.extra_overrides": [*kept, f"{SEQUENCE_PARALLEL}={size}"],
            "backend.actor.max_token_len_per_gpu": min(i.tokens, -(-length // size))}


def _smaller_tokens(i: Inputs) -> dict[str, Any] | None:
    floor = _floor(i)
    return {"backend.actor.max_token_len_per_gpu": max(i.tokens // 2, floor)} if i.tokens > floor else None


def _shorter_responses(i: Inputs) -> dict[str, Any] | None:
    """Half the response cap, with a micro-batch of one such sequence where it was one sequence already."""
    r = i.workload.max_response_length
    if r < 1024 or i.tokens > _floor(i):  # a micro-batch of several sequences: a smaller one comes first
        return None
    return {"rollout.max_response_length": r // 2,
            "backend.actor.max_token_len_per_gpu": -(-(i.workload.max_prompt_length + r // 2) // i.sequence_parallel)}


def _more_nodes(i: Inputs) -> dict[str, Any] | None:
    return None if i.shared_gpu else {"backend.placement.nnodes": 2 * i.trainer_nodes}


FIXES: tuple[Fix, ...] = (
    Fix("the entropy metric off", "trainer",
        "actor/entropy is no longer logged (null in metrics.json); the loss is the same (entropy coefficient 0); "
        "only arms without score centering (PG, TIS) may: an SC arm's head needs the logits that flash-attn's "
        "in-place cross-entropy would overwrite",
        lambda i: {"backend.actor.calculate_entropy": False} if i.calculate_entropy else None),
    Fix("model states on the host", "trainer",
        "same experiment, slower: FSDP2 copies the fp32 shards over PCIe per micro-batch and runs AdamW on the host",
        lambda i: {"backend.actor.offload_policy": True} if not i.offload_policy else None),
    Fix("a smaller micro-batch", "trainer", "same experiment: more micro-batches per update, gradients accumulated",
        _smaller_tokens),
    Fix("Ulysses sequence parallelism", "trainer",
        "same experiment: each sequence's tokens split over SP GPUs (their logits and activations too), the "
        "attention's heads exchanged by all-to-all (in the time)", _sequence_parallel),
    Fix("gradient checkpointing", "trainer", "same experiment, slower: each layer recomputed in the backward",
        lambda i: {"backend.actor.gradient_checkpointing": True} if not i.gradient_checkpointing else None),
    Fix("more trainer nodes", "trainer", MORE_NODES_EFFECT, _more_nodes),
    Fix("shorter responses", "trainer", DIFFERENT_EXPERIMENT, _shorter_responses, same_experiment=False),
    Fix("more tensor parallelism", "rollout", "same samples: fewer vLLM replicas, each on more GPUs",
        lambda i: ({"backend.placement.rollout_tensor_parallel": 2 * i.tensor_parallel}
                   if 2 * i.tensor_parallel <= i.rollout_gpus else None),
        terms=("weights", "kv_cache")),
    Fix("more of the GPU for vLLM", "rollout", "same experiment",
        lambda i: {"backend.rollout_engine.gpu_memory_utilization": 0.9} if i.gpu_memory_utilization < 0.9 else None,
        terms=("weights", "kv_cache")),
    Fix("fewer sequences at once", "rollout", "same samples, decoded in more waves",
        lambda i: {"backend.rollout_engine.max_num_seqs": i.max_num_seqs // 2} if i.max_num_seqs > 16 else None,
        terms=("kv_cache",)),
    Fix("less of the GPU for vLLM", "rollout", "same experiment: room for the CUDA context beside vLLM",
        lambda i: ({"backend.rollout_engine.gpu_memory_utilization": round(i.gpu_memory_utilization - 0.05, 2)}
                   if i.gpu_memory_utilization > 0.1 else None),
        terms=("cuda_context",)),
    Fix("shorter responses", "rollout", DIFFERENT_EXPERIMENT,
        lambda i: {"rollout.max_response_length": i.workload.max_response_length // 2}
        if i.workload.max_response_length >= 1024 else None, terms=("kv_cache", "weights"), same_experiment=False),
)


def fixes_of(side: str, terms: list[str]) -> list[Fix]:
    """The fixes of ``side``; a rollout fix only where it helps one of the limiting ``terms``."""
    return [f for f in FIXES if f.side == side and (side == "trainer" or set(f.terms) & set(terms))]


def tried(cfg: DictConfig, changes: dict[str, Any], side: str, cache: dict | None = None) -> dict[str, Any]:
    """``changes`` applied to ``cfg``: ``refused`` (the launcher's reason, or None), else the side's re-plan
    (kept in ``cache`` by the changes, for one search over one ``cfg``)."""
    key = (side, tuple(sorted((k, repr(v)) for k, v in changes.items())))
    if cache is not None and key in cache:
        return cache[key]
    result = _tried(cfg, changes, side)
    if cache is not None:
        cache[key] = result
    return result


def _tried(cfg: DictConfig, changes: dict[str, Any], side: str) -> dict[str, Any]:
    changed = launch_checks.with_changes(cfg, changes)
    reason = launch_checks.refused(changed)
    if reason is None:
        try:
            plan = evaluate(inputs_of(changed))[side]
        except ConfigError as err:
            reason = str(err)
    if reason is not None:
        return {"refused": reason}
    return {"refused": None, "fits": plan["fits"], "margin_bytes": plan["margin_bytes"],
            "total_bytes": plan["per_gpu_bytes"]["total"], "inputs": inputs_of(changed), "cfg": changed}


def single_fixes(cfg: DictConfig, side: str, terms: list[str], cache: dict | None = None) -> list[dict[str, Any]]:
    """Each fix of ``side`` alone: name, changes, effect, whether a launch allows it (``refused``), the side's
    total per GPU, ``fits`` and the margin."""
    i = inputs_of(cfg)
    out = []
    for fix in fixes_of(side, terms):
        changes = fix.propose(i)
        if changes is None:
            continue
        result = tried(cfg, changes, side, cache)
        entry = {"name": fix.name, "changes": changes, "effect": fix.effect, "same_experiment": fix.same_experiment,
                 "refused": result["refused"]}
        if result["refused"] is None:
            entry.update(fits=result["fits"], margin_bytes=result["margin_bytes"], total_bytes=result["total_bytes"])
        out.append(entry)
    return out


def combined_fix(cfg: DictConfig, side: str, terms: list[str], rounds: int = 6,
                 cache: dict | None = None) -> dict[str, Any] | None:
    """Allowed fixes applied one after another, each round the one that gains ``side`` the most margin, those
    that keep the experiment before any that changes it, until the side fits: the changes (each key's last
    value, in order), ``same_experiment``, the total and the margin; None where nothing makes it fit."""
    changes: dict[str, Any] = {}
    names: list[str] = []
    current = {"inputs": inputs_of(cfg), "cfg": cfg, "margin_bytes": evaluate(inputs_of(cfg))[side]["margin_bytes"],
               "fits": False}
    same = True
    for _ in range(rounds):
        best = None
        for keep_experiment in (True, False):
            for fix in fixes_of(side, terms):
                if fix.same_experiment != keep_experiment or (proposed := fix.propose(current["inputs"])) is None:
                    continue
                result = tried(cfg, {**changes, **proposed}, side, cache)
                if result["refused"] is None and result["margin_bytes"] > current["margin_bytes"] and (
                        best is None or result["margin_bytes"] > best[2]["margin_bytes"]):
                    best = (fix, proposed, result)
            if best is not None:
                break
        if best is None:
            return None
        fix, proposed, current = best
        changes.update(proposed)
        names.append(fix.name)
        same = same and fix.same_experiment
        if current["fits"]:
            return {"changes": [{"key": k, "value": v} for k, v in changes.items()], "fixes": names,
                    "same_experiment": same, "total_bytes": current["total_bytes"],
                    "margin_bytes": current["margin_bytes"]}
    return None
