"""One FSDP2 trainer GPU at its peak: closed-form bytes per term (an estimate; docs/capacity.md).

The update of verl 0.9.1's FSDP engine on one packed micro-batch of ``T`` tokens (``max_token_len_per_gpu``),
for a Qwen3 decoder (``h`` hidden, ``q``/``kv`` attention widths, ``I`` MLP width, ``L`` layers, ``V``
vocabulary, ``N`` parameters, ``P_l`` per layer), sharded over ``D`` GPUs, the forward under bf16 autocast.
Every term was checked against torch's own accounting of the same step on fake tensors
(``benchmarks/capacity/count.py``; the table in docs/capacity.md):

* **model states** ``16 N / D``: fp32 master weights, gradients and AdamW's two moments, sharded (0 with
  FSDP2's CPU offload policy); the gradients exist from the layers' backward to the step, and the step's
  foreach ``sqrt`` adds one fp32 copy of the shard (``20 N / D`` at the step).
* **gathered units**: verl passes ``reshard_after_forward=True``, so even the root unit (the tied embedding
  and the final norm) is resharded after the forward and gathered again once the logits path's backward has
  made the logits' gradient: then its bf16 weight and bf16 gradient (``4 V h``) beside that gradient; two bf16
  decoder layers (``4 P_l``: the one computing and the one prefetched); at the end of the backward the tied
  weight's second gradient, the gathered root and the fp32 copy for the reduce-scatter (``9 V h``).
* **activations** per token: one decoder layer keeps ``A = 16 h + 10 q + 10 kv + 8 I + 8 attention_heads + 4 kv_heads
  + 8`` bytes (two RMSNorms, each an fp32 copy of its input, the normalised bf16 input and its output: ``8 h``;
  q: q-norm's fp32 copy and normalised value, the rotated q attention saves, the attention output ``4 + 2 + 2
  + 2``; k the same without the output, v ``2``; the MLP's gate, up, SiLU and product ``2 I`` each; fp32
  rsqrt and log-sum-exp per attention head). With gradient checkpointing each layer keeps its bf16 input (``2 h``) and
  one layer is recomputed at a time, with its gate and up gradients in flight (``A + 4 I``); without it every
  layer keeps ``A``. The final norm keeps ``8 h`` until the logits' backward.
* **logits**, in units of ``T V``: the bf16 block (2; twice with a temperature other than 1); the log-probs:
  flash-attn's cross-entropy keeps one fp32 log-sum-exp per row and writes a new bf16 gradient (2) -- but
  where the update computes no entropy verl calls it with ``inplace_backward=True``
  (``verl/workers/engine/fsdp/transformer_impl.py``: ``inplace_backward = not calculate_entropy``) and the
  gradient overwrites the logits block: no new bytes (0; the SC arms' guard forbids exactly this), verl's
  torch fallback keeps each row's fp32 log-softmax (4, autocast) which its backward turns into the bf16
  gradient; the entropy where the update computes it: verl's chunked function in eager mode keeps each
  chunk's fp32 copy and softmax (8) and, being in the loss at coefficient 0, is backpropagated: its backward
  peaks at ``10 T V + 20 C V`` (``C`` the chunk rows; read off torch's accounting); with
  ``entropy_checkpointing`` verl recomputes the whole chunked function in the backward: nothing kept, but
  the recomputation peaks at ``12 T V + 20 C V``, above eager mode.
* **score-centering head** (``k`` ids per token): ids (int64) and the sampler's and trainer's head log-probs
  (fp32), ``16 k T``; the gather's fp32 block of ``chunk x V``; the logits' gradient it returns (``2 T V``),
  alive beside the log-probs' until autograd sums them.

The peak is the largest of seven moments, each the sum of what lives then (:func:`moments`): the forward's
end, the start of the backward, the entropy's backward, the LM head's backward, a layer's recomputation, the
end of the backward and the optimizer step. ``total`` adds a reserve. torch.compile of the entropy function (verl's
``use_torch_compile``) may keep less than eager mode (its min-cut partition keeps one fp32 copy, 4 T V, but
the fused kernels' peak cannot be counted on a CPU); the plan counts eager mode.
"""

from __future__ import annotations

import dataclasses

from runners.config.model_shapes import ModelShape

BF16 = 2
FP32 = 4


@dataclasses.dataclass(frozen=True)
class TrainerSetup:
    """What of a launch decides one trainer GPU's memory (defaults: verl 0.9.1's FSDP engine defaults)."""

    tokens: int  # packed tokens per micro-batch (backend.actor.max_token_len_per_gpu)
    dp_size: int = 1  # FSDP2 shards: the trainer GPUs
    gradient_checkpointing: bool = True
    offload_policy: bool = False  # FSDP2 CPUOffloadPolicy: states on the host
    calculate_entropy: bool = False
    entropy_chunk_rows: int = 2048
    entropy_checkpointing: bool = False
    flash_cross_entropy: bool = True  # flash-attn's cross-entropy for the log-probs; False: verl's torch fallback
    inplace_cross_entropy: bool | None = None  # its backward writes into the logits; None: verl's rule, without entropy
    temperature_copy: bool = False  # temperature != 1: the scaled logits are a second block
    sc_top_k: int = 0  # the sampler's head size of an SC arm; 0: no head
    sc_chunk_rows: int = 1024  # ablations.score_centering.head_log_probs' chunk


def layer_activation_bytes_per_token(shape: ModelShape) -> int:
    """``A``: the bytes one decoder layer keeps for its backward, per token (the module docstring)."""
    h, q, kv = shape.hidden_size, shape.q_dim, shape.kv_dim
    return (16 * h + 10 * q + 10 * kv + 8 * shape.intermediate_size + 2 * FP32 * shape.num_attention_heads
            + FP32 * shape.num_key_value_heads + 2 * FP32)


def activation_bytes(shape: ModelShape, s: TrainerSetup) -> tuple[int, int]:
    """``(kept through the backward, extra while a layer is recomputed)`` by the decoder stack."""
    t, h, layer = s.tokens, shape.hidden_size, layer_activation_bytes_per_token(shape)
    workspace = 4 * shape.intermediate_size * t
    if s.gradient_checkpointing:
        return shape.num_hidden_layers * BF16 * h * t, layer * t + workspace
    return shape.num_hidden_layers * layer * t, BF16 * h * t + workspace


def logits_bytes(shape: ModelShape, s: TrainerSetup) -> dict[str, int]:
    """The logits path at its moments: ``forward_end``, ``backward_start`` (without the head) and
    ``entropy_backward``, and what the entropy ``kept``."""
    tv, cv = s.tokens * shape.vocab_size, min(s.entropy_chunk_rows, s.tokens) * shape.vocab_size
    block = BF16 * tv * (2 if s.temperature_copy else 1)
    log_probs = FP32 * s.tokens if s.flash_cross_entropy else FP32 * tv
    gradient = 0 if in_place_gradient(s) else BF16 * tv
    kept = 2 * FP32 * tv if s.calculate_entropy and not s.entropy_checkpointing else 0
    entropy_backward = 0
    if s.calculate_entropy:
        entropy_backward = (12 if s.entropy_checkpointing else 10) * tv + 20 * cv
    return {"kept": kept, "forward_end": block + kept + log_probs,
            "backward_start": block + kept + max(log_probs, gradient), "entropy_backward": entropy_backward}


def in_place_gradient(s: TrainerSetup) -> bool:
    """Does flash-attn's cross-entropy write the logits' gradient into the logits block? verl 0.9.1 asks for it
    (``inplace_backward=True``) exactly where the update computes no entropy."""
    if not s.flash_cross_entropy:
        return False
    return not s.calculate_entropy if s.inplace_cross_entropy is None else s.inplace_cross_entropy


def sc_head_bytes(shape: ModelShape, s: TrainerSetup) -> tuple[int, int]:
    """``(kept, extra at the start of the backward)`` by the score-centering head (0 without one)."""
    if s.sc_top_k <= 0:
        return 0, 0
    kept = (8 + FP32 + FP32) * s.sc_top_k * s.tokens
    workspace = FP32 * min(s.sc_chunk_rows, s.tokens) * shape.vocab_size
    return kept, BF16 * s.tokens * shape.vocab_size + workspace


def sharded_fp32_bytes(shape: ModelShape, s: TrainerSetup, copies: int) -> int:
    """``copies`` fp32 copies of this GPU's shard of the parameters (0 where FSDP2 offloads them to the host):
    weights, gradients and two AdamW moments are 4; the optimizer step's foreach temporary makes 5."""
    return 0 if s.offload_policy else copies * FP32 * shape.parameters // s.dp_size


def moments(shape: ModelShape, s: TrainerSetup) -> dict[str, int]:
    """What lives on the GPU at each moment of the micro-batch and its optimizer step (bytes)."""
    params_and_optimizer = sharded_fp32_bytes(shape, s, 3)  # no gradients before the layers' backward
    states = sharded_fp32_bytes(shape, s, 4)
    vh, layer = shape.embedding_parameters, shape.layer_parameters
    kept, recompute = activation_bytes(shape, s)
    final_norm = 8 * shape.hidden_size * s.tokens
    lg = logits_bytes(shape, s)
    sc_kept, sc_backward = sc_head_bytes(shape, s)
    return {
        "forward_end": params_and_optimizer + kept + final_norm + lg["forward_end"] + sc_kept,
        "backward_start": params_and_optimizer + kept + final_norm + lg["backward_start"] + sc_kept + sc_backward,
        "entropy_backward": params_and_optimizer + kept + final_norm + lg["entropy_backward"] + sc_kept,
        "lm_head_backward": params_and_optimizer + 2 * BF16 * vh + kept + final_norm + BF16 * s.tokens * shape.vocab_size,
        "layer_recompute": states + BF16 * vh + 2 * BF16 * layer + kept + recompute,
        "backward_end": states + 9 * vh,
        "optimizer_step": sharded_fp32_bytes(shape, s, 5),
    }


def trainer_terms(shape: ModelShape, tokens: int, *, gradient_checkpointing: bool = True, dp_size: int = 1,
                  reserve_bytes: int = 0, **setup: object) -> dict[str, int]:
    """Bytes per trainer GPU by term: ``model_states``, ``gathered``, ``activations`` (the decoder stack's own
    peak), ``logits`` (the logits path's own peak), ``sc_head`` (its extra at the start of the backward),
    ``peak`` (the largest of :func:`moments`), ``reserve`` and ``total = peak + reserve``. ``setup``: further
    fields of :class:`TrainerSetup`."""
    s = TrainerSetup(tokens=tokens, dp_size=dp_size, gradient_checkpointing=gradient_checkpointing, **setup)
    vh, layer = shape.embedding_parameters, shape.layer_parameters
    kept, recompute = activation_bytes(shape, s)
    lg = logits_bytes(shape, s)
    sc_kept, sc_backward = sc_head_bytes(shape, s)
    peak = max(moments(shape, s).values())
    return {"model_states": sharded_fp32_bytes(shape, s, 4),
            "gathered": max(2 * BF16 * vh + 2 * BF16 * layer, 9 * vh), "activations": kept + recompute,
            "logits": max(lg["forward_end"], lg["backward_start"], lg["entropy_backward"]),
            "sc_head": sc_kept + sc_backward, "peak": peak, "reserve": int(reserve_bytes),
            "total": peak + int(reserve_bytes)}
