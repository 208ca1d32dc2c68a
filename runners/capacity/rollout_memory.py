"""One vLLM rollout GPU: weights, KV cache and what is left for it (an estimate; docs/capacity.md).

vLLM takes ``gpu_memory_utilization x M`` of a GPU of ``M`` bytes for itself: the weights of its
tensor-parallel rank, the activation peak of its profiling forward, memory outside torch (NCCL, custom
all-reduce buffers), its CUDA graphs (an estimate subtracted from the budget since vLLM 0.21; the project
pins 0.31), and the KV cache gets the rest. The CUDA context comes on top, in the GPU's remaining ``(1 - u) M``.

* **weights** per rank: ``N x dtype bytes / TP`` (every matrix, the embedding and the LM head are split
  over the ranks; the norms, replicated, are negligible);
* **KV cache per token** per rank: ``2 (K and V) x L x ceil(kv_heads / TP) x head_dim x dtype bytes`` (a
  rank holds at least one KV head: KV heads are replicated when TP exceeds them); Qwen3-4B in bf16 at TP 1:
  147,456 bytes;
* **activation peak** of the profiling forward: ``max_num_batched_tokens`` tokens through one layer at a
  time (the hidden state three times, the q/k/v projection, the MLP's gate, up and product: ``6 h + 2 (q +
  2 kv) / TP + 6 I / TP`` bytes per token in bf16) plus the sampler's fp32 rows for ``max_num_seqs``
  sequences (logits, probabilities and log-probabilities: ``12 V`` bytes per sequence);
* **KV capacity** in tokens of one replica: ``(u M - weights - activation peak - outside torch - CUDA graphs)
  / KV per token``, and in concurrent sequences of ``max_prompt_length + max_response_length`` tokens.
"""

from __future__ import annotations

import dataclasses
import math

from runners.config.model_shapes import ModelShape


@dataclasses.dataclass(frozen=True)
class RolloutSetup:
    """What of a launch decides one rollout GPU's memory."""

    gpu_bytes: int
    gpu_memory_utilization: float
    tensor_parallel: int = 1
    dtype_bytes: int = 2
    kv_dtype_bytes: int = 2
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    sequence_tokens: int = 0  # max_prompt_length + max_response_length
    outside_torch_bytes: int = 0  # NCCL and all-reduce buffers inside vLLM's budget (an assumption)
    cuda_graph_bytes: int = 0  # vLLM's CUDA graphs, inside its budget (an assumption)
    context_bytes: int = 0  # the CUDA context, outside its budget (an assumption)


def kv_bytes_per_token(shape: ModelShape, tensor_parallel: int, kv_dtype_bytes: int = 2) -> int:
    """KV-cache bytes per token on one tensor-parallel rank."""
    kv_heads_per_rank = math.ceil(shape.num_key_value_heads / tensor_parallel)
    return 2 * shape.num_hidden_layers * kv_heads_per_rank * shape.head_dim * kv_dtype_bytes


def activation_peak_bytes(shape: ModelShape, setup: RolloutSetup) -> int:
    tp, h = setup.tensor_parallel, shape.hidden_size
    per_token = 6 * h + (2 * (shape.q_dim + 2 * shape.kv_dim) + 6 * shape.intermediate_size) // tp
    return setup.max_num_batched_tokens * per_token + setup.max_num_seqs * 12 * shape.vocab_size


def rollout_terms(shape: ModelShape, setup: RolloutSetup) -> dict[str, int | float]:
    """Bytes per rollout GPU by term, the KV capacity of a replica, and what the GPU has left outside vLLM."""
    weights = shape.parameters * setup.dtype_bytes // setup.tensor_parallel
    activations = activation_peak_bytes(shape, setup)
    budget = int(setup.gpu_memory_utilization * setup.gpu_bytes)
    kv_budget = budget - weights - activations - setup.outside_torch_bytes - setup.cuda_graph_bytes
    per_token = kv_bytes_per_token(shape, setup.tensor_parallel, setup.kv_dtype_bytes)
    capacity = max(kv_budget, 0) // per_token
    return {"weights": weights, "activation_peak": activations, "outside_torch": setup.outside_torch_bytes,
            "cuda_graphs": setup.cuda_graph_bytes, "kv_cache": max(kv_budget, 0), "vllm_budget": budget,
            "cuda_context": setup.context_bytes, "total": budget + setup.context_bytes, "kv_bytes_per_token": per_token,
            "kv_capacity_tokens": capacity,
            "concurrent_sequences": capacity / setup.sequence_tokens if setup.sequence_tokens else math.inf}
