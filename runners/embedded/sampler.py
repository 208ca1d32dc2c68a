"""The embedded rollout engine: its own copy of the weights, and what vLLM would return.

For every generated token the sampler returns the sampled token's log-prob and its top-k head
(ids and log-probs), all full-vocabulary normalised after temperature scaling — vLLM's
``processed_logprobs`` mode. Its weights are the trainer's, synced every
``rollout.parameter_sync_step`` steps and passed through the configured numerics mismatch
(:func:`mismatched_state`), so the sampler's ``q`` differs from the trainer's ``p`` the way a
low-precision inference engine's does.

Mismatch knobs (``backend.sampler``), applied in this order at every sync:

* ``int8_weights``: symmetric per-output-row int8 fake quantisation of every 2-D weight;
* ``weight_noise``: Gaussian noise with std ``weight_noise x std(tensor)`` per tensor;
* ``weight_dtype``: round every weight to this dtype (``bfloat16``/``float16``; ``float8_e4m3fn``
  with a per-tensor scale ``amax / 448``), compute in fp32.

Those three change the weights; the next three change how the sampler computes with them. They are
systematic: the same context gets the same error at every sync (weight noise is redrawn each sync):

* ``compute_dtype``: the sampler's forward runs in this dtype (``bfloat16``: bf16 weights *and*
  bf16 activations, matmuls and attention, as a bf16 inference engine computes);
* ``kv_cache_bits``: keys (after their RMSNorm, before rotary) and values are fake-quantised to this
  many bits, symmetric absmax per token and key/value head, as a quantised KV cache stores them
  (0 = off; 2 to 8: a severity ladder, 2 ** (bits - 1) - 1 levels each side of zero);
  ``key_cache_bits`` (null: ``kv_cache_bits``) stores the keys at another width than the values, a split
  cache (keys at 2 bits, values at 3: a level between the ladder's 3 and 2 bits);
* ``logits_dtype``: the final logits are rounded to this dtype before the softmax (a lower-precision
  lm-head/sampling path).

Every one of these knobs has an identity value (:data:`CLEAN_NUMERICS`), at which the sampler
computes exactly what the trainer computes (fp32 weights and forward); :func:`clean_sampler_config`
sets them all, for an evaluation that measures the policy rather than its sampler (``eval.numerics``).
The other keys of ``backend.sampler`` (:data:`SCHEDULE_KEYS`) say when the sampler runs, not how.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from omegaconf import DictConfig, OmegaConf

from runners.config.config_error import ConfigError
from runners.embedded.generate import decode

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
          "float8_e4m3fn": torch.float8_e4m3fn}
#: Largest finite value of each 8-bit float: fp8 rounding uses a per-tensor scale, as fp8 inference does.
_FP8_MAX = {torch.float8_e4m3fn: 448.0}
#: Dtypes the sampler may compute its forward / logits in.
COMPUTE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
KV_CACHE_BITS = (0, 2, 3, 4, 5, 6, 7, 8)
#: The identity value of every numerics knob: a sampler with these holds and computes the trainer's fp32 policy.
CLEAN_NUMERICS = {"weight_dtype": "float32", "int8_weights": False, "weight_noise": 0.0,
                  "compute_dtype": "float32", "kv_cache_bits": 0, "key_cache_bits": None,
                  "logits_dtype": "float32"}
#: The keys of ``backend.sampler`` that schedule the sampler (``schedule.py``) and change none of its numbers.
SCHEDULE_KEYS = frozenset({"speed", "speed_jitter", "run_ahead_batches"})


@dataclass
class Rollout:
    """Responses to a batch of prompts, prompt-major (prompt p owns rows p*n .. p*n+n-1).

    ``response_ids``/``response_mask``/``log_probs`` are ``(R, T)``; ``head_ids``/``head_log_probs``
    ``(R, T, k)``. Padding positions hold the pad id, log-prob 0, and a dummy head (ids 0,
    log-probs ``-inf``: no mass). ``truncated[r]`` is True when row r hit the length cap.
    """

    prompt_ids: list[list[int]]
    response_ids: torch.Tensor
    response_mask: torch.Tensor
    log_probs: torch.Tensor
    head_ids: torch.Tensor
    head_log_probs: torch.Tensor
    truncated: torch.Tensor

    def rows(self, index: slice) -> Rollout:
        """The rows ``index``, trimmed to their longest response."""
        width = max(int(self.response_mask[index].sum(-1).max()), 1)
        return Rollout(
            prompt_ids=self.prompt_ids[index],
            response_ids=self.response_ids[index, :width],
            response_mask=self.response_mask[index, :width],
            log_probs=self.log_probs[index, :width],
            head_ids=self.head_ids[index, :width],
            head_log_probs=self.head_log_probs[index, :width],
            truncated=self.truncated[index],
        )


def collate(parts: list[Rollout], pad_id: int) -> Rollout:
    """Concatenate rollouts along rows, right-padding the response dimension."""
    width = max(p.response_ids.shape[1] for p in parts)

    def pad(t: torch.Tensor, value: float) -> torch.Tensor:
        extra = width - t.shape[1]
        if extra == 0:
            return t
        shape = (t.shape[0], extra, *t.shape[2:])
        return torch.cat([t, torch.full(shape, value, dtype=t.dtype)], dim=1)

    return Rollout(
        prompt_ids=[ids for p in parts for ids in p.prompt_ids],
        response_ids=torch.cat([pad(p.response_ids, pad_id) for p in parts]),
        response_mask=torch.cat([pad(p.response_mask, 0) for p in parts]),
        log_probs=torch.cat([pad(p.log_probs, 0.0) for p in parts]),
        head_ids=torch.cat([pad(p.head_ids, 0) for p in parts]),
        head_log_probs=torch.cat([pad(p.head_log_probs, float("-inf")) for p in parts]),
        truncated=torch.cat([p.truncated for p in parts]),
    )


def check_sampler_config(sampler_cfg: DictConfig) -> None:
    """Raise ConfigError naming the key when a mismatch knob is invalid."""
    if sampler_cfg.weight_dtype not in DTYPES:
        raise ConfigError(
            f"backend.sampler.weight_dtype={sampler_cfg.weight_dtype!r}; allowed: {', '.join(DTYPES)}"
        )
    if not isinstance(sampler_cfg.int8_weights, bool):
        raise ConfigError(f"backend.sampler.int8_weights must be true or false, got {sampler_cfg.int8_weights!r}")
    if not sampler_cfg.weight_noise >= 0:
        raise ConfigError(f"backend.sampler.weight_noise must be >= 0, got {sampler_cfg.weight_noise}")
    for key in ("compute_dtype", "logits_dtype"):
        value = sampler_cfg.get(key, "float32")
        if value not in COMPUTE_DTYPES:
            raise ConfigError(f"backend.sampler.{key}={value!r}; allowed: {', '.join(COMPUTE_DTYPES)}")
    bits = sampler_cfg.get("kv_cache_bits", 0)
    if isinstance(bits, bool) or bits not in KV_CACHE_BITS:
        raise ConfigError(f"backend.sampler.kv_cache_bits={bits!r}; allowed: {', '.join(map(str, KV_CACHE_BITS))} "
                          "(0 = no KV-cache quantisation)")
    key_bits = sampler_cfg.get("key_cache_bits")
    if key_bits is not None and (isinstance(key_bits, bool) or key_bits not in KV_CACHE_BITS):
        raise ConfigError(f"backend.sampler.key_cache_bits={key_bits!r}; allowed: "
                          f"{', '.join(map(str, KV_CACHE_BITS))} or null (null = kv_cache_bits)")


def cache_bits(sampler_cfg: DictConfig) -> tuple[int, int]:
    """``(key bits, value bits)`` of the sampler's KV cache (0 = stored exactly)."""
    bits = sampler_cfg.get("kv_cache_bits", 0)
    key_bits = sampler_cfg.get("key_cache_bits")
    return (bits if key_bits is None else key_bits), bits


def clean_sampler_config(sampler_cfg: DictConfig) -> DictConfig:
    """``sampler_cfg`` with every numerics knob at its identity value (:data:`CLEAN_NUMERICS`).

    Raises ValueError for a key that is neither a numerics knob nor a schedule key: a new knob must be
    given its identity value here before a clean sampler can be trusted to be clean.
    """
    unknown = sorted(set(sampler_cfg) - set(CLEAN_NUMERICS) - SCHEDULE_KEYS)
    if unknown:
        raise ValueError(f"backend.sampler.{unknown[0]}: no identity value in runners/embedded/sampler.py "
                         "CLEAN_NUMERICS, so a clean sampler cannot be built")
    return OmegaConf.merge(sampler_cfg, CLEAN_NUMERICS)


def fake_quantise(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Symmetric absmax fake quantisation of ``x`` over its last dimension to ``bits`` bits."""
    levels = 2 ** (bits - 1) - 1
    scale = x.abs().amax(dim=-1, keepdim=True).float().clamp_min(1e-12) / levels
    return ((x.float() / scale).round().clamp(-levels, levels) * scale).to(x.dtype)


def quantise_kv_cache(model: torch.nn.Module, bits: int, key_bits: int | None = None) -> None:
    """Make ``model`` (a transformers Qwen3) store values as a ``bits``-bit KV cache would, and keys at
    ``key_bits`` (None: ``bits``); a width of 0 leaves that half exact.

    Forward hooks on each attention's ``k_norm`` (keys, ``(..., kv_heads, head_dim)``) and
    ``v_proj`` (values, ``(..., kv_heads * head_dim)``) replace the output by its fake-quantised
    value, per token and attention head; prefill and decode steps alike, so cached and new entries match.
    """
    key_bits = bits if key_bits is None else key_bits
    for layer in model.model.layers:
        attention = layer.self_attn
        head_dim = attention.head_dim

        def keys(_module, _inputs, output):
            return fake_quantise(output, key_bits)

        def values(_module, _inputs, output, head_dim=head_dim):
            shaped = output.reshape(*output.shape[:-1], -1, head_dim)
            return fake_quantise(shaped, bits).reshape(output.shape)

        if key_bits:
            attention.k_norm.register_forward_hook(keys)
        if bits:
            attention.v_proj.register_forward_hook(values)


@torch.no_grad()
def mismatched_state(
    state: dict[str, torch.Tensor], sampler_cfg: DictConfig, generator: torch.Generator
) -> dict[str, torch.Tensor]:
    """The trainer's ``state`` as the sampler holds it (see the module docstring for the knobs)."""
    out = {}
    dtype = DTYPES[sampler_cfg.weight_dtype]
    for name, tensor in state.items():
        w = tensor.detach().clone()
        if w.is_floating_point():
            if sampler_cfg.int8_weights and w.dim() == 2:
                scale = w.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127.0
                w = (w / scale).round().clamp(-127, 127) * scale
            if sampler_cfg.weight_noise > 0:
                noise = torch.randn(w.shape, generator=generator, dtype=w.dtype).to(w.device)  # CPU stream
                w = w + sampler_cfg.weight_noise * w.std() * noise
            if dtype in _FP8_MAX:
                scale = w.abs().max().clamp_min(1e-12) / _FP8_MAX[dtype]
                w = (w / scale).to(dtype).to(tensor.dtype) * scale
            elif dtype != torch.float32:
                w = w.to(dtype).to(tensor.dtype)
        out[name] = w
    return out


class Sampler:
    """A rollout engine with its own weights (``version`` = the trainer step they came from)."""

    def __init__(self, model: torch.nn.Module, tokenizer, sampler_cfg: DictConfig, top_k: int):
        check_sampler_config(sampler_cfg)
        self.model = copy.deepcopy(model).eval().to(COMPUTE_DTYPES[sampler_cfg.get("compute_dtype", "float32")])
        key_bits, value_bits = cache_bits(sampler_cfg)
        if key_bits or value_bits:
            quantise_kv_cache(self.model, value_bits, key_bits)
        logits_dtype = COMPUTE_DTYPES[sampler_cfg.get("logits_dtype", "float32")]
        self.logits_dtype = None if logits_dtype == torch.float32 else logits_dtype
        self.tokenizer = tokenizer
        self.cfg = sampler_cfg
        self.top_k = top_k
        self.version = 0

    def sync(self, trainer_model: torch.nn.Module, version: int, generator: torch.Generator) -> None:
        """Load the trainer's weights (through the mismatch) and tag them with ``version``."""
        self.model.load_state_dict(mismatched_state(trainer_model.state_dict(), self.cfg, generator))
        self.version = version

    @torch.no_grad()
    def generate(
        self,
        prompts: list[list[int]],
        n: int,
        max_new_tokens: int,
        temperature: float,
        generator: torch.Generator,
        return_head: bool = True,
    ) -> Rollout:
        """Sample ``n`` responses per prompt at ``temperature`` (full vocabulary: top_p 1, top_k -1).

        ``return_head=False`` skips the top-k head (a dummy head: ids 0, log-probs ``-inf``), only to
        measure what returning the head costs; training needs the head.
        """
        if temperature <= 0:
            raise ValueError(f"sampling temperature must be > 0, got {temperature}")
        tok = self.tokenizer
        out = decode(self.model, prompts, n, max_new_tokens, temperature, generator, tok.eos_token_id,
                     tok.pad_token_id, top_k=self.top_k if return_head else 0, logits_dtype=self.logits_dtype)
        mask = out.alive
        if return_head:
            head_ids, head_lp = out.head_ids, out.head_log_probs
        else:
            k = min(self.top_k, self.model.config.vocab_size)
            head_ids = torch.zeros((*mask.shape, k), dtype=torch.long)
            head_lp = torch.full((*mask.shape, k), float("-inf"))
        return Rollout(
            prompt_ids=[list(p) for p in prompts for _ in range(n)],
            response_ids=out.tokens.cpu(),
            response_mask=mask.float().cpu(),
            log_probs=out.log_probs.cpu(),
            head_ids=head_ids.cpu(),
            head_log_probs=head_lp.cpu(),
            truncated=(~out.finished).cpu(),
        )
