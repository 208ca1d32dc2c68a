"""One FSDP2 trainer GPU at its peak: closed-form bytes per term (an estimate; docs/capacity.md).

The update of verl 0.9.1's FSDP engine on one packed micro-batch of ``T`` tokens (``max_token_len_per_gpu``),
for a Qwen3 decoder (``h`` hidden, ``q``/``kv`` attention widths, ``I`` MLP width, ``L`` layers, ``V``
vocabulary, ``N`` parameters, ``P_l`` parameters per layer), sharded over ``D`` GPUs, bf16 compute:

* **model states** ``16 N / D``: fp32 master weights, fp32 gradients and AdamW's two fp32 moments, each
  sharded; 0 with FSDP2's CPU offload policy (``offload_policy``: all four live on the host).
* **gathered units** ``4 V h + 10 P_l``: the root unit (the tied embedding; the LM head when untied) is
  all-gathered in bf16 from the forward to the end of the backward (FSDP2 does not reshard the root after
  forward), and so is its bf16 gradient once the LM head's backward ran (``2 V h`` each); two decoder
  layers in bf16 at a time (the one computing and the one prefetched, ``4 P_l``), and one layer's bf16
  gradient plus its fp32 copy for the reduce-scatter (``6 P_l``).
* **activations** per token, for one decoder layer's saved tensors (HF's Qwen3 layer; RMSNorm keeps an
  fp32 copy of its input, 4 bytes, the normalised bf16 input and its bf16 output, 2 + 2 bytes per element):
  ``A = 16 h + 14 q + 14 kv + 8 I + 4 heads`` bytes with flash-attn (its output is already contiguous; 2
  ``q`` more where attention's output is transposed into a copy, as with sdpa): two norms ``8 h`` each;
  ``q``: the fp32 copy, the normalised and the q-norm's output, the rotated half, the rotated q (2 + 2 + 2 +
  2 + 4) and the attention output (2); ``kv``: the same for k (12) and v (2); the MLP's gate, up, SiLU and
  product (``2 I`` each); attention's log-sum-exp (fp32 per head). With gradient checkpointing each layer
  keeps only its bf16 input (``2 h``) and one layer is recomputed at a time (``A``); without it every layer
  keeps ``A``. Plus the final norm (``8 h``) and a backward workspace of ``6 I + 4 h`` (a layer's gradients
  in flight).
* **logits** ``T x V``: the bf16 block (``2``; twice with a temperature other than 1); the entropy, where
  computed in the update pass: verl's chunked function in eager mode keeps each chunk's fp32 copy and its
  softmax for a backward that never runs (``8``; entropy_coeff is 0, but the graph lives as long as the
  entropy tensor), the unchunked one the bf16 softmax (``2``), and with ``entropy_checkpointing`` nothing
  (a chunk's three fp32 temporaries, ``12 x chunk x V``, while it runs); the log-probs: flash-attn's
  cross-entropy keeps only the log-sum-exp, verl's torch fallback (bf16) each row's log-softmax (``2``);
  the backward: the logits' bf16 gradient (``2``; twice on the torch fallback, whose per-row gradients are
  stacked).
* **score-centering head** (``k`` ids per token): the ids (int64), the sampler's and the trainer's head
  log-probs (fp32), ``16 k T``; its own fp32 workspace of ``chunk x V`` (``ablations.score_centering``); and
  the logits' gradient it returns (``2 T V``), alive beside the log-probs' until autograd sums them.

The peak is the largest of three moments (the terms' own peaks do not coincide): the forward's end
(checkpointed inputs, the logits path, a running entropy chunk), the start of the backward (the same with
the logits' gradients instead of the chunk, and the head's) and a layer's recomputation (checkpointed
inputs, one layer, the workspace, and whatever the entropy keeps). ``total`` adds the model states, the
gathered units and a reserve. torch.compile of the entropy function (the reference's
``use_torch_compile``) may keep less than eager mode; the plan counts eager mode.
"""

from __future__ import annotations

import dataclasses

from runners.capacity.shapes import ModelShape

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
    entropy_chunking: bool = True
    entropy_chunk_rows: int = 2048
    entropy_checkpointing: bool = False
    flash_attention: bool = True  # attention output already contiguous (flash-attn); False: sdpa's copy
    flash_cross_entropy: bool = True  # flash-attn's cross-entropy for the log-probs; False: verl's torch fallback
    temperature_copy: bool = False  # temperature != 1: the scaled logits are a second block
    sc_top_k: int = 0  # the sampler's head size of an SC arm; 0: no head
    sc_chunk_rows: int = 1024  # ablations.score_centering.head_log_probs' chunk


def layer_activation_bytes_per_token(shape: ModelShape, *, flash_attention: bool = True) -> int:
    """``A``: the bytes one decoder layer saves for its backward, per token (the module docstring)."""
    h, q, kv = shape.hidden_size, shape.q_dim, shape.kv_dim
    per_token = 16 * h + 14 * q + 14 * kv + 8 * shape.intermediate_size + FP32 * shape.num_attention_heads
    return per_token + (0 if flash_attention else BF16 * q)


def model_state_bytes(shape: ModelShape, setup: TrainerSetup) -> int:
    return 0 if setup.offload_policy else 4 * FP32 * shape.parameters // setup.dp_size


def gathered_bytes(shape: ModelShape) -> int:
    root = shape.embedding_parameters
    layer = shape.layer_parameters
    return 2 * BF16 * root + 2 * BF16 * layer + (BF16 + FP32) * layer


def activation_moments(shape: ModelShape, setup: TrainerSetup) -> tuple[int, int]:
    """``(kept through the whole backward, extra while a layer is recomputed)`` in bytes."""
    t, h = setup.tokens, shape.hidden_size
    layer = layer_activation_bytes_per_token(shape, flash_attention=setup.flash_attention)
    kept_per_layer = BF16 * h if setup.gradient_checkpointing else layer
    kept = (shape.num_hidden_layers * kept_per_layer + 8 * h) * t
    workspace = (6 * shape.intermediate_size + 4 * h) * t
    return kept, (layer * t if setup.gradient_checkpointing else 0) + workspace


def entropy_bytes(shape: ModelShape, setup: TrainerSetup) -> tuple[int, int]:
    """``(kept until the micro-batch ends, extra while it runs)`` by the entropy of the update pass."""
    if not setup.calculate_entropy:
        return 0, 0
    tv = setup.tokens * shape.vocab_size
    rows = min(setup.entropy_chunk_rows, setup.tokens) if setup.entropy_chunking else setup.tokens
    if setup.entropy_checkpointing:
        return 0, 3 * FP32 * rows * shape.vocab_size
    if setup.entropy_chunking:
        return 2 * FP32 * tv, FP32 * rows * shape.vocab_size
    return BF16 * tv, BF16 * tv


def logits_moments(shape: ModelShape, setup: TrainerSetup) -> tuple[int, int, int, int]:
    """``(kept by the entropy, the block and the log-probs' saved tensors, extra while the entropy runs, the
    backward's gradients)``."""
    tv = setup.tokens * shape.vocab_size
    entropy_kept, entropy_running = entropy_bytes(shape, setup)
    block = BF16 * tv * (2 if setup.temperature_copy else 1)
    log_probs = FP32 * setup.tokens if setup.flash_cross_entropy else BF16 * tv
    gradient = BF16 * tv * (1 if setup.flash_cross_entropy else 2)
    return entropy_kept, block + log_probs, entropy_running, gradient


def sc_head_moments(shape: ModelShape, setup: TrainerSetup) -> tuple[int, int]:
    """``(kept, extra at the start of the backward)`` by the score-centering head (0 without one)."""
    if setup.sc_top_k <= 0:
        return 0, 0
    kept = (8 + FP32 + FP32) * setup.sc_top_k * setup.tokens
    workspace = FP32 * min(setup.sc_chunk_rows, setup.tokens) * shape.vocab_size
    return kept, BF16 * setup.tokens * shape.vocab_size + workspace


def trainer_terms(shape: ModelShape, tokens: int, *, gradient_checkpointing: bool = True, dp_size: int = 1,
                  reserve_bytes: int = 0, **setup: object) -> dict[str, int]:
    """Bytes per trainer GPU by term: ``model_states``, ``gathered``, ``activations`` (the decoder stack's own
    peak), ``logits`` (the logits path's own peak), ``sc_head``, ``peak`` (the larger moment of the module
    docstring, states and gathered units included), ``reserve`` and ``total = peak + reserve``. ``setup``:
    further fields of :class:`TrainerSetup`."""
    s = TrainerSetup(tokens=tokens, dp_size=dp_size, gradient_checkpointing=gradient_checkpointing, **setup)
    kept, recompute = activation_moments(shape, s)
    entropy_kept, logits_saved, entropy_running, logits_grad = logits_moments(shape, s)
    sc_kept, sc_backward = sc_head_moments(shape, s)
    states, gathered = model_state_bytes(shape, s), gathered_bytes(shape)
    moments = (kept + entropy_kept + logits_saved + entropy_running,  # the forward's end
               kept + entropy_kept + logits_saved + logits_grad + sc_kept + sc_backward,  # the backward's start
               kept + recompute + entropy_kept + sc_kept)  # a layer recomputed
    peak = states + gathered + max(moments)
    return {"model_states": states, "gathered": gathered, "activations": kept + recompute,
            "logits": entropy_kept + logits_saved + max(entropy_running, logits_grad), "sc_head": sc_kept + sc_backward,
            "peak": peak, "reserve": int(reserve_bytes), "total": peak + int(reserve_bytes)}
