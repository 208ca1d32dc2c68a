"""``method.top_k`` against the vocabulary of the verl backend's model, before anything starts.

The sampler's head (an SC arm's ``top_k`` log-probs per token; vLLM's ``max_logprobs``, which
``runners.verl_backend.overrides`` sets to ``method.top_k`` for SC arms, so vLLM's own cap is the head
size and needs no check of its own) cannot hold more ids than the logits have, and the logits have
``vocab_size`` entries (the rows of the embedding and the LM head: Qwen3's 151,669 tokenizer tokens
padded to 151,936). The schema has already checked ``method.top_k >= 1``.

Where the vocabulary comes from (:func:`vocabulary`), first match:

1. the rehearsal (``backend.platform=cpu``): the shipped tiny Qwen3 it trains, whose vocabulary is the
   character tokenizer's (``runners/local/tokenizer.py``), written into ``model.path`` only later;
2. ``model.path`` a local folder: its ``config.json`` (``vocab_size``, or ``text_config.vocab_size``);
3. a hub id whose ``config.json`` is in the local Hugging Face cache (looked up offline);
4. a hub id of :data:`PUBLISHED_VOCABULARY`.

Otherwise the vocabulary is unknown before verl downloads the config, and the check is skipped with
a warning naming the key (an SC arm only: the other arms do not use ``method.top_k`` on verl).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from runners.config_error import ConfigError

log = logging.getLogger(__name__)

#: ``vocab_size`` of the published ``config.json`` of hub checkpoints the project's experiments name, for
#: a machine that has not downloaded them yet. Qwen/Qwen3-4B (``conf/experiment/qwen3_4b_sc_repro.yaml``):
#: 151,936, the size the whole Qwen3 dense family publishes (hf.co/Qwen/Qwen3-4B/blob/main/config.json)
#: and the vocabulary of the project's SC numerics (tests/test_sc_numerics.py, benchmarks/head_gather.py).
PUBLISHED_VOCABULARY: dict[str, int] = {"Qwen/Qwen3-4B": 151_936}


def _config_vocab(config_file: Path) -> int | None:
    """``vocab_size`` of a Hugging Face ``config.json`` (or of its ``text_config``), or None."""
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError):
        return None
    size = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    return size if isinstance(size, int) and size > 0 else None


def _cached_config(repo_id: str) -> Path | None:
    """The ``config.json`` of hub id ``repo_id`` in the local Hugging Face cache, or None (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found: Any = try_to_load_from_cache(repo_id, "config.json")
    except (ImportError, ValueError):  # no huggingface_hub, or not a hub id
        return None
    return Path(found) if isinstance(found, str) else None


def vocabulary(cfg: DictConfig) -> tuple[int, str] | None:
    """``(vocab_size, where it was read)`` of the model a launch of ``cfg`` trains, or None when unknown
    before verl loads the model's config (the module docstring gives the order)."""
    from runners.verl_backend import rehearsal

    if rehearsal.is_rehearsal(cfg):
        from runners.local.tokenizer import build_tokenizer

        return len(build_tokenizer()), "the rehearsal's tiny Qwen3, runners/local/tokenizer.py"
    path = str(cfg.model.path)
    local = Path(path).expanduser()
    candidates = [local / "config.json"] if local.is_dir() else [c for c in [_cached_config(path)] if c]
    for config_file in candidates:
        if (size := _config_vocab(config_file)) is not None:
            return size, str(config_file)
    if path in PUBLISHED_VOCABULARY:
        return PUBLISHED_VOCABULARY[path], f"the published config.json of {path}"
    return None


def check_top_k(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` naming ``method.top_k`` when it exceeds the model's vocabulary; warn
    (SC arms) when the vocabulary cannot be known before the launch."""
    from runners.verl_backend.overrides import is_score_centering

    k = int(cfg.method.top_k)
    found = vocabulary(cfg)
    if found is None:
        if is_score_centering(cfg):
            log.warning("method.top_k=%d is not checked against the vocabulary of model.path=%s: not a local folder, "
                        "not in the Hugging Face cache, not in runners/verl_backend/vocabulary.py's published sizes",
                        k, cfg.model.path)
        return
    size, source = found
    if k > size:
        raise ConfigError(f"method.top_k={k} is larger than the vocabulary of model.path={cfg.model.path} ({size} "
                          f"tokens, {source}): the sampler's head cannot hold more ids than there are; allowed: "
                          f"1 <= method.top_k <= {size}")
