"""Count, with torch's own memory tracker, the per-GPU bytes of one verl 0.9.1 FSDP2 actor micro-batch.

Nothing is allocated: every tensor is a fake tensor (``torch._subclasses.fake_tensor.FakeTensorMode``
on the CPU fake device), the collectives go to torch's fake process group (``init_process_group("fake")``,
rank 0 of ``world_size``), and the bytes are those of ``torch.distributed._tools``'s trackers, which
count every tensor storage created while they are active, in categories, and keep the snapshot at the
peak of their total (``MemTracker`` for a plain module, ``FSDPMemTracker`` for an FSDP2 one). The model is
Hugging Face's ``Qwen3ForCausalLM`` built from its config (random init, no weights), as verl's FSDP engine
trains it:

* FSDP2 ``fully_shard`` on every ``_no_split_modules`` layer (``Qwen3DecoderLayer``), on ``embed_tokens``
  and ``lm_head`` when they are not tied, then on the root (``verl/utils/fsdp_utils.py::apply_fsdp2``),
  ``reshard_after_forward=True``, ``MixedPrecisionPolicy(bf16, fp32, cast_forward_inputs=True)``,
  fp32 master parameters; gradient checkpointing by ``gradient_checkpointing_enable`` (non-reentrant);
* remove-padding layout: one packed row of T tokens, ``input_ids`` and ``position_ids`` of shape
  ``(1, T)``, no attention mask; bf16 logits ``(1, T, V)`` squeezed to ``(T, V)``, temperature 1;
* ``prepare_model_outputs`` (``verl/workers/engine/fsdp/transformer_impl.py``): when asked, the entropy
  by ``entropy_from_logits_with_chunking(logits, 2048)`` in eager mode, with autograd (it enters the loss
  as ``- entropy_coeff * entropy`` even at coefficient 0, as ``verl/workers/utils/losses.py`` does); the
  log-probs by ``logprobs_from_logits_v2``, the path ``logprobs_from_logits`` takes without flash-attn;
  optionally the project's score-centering head (``runners/verl_side/head/correction.py``:
  ``head_log_probs_with_tail`` at k sampler ids per token and ``centering_term``, added to the loss);
* forward, logits path and loss under ``torch.autocast("cuda", bf16)`` as verl's ``forward_step`` runs
  them (emulated, see below); loss ``-(advantages * log_probs).mean()``, backward, ``clip_grad_norm_`` and
  torch's ``AdamW`` with ``foreach=True`` (what ``foreach=None`` picks on CUDA; its ``sqrt`` temporary is
  one fp32 copy of the sharded parameters), then ``zero_grad(set_to_none=True)``.

What :func:`count` returns (bytes of one rank; each term from an isolated run of its own):

* ``model_states`` -- sharded fp32 parameters, sharded fp32 gradients and AdamW states (fp32 ``exp_avg``,
  ``exp_avg_sq`` and a 4-byte ``step`` per parameter) after one step on a few tokens;
* ``gathered`` -- the FSDP2 units' unsharded bf16 parameters and unsharded gradients during one
  forward+backward on a few tokens: each category's own peak, their joint peak, and the categories at the
  peak of the total, with the all-gather and reduce-scatter buffers beside them, and the joint peak with
  ``Activation + Temp`` (the tracker files FSDP2's gradient casts and the tied embedding's second
  ``(V, hidden)`` gradient as ``Temp``; the few tokens' own activations are negligible);
* ``activations`` -- the peak of ``Activation + Temp`` of the decoder stack alone (bf16 model, no FSDP:
  from a ``(1, T, hidden)`` bf16 embedding output that requires grad to the final norm, backward from
  ``hidden.sum()``, no embedding and no lm_head: their ``(V, hidden)`` weight gradients belong to the root
  unit), with and without gradient checkpointing, and the bytes one decoder layer (and its attention, MLP
  and norms) keeps from its forward, from the tracker's module snapshots;
* ``logits`` -- the peak of ``Activation + Temp`` of the logits path alone, from a ``(T, hidden)`` bf16
  hidden state that requires grad and a frozen bf16 lm_head (its weight gradient is the root unit's
  unsharded gradient, counted in ``gathered``): logits, entropy, log-probs, loss and backward;
* ``sc_head`` -- the same run with the score-centering head, minus the run without it;
* ``peak_total`` -- the peak of the whole micro-batch (FSDP2 model after one warm-up step, so the AdamW
  states exist, as on every step after the first) with its category breakdown, the breakdown at each
  phase's peak (forward, logits, backward, optimizer), each category's minimum and maximum per phase, and
  the state at the phase boundaries.

Attention: ``attn_implementation="sdpa"`` (flash-attn is not installed here). With no mask, ``sdpa`` on
the fake CPU device runs ``_scaled_dot_product_flash_attention_for_cpu`` (GQA without repeating k/v),
which saves q, k, v, its output and the fp32 logsumexp -- ``2 (2 q + 2 kv) + 4 attention_heads`` bytes per layer and
token (``q = attention_heads x head_dim``, ``kv = kv_heads x head_dim``; 20,608 for Qwen3-4B), no ``T x T`` matrix.
The whole attention block keeps ``10 q + 10 kv + 2 hidden + 8 attention_heads + 4 kv_heads`` bytes per token: with
the kernel's set, q/k_norm's fp32 inputs and bf16 normalised values and rsqrt, and o_proj's output
(32,928 for Qwen3-0.6B). flash-attn's varlen kernel, which verl uses on the GPU with remove-padding,
saves the same set (q, k, v, out and the logsumexp); sdpa's
math path would save the ``attention_heads x T x T`` probabilities instead, and a packed row of several sequences
would make transformers build a ``T x T`` mask for sdpa. Only one sequence is packed here
(``position_ids = arange(T)``), so neither happens -- once transformers is told so: it counts a fake tensor
as tracing and then keeps the packed-sequence ids it derives from ``position_ids`` (on real tensors it finds
one sequence and drops them), which would hand sdpa a ``T x T`` bf16 mask per layer (``2 T`` bytes per token
and layer, saved for backward) and repeated k/v; :func:`one_sequence` makes
``masking_utils.find_packed_sequence_indices`` answer "one sequence" (None) during a count.

Autocast: on the CPU fake device ``torch.autocast`` would follow the CPU op lists, so :class:`CudaAutocastFp32`
emulates CUDA's fp32 rule instead (a bf16 input of an op CUDA autocast runs in fp32 is cast first). In a
micro-batch it changes one thing: ``logprobs_from_logits_v2``'s per-row ``log_softmax`` runs in fp32, so the
log-probs keep ``4 T V`` bytes for backward instead of ``2 T V``. The chunked entropy casts to fp32 itself:
it keeps the fp32 chunk and its softmax, ``8 T V`` bytes, over all chunks until its backward.

FSDP2's root unit (the embedding, tied to the lm_head, and the final norm): torch 2.13's ``fully_shard``
keeps the root unsharded after forward only when ``reshard_after_forward`` is left ``None``; verl passes
``True``, so the root is resharded after the forward and all-gathered again when the logits' gradient
reaches it -- the logits path's backward runs with no gathered parameters (``peak_total``'s boundaries).

Tracker details: bytes are storage bytes (CPU: no 512-byte rounding, which on CUDA is negligible here).
DTensor sharding propagation runs its ops in the active fake mode, which the tracker would count as
global-shape allocations (several times the optimizer states during ``step``); the counting trackers
below skip the ops run inside ``ShardingPropagator._propagate_tensor_meta_non_cached``. A weight gradient
counts as ``Temp`` from the op that creates it until autograd's ``AccumulateGrad`` (the next node) hands it
to the tracker's gradient hook, so an ``Activation + Temp`` peak in backward may include one weight
gradient matrix. A fake tensor has no value: the score-centering head's backward guard (rows of the
recomputed softmax sum to 1) reads as passed.

    python benchmarks/capacity/count.py --model Qwen3-0.6B --tokens 2048 --entropy --out counts.json
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import gc
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map_only

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from runners.config.model_shapes import PUBLISHED as SHAPES  # noqa: E402

ENTROPY_CHUNK = 2048  # verl's entropy_from_logits_chunk_size default
FLASH_BLOCK_ROWS = 64  # rows per block of FlashCrossEntropyStandIn
#: What :func:`count` can count, each by an isolated run of its own (``parts``).
PARTS = ("model_states", "gathered", "activations", "logits", "sc_head", "peak_total")
STATE_TOKENS = 16  # tokens of the model_states / gathered / warm-up runs: activations negligible
CLIP_GRAD = 1.0
ENTROPY_COEFF = 0.0
TRANSIENT = ("Activation", "Temp")
GATHERED = ("Unsharded Param", "Unsharded Grad", "All Gather", "Reduce Scatter")
#: Category sums whose own peak (and the snapshot there) the counting trackers keep.
GROUPS = {"transient": TRANSIENT, "gathered": GATHERED, "unsharded": GATHERED[:2],
          "gathered_and_transient": GATHERED + TRANSIENT}

#: Published Qwen3 dense shapes by short name (``runners.config.model_shapes.PUBLISHED``, the models' config.json).
PUBLISHED: dict[str, dict[str, Any]] = {name.split("/", 1)[1]: {**shape.as_dict(), "rms_norm_eps": 1e-6}
                                        for name, shape in SHAPES.items()}
_SIZE_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "tie_word_embeddings")


def tiny_shape() -> dict[str, Any]:
    """The embedded backend's model (``conf/model/tiny_qwen3.yaml``), vocabulary from its tokenizer."""
    from omegaconf import OmegaConf

    from runners.tiny.tokenizer import build_tokenizer

    cfg = OmegaConf.load(ROOT / "conf" / "model" / "tiny_qwen3.yaml")
    shape = {key: cfg[key] for key in _SIZE_KEYS}
    return {**shape, "vocab_size": len(build_tokenizer()), "rms_norm_eps": float(cfg.get("rms_norm_eps", 1e-6))}


def model_shape(name: str) -> dict[str, Any]:
    return tiny_shape() if name == "tiny" else dict(PUBLISHED[name])


# ----------------------------------------------------------------------------------------------- trackers


def _flat(snapshot: dict) -> dict[str, int]:
    """A tracker snapshot ``{device: {category: bytes}}`` as ``{category name: bytes}`` over all devices."""
    out: dict[str, int] = {}
    for dev_snap in snapshot.values():
        for key, value in dev_snap.items():
            name = getattr(key, "value", key)
            out[name] = out.get(name, 0) + int(value)
    return out


def _sum(snap: dict[str, int], keys: tuple[str, ...]) -> int:
    return sum(snap.get(key, 0) for key in keys)


def _scalar(func: Any, args: tuple, kwargs: dict | None) -> Any:
    """A tensor's Python value; zero (False) where a fake tensor has none (the SC head's mass guard)."""
    from torch._subclasses.fake_tensor import DataDependentOutputException

    try:
        return func(*args, **(kwargs or {}))
    except DataDependentOutputException:
        return False if args[0].dtype == torch.bool else 0


class _Accounting:
    """Mixin for torch's trackers: each category's own peak, each :data:`GROUPS` sum's own peak and the
    snapshot there, per-phase peaks and category ranges; DTensor sharding propagation left uncounted."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.phase = "setup"
        self.category_peaks: dict[str, int] = {}
        self.group_peaks: dict[str, dict[str, Any]] = {name: {"bytes": 0, "snapshot": {}} for name in GROUPS}
        self.phases: dict[str, dict[str, Any]] = {}
        self._in_propagation = False

    def _update_snap(self, *args: Any, **kwargs: Any) -> None:
        super()._update_snap(*args, **kwargs)
        snap = _flat(self._curr_mem_snap)
        for key, value in snap.items():
            self.category_peaks[key] = max(self.category_peaks.get(key, 0), value)
        for name, keys in GROUPS.items():
            if _sum(snap, keys) > self.group_peaks[name]["bytes"]:
                self.group_peaks[name] = {"bytes": _sum(snap, keys), "snapshot": snap}
        stats = self.phases.setdefault(self.phase, {"peak": {}, "min": dict(snap), "max": {}})
        if snap.get("Total", 0) > stats["peak"].get("Total", -1):
            stats["peak"] = snap
        for key, value in snap.items():
            stats["min"][key] = min(stats["min"].get(key, value), value)
            stats["max"][key] = max(stats["max"].get(key, value), value)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self._in_propagation:  # fake ops of DTensor's sharding propagation: global shapes, not memory
            return func(*args, **(kwargs or {}))
        if func is torch.ops.aten._local_scalar_dense.default:
            return _scalar(func, args, kwargs)
        return super().__torch_dispatch__(func, types, args, kwargs)

    @contextlib.contextmanager
    def _propagation_uncounted(self) -> Iterator[None]:
        from torch.distributed.tensor import DTensor

        propagator = DTensor._op_dispatcher.sharding_propagator
        original = propagator._propagate_tensor_meta_non_cached

        def propagate(op_schema: Any) -> Any:
            self._in_propagation = True
            try:
                return original(op_schema)
            finally:
                self._in_propagation = False

        propagator._propagate_tensor_meta_non_cached = propagate
        try:
            yield
        finally:
            del propagator._propagate_tensor_meta_non_cached  # back to the class's method

    def current(self) -> dict[str, int]:
        return _flat(self.get_tracker_snapshot("current"))

    def peak(self) -> dict[str, int]:
        return _flat(self.get_tracker_snapshot("peak"))

    def summary(self) -> dict[str, Any]:
        return {"peak_breakdown": self.peak(), "category_peaks": dict(self.category_peaks),
                "group_peaks": self.group_peaks}

    @property
    def transient_peak(self) -> int:
        return self.group_peaks["transient"]["bytes"]


def _tracker_classes() -> tuple[type, type]:
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import MemTracker

    class CountingTracker(_Accounting, MemTracker):
        """``MemTracker`` with :class:`_Accounting`."""

    class CountingFSDPTracker(_Accounting, FSDPMemTracker):
        """``FSDPMemTracker`` with :class:`_Accounting`."""

    return CountingTracker, CountingFSDPTracker


@contextlib.contextmanager
def _tracking(tracker: Any) -> Iterator[Any]:
    with tracker._propagation_uncounted(), tracker:
        yield tracker


# ------------------------------------------------------------------------------------------ autocast


def _fp32_ops() -> frozenset:
    """Ops CUDA autocast runs in fp32 (torch.amp, "CUDA Ops that can autocast to float32") that a micro-batch
    could call on bf16 tensors: of these, only ``logprobs_from_logits_v2``'s row ``log_softmax`` does."""
    F, T = nn.functional, torch.Tensor
    return frozenset({F.softmax, F.log_softmax, torch.softmax, torch.log_softmax, T.softmax, T.log_softmax,
                      torch.logsumexp, T.logsumexp, torch.sum, T.sum, torch.exp, T.exp, torch.log, T.log,
                      torch.pow, T.pow, T.__pow__, torch.rsqrt, T.rsqrt, torch.cumsum, T.cumsum, torch.prod,
                      T.prod})


class CudaAutocastFp32(TorchFunctionMode):
    """verl's ``forward_step`` runs under ``torch.autocast("cuda", bf16)``; on the CPU fake device autocast
    would follow the CPU op lists, so its fp32 rule is emulated: a bf16/fp16 input of an op CUDA autocast
    runs in fp32 is cast to fp32 first (the same ``_to_copy`` node autocast inserts). Matmuls need nothing:
    their inputs are bf16 already (FSDP2's ``param_dtype``)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = _fp32_ops()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.ops and kwargs.get("dtype") is None:
            args, kwargs = tree_map_only(torch.Tensor, _to_fp32, (args, kwargs))
        return func(*args, **kwargs)


def _to_fp32(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.float() if tensor.dtype in (torch.bfloat16, torch.float16) else tensor


def _autocast(enabled: bool) -> contextlib.AbstractContextManager:
    return CudaAutocastFp32() if enabled else contextlib.nullcontext()


# ---------------------------------------------------------------------------------------- model building


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


@contextlib.contextmanager
def fake_world(world_size: int) -> Iterator[Any]:
    """Fake process group (rank 0 of ``world_size``) and its 1-D CPU mesh; the caller enters fake mode."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", rank=0, world_size=world_size, store=FakeStore())
    try:
        yield init_device_mesh("cpu", (world_size,))  # outside FakeTensorMode, as torchtitan does
    finally:
        dist.destroy_process_group()


@contextlib.contextmanager
def one_sequence() -> Iterator[None]:
    """transformers' packed-sequence detection answers None (one sequence), as it does for real tensors."""
    from transformers import masking_utils

    original = masking_utils.find_packed_sequence_indices
    masking_utils.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = original


def qwen3_config(shape: dict[str, Any], tokens: int) -> Any:
    from transformers import Qwen3Config

    config = Qwen3Config(**{key: shape[key] for key in (*_SIZE_KEYS, "vocab_size")},
                         rms_norm_eps=shape.get("rms_norm_eps", 1e-6),
                         max_position_embeddings=max(tokens, 40_960), use_cache=False)
    config._attn_implementation = "sdpa"
    return config


def build_model(shape: dict[str, Any], tokens: int, dtype: torch.dtype, gradient_checkpointing: bool) -> nn.Module:
    """``Qwen3ForCausalLM`` in the active fake mode, parameters in ``dtype``, in training mode."""
    from transformers import Qwen3ForCausalLM

    with _default_dtype(dtype):
        model = Qwen3ForCausalLM(qwen3_config(shape, tokens))
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model.train()


def fsdp_units(model: nn.Module) -> list[nn.Module]:
    """The modules verl's ``apply_fsdp2`` shards before the root (``_select_fsdp2_wrap_targets``)."""
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    layer_classes = set(model._no_split_modules or [])
    units = []
    for name, module in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        classes = {cls.__name__ for cls in type(module).__mro__}  # fully_shard subclasses the module
        if classes & layer_classes or (
                not tied and (isinstance(module, nn.Embedding) or (leaf in ("embed_tokens", "lm_head")
                                                                   and hasattr(module, "weight")))):
            units.append(module)
    return units


def build_fsdp_model(shape: dict[str, Any], tokens: int, mesh: Any, gradient_checkpointing: bool) -> nn.Module:
    """fp32 master model sharded as verl's FSDP2 engine does (``apply_fsdp2``)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    model = build_model(shape, tokens, torch.float32, gradient_checkpointing)
    mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32,
                                     cast_forward_inputs=True)
    for module in [*fsdp_units(model), model]:
        fully_shard(module, mesh=mesh, mp_policy=mp_policy, reshard_after_forward=True)
    return model


def build_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.01, foreach=True)


def root_param_bytes(model: nn.Module) -> int:
    """Unsharded bf16 bytes of the root unit's own parameters (those no other unit manages)."""
    inner = {id(p) for unit in fsdp_units(model) for p in unit.parameters()}
    seen, total = set(), 0
    for param in model.parameters():
        if id(param) not in inner and id(param) not in seen:
            seen.add(id(param))
            total += param.numel() * 2
    return total


# -------------------------------------------------------------------------------------------- the batch


@dataclasses.dataclass(frozen=True)
class Setup:
    """One count's model and options (:func:`count`'s arguments)."""

    shape: dict[str, Any]
    tokens: int
    world_size: int = 1
    gradient_checkpointing: bool = True
    calculate_entropy: bool = False
    sc_top_k: int = 0
    optimizer_step: bool = True
    autocast: bool = True
    entropy_checkpointing: bool = False
    log_probs: str = "torch"  # "torch": logprobs_from_logits_v2 (no flash-attn); "flash": FlashCrossEntropyStandIn
    inplace_backward: bool | None = None  # the stand-in's backward into the logits; None: verl's rule (no entropy)

    @property
    def vocab(self) -> int:
        return int(self.shape["vocab_size"])

    @property
    def flash_in_place(self) -> bool:
        """verl 0.9.1 calls flash-attn's cross-entropy with ``inplace_backward = not calculate_entropy``
        (``verl/workers/engine/fsdp/transformer_impl.py``) unless a count asks otherwise."""
        return not self.calculate_entropy if self.inplace_backward is None else self.inplace_backward


def batch(tokens: int, vocab: int, sc_top_k: int) -> dict[str, torch.Tensor]:
    """One packed row: ids, positions, rolled labels, advantages; the sampler's head when ``sc_top_k``."""
    input_ids = torch.randint(0, vocab, (1, tokens))
    out = {"input_ids": input_ids, "position_ids": torch.arange(tokens).unsqueeze(0),
           "labels": torch.roll(input_ids.squeeze(0), shifts=-1), "advantages": torch.randn(tokens)}
    if sc_top_k:
        k = min(sc_top_k, vocab)
        out["head_ids"] = torch.randint(0, vocab, (tokens, k))
        out["head_log_probs"] = torch.randn(tokens, k).clamp_max(-1.0)
    return out


class FlashCrossEntropyStandIn(torch.autograd.Function):
    """flash-attn's ``cross_entropy_loss`` as verl's ``logprobs_from_logits`` calls it on a GPU, as far as memory
    goes: the forward keeps the logits (a reference, no copy) and one fp32 log-sum-exp per row and returns the
    label's log-prob; the backward writes ``(softmax - onehot) x grad`` into one new ``(T, V)`` tensor of the
    logits' dtype (``inplace_backward=False``, verl's call where the update computes the entropy) or into the
    logits themselves (``inplace_backward=True``, verl's call without the entropy: flash-attn's ``dlogits =
    logits``). It works in blocks of :data:`FLASH_BLOCK_ROWS` rows so that its own fp32 temporaries stay
    negligible (the Triton kernel has none in global memory)."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, labels: torch.Tensor, inplace_backward: bool = False) -> torch.Tensor:
        lse = torch.empty(logits.shape[0], dtype=torch.float32)
        for start in range(0, logits.shape[0], FLASH_BLOCK_ROWS):
            lse[start:start + FLASH_BLOCK_ROWS] = torch.logsumexp(logits[start:start + FLASH_BLOCK_ROWS].float(), -1)
        ctx.save_for_backward(logits, lse, labels)
        ctx.inplace_backward = inplace_backward
        return logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1).float() - lse

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        logits, lse, labels = ctx.saved_tensors
        out = logits.detach() if ctx.inplace_backward else torch.empty_like(logits)
        for start in range(0, logits.shape[0], FLASH_BLOCK_ROWS):
            rows = slice(start, start + FLASH_BLOCK_ROWS)
            block = torch.exp(logits[rows].float() - lse[rows].unsqueeze(-1))
            block.scatter_add_(-1, labels[rows].unsqueeze(-1), -torch.ones_like(lse[rows]).unsqueeze(-1))
            out[rows] = (block * -grad[rows].unsqueeze(-1)).to(logits.dtype)
        return out, None, None


def logits_loss(logits: torch.Tensor, data: dict[str, torch.Tensor], setup: Setup) -> torch.Tensor:
    """verl's ``prepare_model_outputs`` (remove padding, temperature 1) and a PG loss on ``(T, V)`` logits:
    the entropy (chunked, eager; under ``torch.utils.checkpoint`` with ``entropy_checkpointing``, as verl wraps
    it), the log-probs by ``setup.log_probs``, the score-centering head where ``data`` carries one."""
    from verl.utils import torch_functional as verl_F

    entropy = None
    if setup.calculate_entropy:
        chunked = functools.partial(verl_F.entropy_from_logits_with_chunking, chunk_size=ENTROPY_CHUNK)
        entropy = (torch.utils.checkpoint.checkpoint(chunked, logits, use_reentrant=True)
                   if setup.entropy_checkpointing else chunked(logits))
    if setup.log_probs == "flash":
        log_probs = FlashCrossEntropyStandIn.apply(logits, data["labels"], setup.flash_in_place)
    else:
        log_probs = verl_F.logprobs_from_logits_v2(logits, data["labels"])
    loss = -(data["advantages"] * log_probs).mean()
    if "head_ids" in data:
        from ablations.score_centering import centering_term, head_log_probs_with_tail

        head, log_tail = head_log_probs_with_tail(logits, data["head_ids"])
        correction = centering_term(head, data["head_log_probs"], train_log_tail=log_tail)[0]
        loss = loss + correction.mean()
    if entropy is not None:
        loss = loss - ENTROPY_COEFF * entropy.mean()
    return loss


def clip_and_step(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_GRAD, foreach=True)
    optimizer.step()


def micro_batch(model: nn.Module, data: dict[str, torch.Tensor], setup: Setup, tracker: Any = None,
                boundaries: dict[str, Any] | None = None) -> None:
    """Forward, logits path (verl's ``forward_step``, under autocast) and backward, naming the tracker's phases."""

    def enter(phase: str) -> None:
        if tracker is not None:
            if boundaries is not None:
                boundaries[f"before_{phase}"] = tracker.current()
            tracker.phase = phase

    with _autocast(setup.autocast):
        enter("forward")
        output = model(input_ids=data["input_ids"], position_ids=data["position_ids"], use_cache=False)
        enter("logits")
        loss = logits_loss(output.logits.squeeze(0), data, setup)
        del output
    enter("backward")
    loss.backward()


# ------------------------------------------------------------------------------------------ the counts


def _timed(run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    start = time.perf_counter()
    result = run()
    result["wall_s"] = round(time.perf_counter() - start, 2)
    gc.collect()
    return result


def _small(setup: Setup) -> Setup:
    """The same model on :data:`STATE_TOKENS` tokens, no entropy, no head: activations negligible."""
    return dataclasses.replace(setup, tokens=STATE_TOKENS, calculate_entropy=False, sc_top_k=0)


def count_model_states(setup: Setup, mesh: Any) -> dict[str, Any]:
    """Sharded params + sharded grads + AdamW states after one step on a few tokens (before zero_grad)."""
    _, fsdp_tracker = _tracker_classes()
    small = _small(setup)
    model = build_fsdp_model(setup.shape, small.tokens, mesh, setup.gradient_checkpointing)
    optimizer = build_optimizer(model)
    data = batch(small.tokens, setup.vocab, 0)
    tracker = fsdp_tracker(model, optimizer)
    tracker.track_inputs(tuple(data.values()))
    with _tracking(tracker):
        micro_batch(model, data, small, tracker)
        if setup.optimizer_step:
            tracker.phase = "optimizer"
            clip_and_step(model, optimizer)
        states = tracker.current()
        optimizer.zero_grad(set_to_none=True)
    parts = {"sharded_param": states.get("Sharded Param", 0), "sharded_grad": states.get("Sharded Grad", 0),
             "optimizer_states": states.get("OptState", 0)}
    return {"bytes": sum(parts.values()), **parts, "buffer": states.get("Buffer", 0), "breakdown": states,
            "tokens": small.tokens, **tracker.summary()}


def count_gathered(setup: Setup, mesh: Any) -> dict[str, Any]:
    """Unsharded params / grads (and the collectives' buffers) during one forward+backward on a few tokens."""
    _, fsdp_tracker = _tracker_classes()
    small = _small(setup)
    model = build_fsdp_model(setup.shape, small.tokens, mesh, setup.gradient_checkpointing)
    data = batch(small.tokens, setup.vocab, 0)
    tracker = fsdp_tracker(model)
    tracker.track_inputs(tuple(data.values()))
    with _tracking(tracker):
        micro_batch(model, data, small, tracker)
    at_peak, own = tracker.peak(), tracker.category_peaks
    out: dict[str, Any] = {"tokens": small.tokens, "root_unit_param_bytes": root_param_bytes(model)}
    for key in GATHERED:
        name = key.lower().replace(" ", "_")
        out[f"{name}_at_peak"], out[f"{name}_own_peak"] = at_peak.get(key, 0), own.get(key, 0)
    out["bytes_at_peak"] = _sum(at_peak, GATHERED[:2])
    out["bytes_own_peaks"] = _sum(own, GATHERED[:2])
    out["bytes_joint_peak"] = tracker.group_peaks["unsharded"]["bytes"]
    out["with_buffers_joint_peak"] = tracker.group_peaks["gathered"]["bytes"]
    # + Activation/Temp: FSDP's grad casts and the tied embedding's second gradient count as Temp
    out["with_temporaries_joint_peak"] = tracker.group_peaks["gathered_and_transient"]["bytes"]
    out["phases"] = tracker.phases
    return {**out, **tracker.summary()}


def layer_retention(tracker: Any, tokens: int) -> dict[str, Any]:
    """Bytes the first decoder layer and its children keep from their forward (post- minus pre-forward)."""
    from torch.distributed._tools.mem_tracker import _ModState

    out = {}
    for stats in tracker.memory_tracking.values():
        _, marker, rest = stats.mod_fqn.partition(".layers.0")
        if not marker or (rest and (not rest.startswith(".") or "." in rest[1:])):
            continue  # only the layer itself and its direct children
        pre, post = stats.snapshots.get(_ModState.PRE_FW), stats.snapshots.get(_ModState.POST_FW)
        if pre and post:
            kept = _flat(post[0]).get("Total", 0) - _flat(pre[0]).get("Total", 0)
            out[rest.lstrip(".") or "layer"] = {"bytes": kept, "bytes_per_token": kept / tokens}
    return out


def count_activations(setup: Setup, gradient_checkpointing: bool) -> dict[str, Any]:
    """Activation + Temp peak of the decoder stack (bf16, no FSDP, no lm_head) for one forward+backward."""
    tracker_cls, _ = _tracker_classes()
    model = build_model(setup.shape, setup.tokens, torch.bfloat16, gradient_checkpointing)
    positions = torch.arange(setup.tokens).unsqueeze(0)
    # the embedding's output as a leaf: its (V, hidden) weight gradient belongs to the root unit (``gathered``)
    embeds = torch.randn(1, setup.tokens, setup.shape["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
    tracker = tracker_cls()
    tracker.track_external(embeds, positions)
    with _tracking(tracker):
        with _autocast(setup.autocast):
            tracker.phase = "forward"
            hidden = model.model(inputs_embeds=embeds, position_ids=positions, use_cache=False).last_hidden_state
            after_forward = tracker.current()
        loss = hidden.sum()
        del hidden
        tracker.phase = "backward"
        loss.backward()
    return {"bytes": tracker.transient_peak, "after_forward": after_forward,
            "layer_retained": layer_retention(tracker, setup.tokens), "phases": tracker.phases,
            **tracker.summary()}


def count_logits(setup: Setup, sc_top_k: int) -> dict[str, Any]:
    """Activation + Temp peak of the logits path from a (T, hidden) bf16 hidden state (frozen bf16 lm_head)."""
    tracker_cls, _ = _tracker_classes()
    weight = torch.randn(setup.vocab, setup.shape["hidden_size"], dtype=torch.bfloat16)  # frozen lm_head
    hidden = torch.randn(setup.tokens, setup.shape["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
    data = batch(setup.tokens, setup.vocab, sc_top_k)
    tracker = tracker_cls()
    tracker.track_external(weight, hidden, *data.values())
    with _tracking(tracker):
        with _autocast(setup.autocast):
            tracker.phase = "forward"
            loss = logits_loss(nn.functional.linear(hidden, weight), data, setup)
            after_forward = tracker.current()
        tracker.phase = "backward"
        loss.backward()
    return {"bytes": tracker.transient_peak, "after_forward": after_forward, "phases": tracker.phases,
            **tracker.summary()}


def count_peak_total(setup: Setup, mesh: Any) -> dict[str, Any]:
    """The whole micro-batch on the FSDP2 model, after a warm-up step that creates the AdamW states."""
    _, fsdp_tracker = _tracker_classes()
    model = build_fsdp_model(setup.shape, setup.tokens, mesh, setup.gradient_checkpointing)
    optimizer = build_optimizer(model)
    if setup.optimizer_step:  # steady state: every step after the first starts with the AdamW states allocated
        small = _small(setup)
        micro_batch(model, batch(small.tokens, setup.vocab, 0), small)
        clip_and_step(model, optimizer)
        optimizer.zero_grad(set_to_none=True)
    data = batch(setup.tokens, setup.vocab, setup.sc_top_k)
    tracker = fsdp_tracker(model, optimizer)
    tracker.track_inputs(tuple(data.values()))
    boundaries: dict[str, Any] = {}
    with _tracking(tracker):
        micro_batch(model, data, setup, tracker, boundaries)
        boundaries["after_backward"] = tracker.current()
        if setup.optimizer_step:
            tracker.phase = "optimizer"
            clip_and_step(model, optimizer)
            boundaries["after_step"] = tracker.current()
        optimizer.zero_grad(set_to_none=True)
    peak = tracker.peak()
    phase_of_peak = max(tracker.phases, key=lambda p: tracker.phases[p]["peak"].get("Total", 0))
    return {"bytes": peak.get("Total", 0), "breakdown": peak, "phase_of_peak": phase_of_peak,
            "root_unit_param_bytes": root_param_bytes(model), "boundaries": boundaries,
            "phases": tracker.phases, **tracker.summary()}


def count(shape: dict, tokens: int, *, world_size: int = 1, gradient_checkpointing: bool = True,
          calculate_entropy: bool = False, sc_top_k: int = 0, optimizer_step: bool = True,
          autocast: bool = True, entropy_checkpointing: bool = False, log_probs: str = "torch",
          parts: tuple[str, ...] = PARTS, inplace_backward: bool | None = None) -> dict:
    """Counted bytes of one rank for one micro-batch of ``tokens`` packed tokens (module docstring).

    ``autocast`` emulates the fp32 rule of verl's ``torch.autocast("cuda", bf16)`` (:class:`CudaAutocastFp32`).
    """
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    torch.manual_seed(0)
    setup = Setup(dict(shape), tokens, world_size, gradient_checkpointing, calculate_entropy, sc_top_k,
                  optimizer_step, autocast, entropy_checkpointing, log_probs, inplace_backward)
    start = time.perf_counter()
    result: dict[str, Any] = {**dataclasses.asdict(setup), "attn_implementation": "sdpa",
                              "entropy_chunk": ENTROPY_CHUNK, "versions": _versions(), "units": "bytes"}
    with fake_world(world_size) as mesh, FakeTensorMode(), one_sequence():
        if "model_states" in parts:
            result["model_states"] = _timed(lambda: count_model_states(setup, mesh))
        if "gathered" in parts:
            result["gathered"] = _timed(lambda: count_gathered(setup, mesh))
        if "activations" in parts:
            runs = {flag: _timed(lambda flag=flag: count_activations(setup, flag)) for flag in (True, False)}
            result["activations"] = {"bytes": runs[gradient_checkpointing]["bytes"],
                                     "checkpointing": runs[True], "no_checkpointing": runs[False]}
        if "logits" in parts or "sc_head" in parts:
            result["logits"] = _timed(lambda: count_logits(setup, 0))
        if sc_top_k and "sc_head" in parts:
            with_head = _timed(lambda: count_logits(setup, sc_top_k))
            result["sc_head"] = {"bytes": with_head["bytes"] - result["logits"]["bytes"],
                                 "total_peak_difference": with_head["peak_breakdown"].get("Total", 0)
                                 - result["logits"]["peak_breakdown"].get("Total", 0),
                                 "with_head": with_head, "wall_s": with_head["wall_s"]}
        if "peak_total" in parts:
            result["peak_total"] = _timed(lambda: count_peak_total(setup, mesh))
    result["wall_s"] = round(time.perf_counter() - start, 2)
    return result


def _versions() -> dict[str, str]:
    import transformers
    import verl

    return {"torch": torch.__version__, "transformers": transformers.__version__, "verl": verl.__version__}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model", required=True, choices=["tiny", *PUBLISHED])
    parser.add_argument("--tokens", type=int, required=True)
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--entropy", action="store_true", help="calculate_entropy (chunked, eager, in the loss)")
    parser.add_argument("--sc-top-k", type=int, default=0, help="score-centering head ids per token (0: off)")
    parser.add_argument("--no-checkpointing", action="store_true")
    parser.add_argument("--no-optimizer-step", action="store_true")
    parser.add_argument("--no-autocast", action="store_true", help="no emulation of CUDA autocast's fp32 ops")
    parser.add_argument("--entropy-checkpointing", action="store_true", help="the entropy under torch.utils.checkpoint")
    parser.add_argument("--log-probs", choices=["torch", "flash"], default="torch",
                        help="torch: verl's fallback without flash-attn; flash: flash-attn's cross-entropy (stand-in)")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    result = count(model_shape(args.model), args.tokens, world_size=args.world_size,
                   gradient_checkpointing=not args.no_checkpointing, calculate_entropy=args.entropy,
                   sc_top_k=args.sc_top_k, optimizer_step=not args.no_optimizer_step,
                   autocast=not args.no_autocast, entropy_checkpointing=args.entropy_checkpointing,
                   log_probs=args.log_probs, parts=tuple(args.parts))
    result["model"] = args.model
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    peak = f"peak {result['peak_total']['bytes'] / 1e9:.3f} GB " if "peak_total" in result else ""
    print(f"{args.model} T={args.tokens} W={args.world_size}: {peak}in {result['wall_s']} s -> {args.out}")


if __name__ == "__main__":
    main()
