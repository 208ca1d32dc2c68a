"""The time of a step and of an experiment, from first principles (an estimate; docs/capacity.md).

Every figure rests on the :class:`TimeAssumptions`, which the plan reports beside it:

* **generation** on one vLLM replica (``TP`` GPUs) holding ``B`` sequences at once (its share of the batch,
  at most ``max_num_seqs`` and what its KV cache holds at the mean length): a prefill of the prompts at
  ``2 N`` FLOPs per token and the prefill efficiency; then ``R`` decode iterations (the mean response), each
  bound by memory bandwidth (a rank reads its weights and the batch's KV cache at the mean context, ``P + R /
  2``) or by FLOPs (``2 N B / TP``), whichever is slower; ``ceil(share / B)`` waves. The long tail of the
  slowest responses is not modelled (optimistic where lengths vary);
* **training**: ``6 N_mm`` FLOPs per token (``8 N_mm`` with gradient checkpointing's recomputation;
  ``N_mm`` the matrix parameters, the LM head counted, the embedding lookup not) plus causal attention's
  ``2 q L s^2`` per sequence of ``s`` tokens, forward (x3 with the backward, x4 with checkpointing), over the
  trainer GPUs at the training efficiency (MFU); with FSDP2's CPU offload, per micro-batch the fp32 shards
  come in twice (forward, backward) and the gradients go out (``12 N / D`` bytes over the host link), and
  AdamW runs on the host;
* **weight sync**: the bf16 weights over the trainer-to-vLLM link, once per step; **the SC head**: its bytes
  per response token through verl's transfer path;
* **a step**: separate_async overlaps generation with training, so a step takes the slower side; on one GPU
  shared by both they run one after the other;
* **evaluation**: the evaluation sets x ``eval.n`` samples generated the same way, before training and every
  ``test_freq`` steps, while training waits.
"""

from __future__ import annotations

import dataclasses
import math

from runners.capacity.shapes import ModelShape


@dataclasses.dataclass(frozen=True)
class TimeAssumptions:
    """The assumptions of the time estimate (``backend.capacity.time``)."""

    mean_prompt_fraction: float  # mean prompt length / rollout.max_prompt_length
    mean_response_fraction: float  # mean response length / rollout.max_response_length
    train_mfu: float  # training FLOPs / (trainer GPUs x dense bf16 rate)
    prefill_mfu: float  # prefill (and compute-bound decode) FLOPs / the rollout GPUs' dense bf16 rate
    decode_bandwidth_efficiency: float  # bytes a decode iteration reads / (memory bandwidth x time)
    weight_sync_bytes_per_s: float  # trainer -> vLLM weight sync
    head_transport_bytes_per_s: float  # the SC head from vLLM to the trainer
    host_link_bytes_per_s: float  # host <-> GPU copies of an offloaded trainer (PCIe)
    host_optimizer_params_per_s: float  # AdamW on the host, parameters per second and process


@dataclasses.dataclass(frozen=True)
class Workload:
    """What one step and one experiment generate and train (from the launch config)."""

    prompts_per_step: int
    n: int
    max_prompt_length: int
    max_response_length: int
    total_steps: int
    test_freq: int
    eval_prompts: int  # the evaluation sets' problems together
    eval_n: int
    gradient_checkpointing: bool
    tokens_per_micro_batch: int
    offload_policy: bool = False  # FSDP2's CPU offload: shards copied in and out per micro-batch, AdamW on the host
    head_bytes_per_token: int = 0  # the SC head in transit (0: no head)


@dataclasses.dataclass(frozen=True)
class Hardware:
    """The GPUs of a launch and how the rollout uses them."""

    bandwidth_bytes_per_s: float
    bf16_flops: float
    trainer_gpus: int
    rollout_gpus: int
    tensor_parallel: int
    shared_gpu: bool  # trainer and vLLM on the same GPUs: no overlap, the GPUs counted once
    weights_bytes_per_rank: int
    kv_bytes_per_token: int
    kv_capacity_tokens: int
    max_num_seqs: int


def generation(shape: ModelShape, sequences: int, prompt: float, response: float, hw: Hardware,
               ta: TimeAssumptions) -> dict[str, float]:
    """Seconds to generate ``sequences`` responses of mean length ``response`` to prompts of ``prompt`` tokens."""
    replicas = max(hw.rollout_gpus // hw.tensor_parallel, 1)
    share = math.ceil(sequences / replicas)
    fits = int(hw.kv_capacity_tokens // max(prompt + response, 1))
    batch = max(1, min(share, hw.max_num_seqs, fits))
    waves = math.ceil(share / batch)
    context = prompt + response / 2
    rank_flops = hw.bf16_flops * ta.prefill_mfu
    read = hw.weights_bytes_per_rank + batch * context * hw.kv_bytes_per_token
    per_iteration = max(read / (hw.bandwidth_bytes_per_s * ta.decode_bandwidth_efficiency),
                        2 * shape.parameters * batch / hw.tensor_parallel / rank_flops)
    prefill = 2 * shape.parameters * prompt * share / hw.tensor_parallel / rank_flops
    decode = waves * response * per_iteration
    return {"seconds": prefill + decode, "prefill_seconds": prefill, "decode_seconds": decode,
            "concurrent_sequences_per_replica": batch, "waves": waves, "decode_iteration_seconds": per_iteration}


def training_flops(shape: ModelShape, sequences: int, tokens_per_sequence: float, checkpointing: bool) -> float:
    matrices = shape.num_hidden_layers * shape.layer_parameters + shape.embedding_parameters
    passes = 4 if checkpointing else 3  # forward, backward (2x), recomputed forward
    dense = 2 * passes * matrices * tokens_per_sequence * sequences
    attention = passes * 2 * shape.q_dim * shape.num_hidden_layers * tokens_per_sequence ** 2 * sequences
    return dense + attention


def step_and_experiment(shape: ModelShape, work: Workload, hw: Hardware, ta: TimeAssumptions) -> dict:
    """The estimate: a step's parts, ``step_seconds``, the evaluations, ``total_hours``, ``gpu_hours_per_arm``."""
    prompt = ta.mean_prompt_fraction * work.max_prompt_length
    response = ta.mean_response_fraction * work.max_response_length
    sequences = work.prompts_per_step * work.n
    gen = generation(shape, sequences, prompt, response, hw, ta)
    train = training_flops(shape, sequences, prompt + response, work.gradient_checkpointing) / (
        hw.trainer_gpus * hw.bf16_flops * ta.train_mfu)
    offload = 0.0
    if work.offload_policy:  # per micro-batch: fp32 shards in for the forward and the backward, gradients out
        shard = shape.parameters / hw.trainer_gpus
        micro_batches = math.ceil(sequences * (prompt + response) / hw.trainer_gpus / work.tokens_per_micro_batch)
        offload = micro_batches * 12 * shard / ta.host_link_bytes_per_s + shard / ta.host_optimizer_params_per_s
    train += offload
    sync = 2 * shape.parameters / ta.weight_sync_bytes_per_s
    head = sequences * response * work.head_bytes_per_token / ta.head_transport_bytes_per_s
    rollout_side, trainer_side = gen["seconds"] + head, train + sync
    step = rollout_side + trainer_side if hw.shared_gpu else max(rollout_side, trainer_side)
    evaluation = generation(shape, work.eval_prompts * work.eval_n, prompt, response, hw, ta)
    evaluations = work.total_steps // work.test_freq + 1 if work.test_freq > 0 else 1
    total = work.total_steps * step + evaluations * evaluation["seconds"]
    gpus = hw.trainer_gpus if hw.shared_gpu else hw.trainer_gpus + hw.rollout_gpus
    return {"step_seconds": step, "bound_by": "rollout" if rollout_side >= trainer_side else "trainer",
            "generation": gen, "train_seconds": train, "offload_seconds": offload, "weight_sync_seconds": sync, "sc_head_seconds": head,
            "mean_prompt_tokens": prompt, "mean_response_tokens": response,
            "evaluation_seconds": evaluation["seconds"], "evaluations": evaluations,
            "total_hours": total / 3600, "gpus": gpus, "gpu_hours_per_arm": total / 3600 * gpus}
