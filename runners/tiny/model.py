"""The tiny Qwen3-architecture policy of the embedded backend.

The architecture is exactly transformers' `Qwen3ForCausalLM` (RMSNorm, rotary positions,
grouped-query attention with q/k norms, SwiGLU MLP), only small: about 0.45M parameters with
the default `conf/model/tiny_qwen3.yaml`. Using the real class keeps the CPU path close to the
GPU path (same forward, same `save_pretrained` layout, loadable by `AutoModelForCausalLM`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig
from transformers import PreTrainedTokenizerBase, Qwen3Config, Qwen3ForCausalLM

from runners.config import CONF_DIR
from runners.config.config_error import ConfigError

# model config keys that become Qwen3Config fields, with the type each must have
_SIZE_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "max_position_embeddings",
)
_ATTN_IMPLEMENTATIONS = ("eager", "sdpa")


def _require_positive_int(model_cfg: DictConfig, key: str) -> int:
    value = model_cfg.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"model.{key} must be a positive integer, got {value!r}")
    return value


def build_qwen3_config(model_cfg: DictConfig, tokenizer: PreTrainedTokenizerBase) -> Qwen3Config:
    """Translate the `model` config group into a `Qwen3Config` (raises ConfigError naming a bad key).

    Sizes come from `model_cfg`; vocabulary size and pad/eos ids from the tokenizer; the bos id
    is the pad token's (`<|endoftext|>`), as in the released Qwen3 configs, because the
    tokenizer itself has no bos token. Sliding-window attention is off.
    """
    sizes = {key: _require_positive_int(model_cfg, key) for key in _SIZE_KEYS}
    if sizes["num_attention_heads"] % sizes["num_key_value_heads"] != 0:
        raise ConfigError(
            "model.num_attention_heads must be a multiple of model.num_key_value_heads, got "
            f"{sizes['num_attention_heads']} and {sizes['num_key_value_heads']}"
        )
    attn = model_cfg.get("attn_implementation", "sdpa")
    if attn not in _ATTN_IMPLEMENTATIONS:
        raise ConfigError(f"model.attn_implementation must be one of {_ATTN_IMPLEMENTATIONS}, got {attn!r}")
    rope_theta = float(model_cfg.get("rope_theta", 10000.0))
    if rope_theta <= 0:
        raise ConfigError(f"model.rope_theta must be > 0, got {rope_theta}")
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        **sizes,
        hidden_act="silu",
        rms_norm_eps=float(model_cfg.get("rms_norm_eps", 1e-6)),
        initializer_range=float(model_cfg.get("initializer_range", 0.02)),
        tie_word_embeddings=bool(model_cfg.get("tie_word_embeddings", True)),
        rope_parameters={"rope_type": "default", "rope_theta": rope_theta},
        attention_bias=False,
        attention_dropout=0.0,
        use_sliding_window=False,
        use_cache=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    config._attn_implementation = attn
    return config


def build_model(model_cfg: DictConfig, tokenizer: PreTrainedTokenizerBase) -> Qwen3ForCausalLM:
    """Build a freshly initialised fp32 `Qwen3ForCausalLM` in eval mode (dropout is 0 anyway).

    Initialisation draws from torch's global RNG: the caller seeds it (`torch.manual_seed`)
    beforehand, and equal seeds give bit-identical weights. `model.attn_implementation`
    selects "sdpa" (default; faster on CPU here and deterministic) or "eager".
    """
    config = build_qwen3_config(model_cfg, tokenizer)
    model = Qwen3ForCausalLM(config)
    model.to(torch.float32)
    model.eval()
    return model


def count_parameters(model: torch.nn.Module) -> int:
    """Number of distinct parameters (a tied embedding/lm-head matrix counts once)."""
    return sum(p.numel() for p in model.parameters())


#: The embedded default's model, which the rehearsal trains too (its sizes are the model's config).
DEFAULT_MODEL_YAML = CONF_DIR / "model" / "tiny_qwen3.yaml"
#: The keys of a model yaml that are its shape (the names of a Hugging Face config.json).
SHAPE_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
              "head_dim", "tie_word_embeddings")


def tiny_model_yaml(cfg: Any) -> Path | None:
    """The yaml of the project's tiny model a config trains (``model.name`` names a file of ``conf/model/``: the
    embedded backend's models, the one the rehearsal trains), or None for any other model, whose shape is in its
    ``config.json``."""
    from omegaconf import OmegaConf

    name = OmegaConf.select(cfg, "model.name", default=None)
    path = DEFAULT_MODEL_YAML.parent / f"{name}.yaml"
    return path if name and path.is_file() else None


def shape_config(model_yaml: Path = DEFAULT_MODEL_YAML) -> dict[str, Any]:
    """The tiny model's shape as config.json keys: the yaml's sizes and the character vocabulary's size."""
    from omegaconf import OmegaConf

    from runners.tiny.tokenizer import build_tokenizer

    tiny = OmegaConf.load(model_yaml)
    return {**{k: tiny[k] for k in SHAPE_KEYS}, "vocab_size": len(build_tokenizer())}
