"""The shape of a Qwen3-style decoder (what the capacity plan and the launch checks need of a model), where it is
read, and the one check of ``method.top_k`` against a model's vocabulary (:func:`check_top_k_fits`).

Below the capacity plan (``runners.config``, floor 2 of docs/architecture.md), so that a check that needs a model's
sizes (the verl backend's vocabulary) does not import the planner.

:func:`find_config` looks for the model's ``config.json``, first match: ``model.path`` a local folder;
a hub id whose ``config.json`` is in the local Hugging Face cache (looked up offline); a hub id of
:data:`PUBLISHED` (the published ``config.json`` facts of the Qwen3 dense sizes a user would pick).

Parameter count (no biases, as Qwen3): per layer ``h q + 2 h kv + q h`` (attention projections, ``q =
attention_heads x head_dim``, ``kv = kv_heads x head_dim``), ``3 h I`` (gated MLP), ``2 h + 2 head_dim`` (the two
RMSNorms and Qwen3's q/k norms); plus the embedding ``V h``, a separate LM head ``V h`` when the
embeddings are not tied, and the final norm ``h``. Qwen3-4B: 4,022,468,096 (the count of torch's meta
model, docs/capacity.md).

A ``config.json`` that is there but cannot serve is a :class:`ModelConfigError` (a config error, exit status 2
where a launcher or the capacity CLI meets it), named for what it is: a local folder without ``config.json``,
a file that cannot be read, a truncated or malformed file (the JSON error and its position), JSON that is not
an object, a size that is missing, not an integer (``"2560"``) or not positive.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from runners.config.config_error import ConfigError

#: The sizes a decoder's ``config.json`` must give; ``num_key_value_heads`` and ``head_dim`` may be absent.
REQUIRED_SIZES = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
OPTIONAL_SIZES = ("num_key_value_heads", "head_dim")


class ModelConfigError(ConfigError):
    """A model's ``config.json`` that is missing, unreadable, malformed or holds a size that cannot be one."""


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """The sizes of a Qwen3-style causal LM (``config.json`` names)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    tie_word_embeddings: bool

    @classmethod
    def from_config(cls, config: dict[str, Any], source: str = "the model config") -> ModelShape:
        """From a Hugging Face ``config.json`` dict (``text_config`` where the sizes are nested there);
        ``head_dim`` defaults to ``hidden_size / num_attention_heads``, ``num_key_value_heads`` to ``num_attention_heads``.
        :class:`ModelConfigError` names each size that is missing, not an integer or not positive (``source``:
        where the dict was read, for the message)."""
        if "hidden_size" not in config and isinstance(config.get("text_config"), dict):
            config = {**config["text_config"], "tie_word_embeddings": config.get("tie_word_embeddings", False)}
        missing = [k for k in REQUIRED_SIZES if config.get(k) is None]
        if missing:
            raise ModelConfigError(f"{source} lacks {', '.join(missing)}: not a decoder the capacity plan knows")
        bad = [f"{k}={config[k]!r}" for k in (*REQUIRED_SIZES, *OPTIONAL_SIZES) if config.get(k) is not None
               and (isinstance(config[k], bool) or not isinstance(config[k], int) or config[k] <= 0)]
        if bad:
            raise ModelConfigError(f"{source}: {', '.join(bad)}: each size must be an integer > 0")
        attention_heads = int(config["num_attention_heads"])
        if config.get("head_dim") is None and config["hidden_size"] % attention_heads:
            raise ModelConfigError(f"{source}: hidden_size={config['hidden_size']} is not a multiple of "
                                   f"num_attention_heads={attention_heads} and no head_dim is given")
        return cls(vocab_size=int(config["vocab_size"]), hidden_size=int(config["hidden_size"]),
                   intermediate_size=int(config["intermediate_size"]),
                   num_hidden_layers=int(config["num_hidden_layers"]), num_attention_heads=attention_heads,
                   num_key_value_heads=int(config.get("num_key_value_heads") or attention_heads),
                   head_dim=int(config.get("head_dim") or config["hidden_size"] // attention_heads),
                   tie_word_embeddings=bool(config.get("tie_word_embeddings", False)))

    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @property
    def layer_parameters(self) -> int:
        h, q, kv = self.hidden_size, self.q_dim, self.kv_dim
        return h * q + 2 * h * kv + q * h + 3 * h * self.intermediate_size + 2 * h + 2 * self.head_dim

    @property
    def embedding_parameters(self) -> int:
        """The input embedding; the LM head has as many again when not tied."""
        return self.vocab_size * self.hidden_size

    @property
    def parameters(self) -> int:
        lm_head = 0 if self.tie_word_embeddings else self.embedding_parameters
        return self.embedding_parameters + lm_head + self.num_hidden_layers * self.layer_parameters + self.hidden_size

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_QWEN3 = {"vocab_size": 151_936, "num_key_value_heads": 8, "head_dim": 128}
#: Published ``config.json`` sizes of the Qwen3 dense models (hf.co/Qwen/<name>/blob/main/config.json).
PUBLISHED: dict[str, ModelShape] = {
    "Qwen/Qwen3-0.6B": ModelShape(**_QWEN3, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                                  num_attention_heads=16, tie_word_embeddings=True),
    "Qwen/Qwen3-1.7B": ModelShape(**_QWEN3, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                                  num_attention_heads=16, tie_word_embeddings=True),
    "Qwen/Qwen3-4B": ModelShape(**_QWEN3, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                                num_attention_heads=32, tie_word_embeddings=True),
    "Qwen/Qwen3-8B": ModelShape(**_QWEN3, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                                num_attention_heads=32, tie_word_embeddings=False),
}


def read_config(config_file: Path) -> dict[str, Any]:
    """A ``config.json`` as a dict; :class:`ModelConfigError` naming the file and what is wrong with it."""
    try:
        text = Path(config_file).read_text()
    except FileNotFoundError:
        raise ModelConfigError(f"{config_file} is missing: a model folder needs its config.json") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ModelConfigError(f"{config_file} cannot be read ({err})") from None
    if not text.strip():
        raise ModelConfigError(f"{config_file} is empty: copy the model's config.json again")
    try:
        config = json.loads(text)
    except ValueError as err:  # json.JSONDecodeError: truncated or malformed
        raise ModelConfigError(f"{config_file} is not valid JSON (truncated or malformed: {err}); copy the "
                               "model's config.json again") from None
    if not isinstance(config, dict):
        raise ModelConfigError(f"{config_file} holds a JSON {type(config).__name__}, not an object of sizes")
    return config


def cached_config(repo_id: str) -> Path | None:
    """The ``config.json`` of hub id ``repo_id`` in the local Hugging Face cache, or None (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found: Any = try_to_load_from_cache(repo_id, "config.json")
    except (ImportError, ValueError):  # no huggingface_hub, or not a hub id
        return None
    return Path(found) if isinstance(found, str) else None


def find_config(path: str) -> tuple[dict[str, Any], str] | None:
    """``(config dict, where it was read)`` of the model at ``path`` (order: the module docstring), or None
    where ``path`` is no local folder and neither in the cache nor published. A local folder without a
    readable ``config.json``, or a cached file that cannot be read, is a :class:`ModelConfigError`."""
    if not path.strip():  # not a path (Path("") is the current folder): the launch checks name model.path
        return None
    local = Path(path).expanduser()
    if local.is_dir():
        return read_config(local / "config.json"), str(local / "config.json")
    if (cached := cached_config(path)) is not None:
        return read_config(cached), str(cached)
    if path in PUBLISHED:
        return PUBLISHED[path].as_dict(), f"the published config.json of {path}"
    return None


def shape_of(path: str) -> tuple[ModelShape, str] | None:
    """``(shape, where it was read)`` of the model at ``path``, or None when no config is found;
    :class:`ModelConfigError` for a config that is found but cannot give a shape."""
    found = find_config(path)
    if found is None:
        return None
    config, source = found
    return ModelShape.from_config(config, source), source


def check_top_k_fits(top_k: int, vocab_size: int, model: str, source: str) -> None:
    """Raise :class:`ConfigError` when ``method.top_k`` exceeds the model's vocabulary (``vocab_size`` ids, read from
    ``source``; ``model`` names the model as the config does, ``model=tiny_qwen3`` or ``model.path=...``): the
    sampler's head holds ``top_k`` ids of the logits, which have ``vocab_size`` entries. Both backends call it with
    their model's vocabulary; the schema has checked ``method.top_k >= 1``."""
    if top_k > vocab_size:
        raise ConfigError(f"method.top_k={top_k} is larger than the vocabulary of {model} ({vocab_size} tokens, "
                          f"{source}): the sampler's head cannot hold more ids than there are; allowed: "
                          f"1 <= method.top_k <= {vocab_size}")
