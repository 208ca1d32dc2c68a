"""``method.top_k`` against the vocabulary of the verl backend's model, before anything starts.

The sampler's head (an SC arm's ``top_k`` log-probs per token) cannot hold more ids than the logits have, and
the logits have ``vocab_size`` entries (the rows of the embedding and the LM head: Qwen3's 151,669 tokenizer
tokens padded to 151,936). vLLM's ``max_logprobs`` is ``method.top_k`` on SC arms
(``runners.verl_side.backend.overrides``), so vLLM's own cap needs no check; the schema has checked ``method.top_k >= 1``.
"""

from __future__ import annotations

import logging
from typing import Any

from omegaconf import DictConfig

from ablations.arms import ArmSpec
from runners.config.model_shapes import check_top_k_fits, find_config

log = logging.getLogger(__name__)


def _config_vocab(config: dict[str, Any]) -> int | None:
    """``vocab_size`` of a Hugging Face config dict (or of its ``text_config``), or None."""
    size = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    return size if isinstance(size, int) and size > 0 else None


def vocabulary(cfg: DictConfig) -> tuple[int, str] | None:
    """``(vocab_size, where it was read)`` of the model a launch of ``cfg`` trains: for one of the project's tiny
    models (:func:`runners.tiny.model.tiny_model_yaml`, what the rehearsal trains) the shipped tiny Qwen3's (its character tokenizer's, ``runners/tiny/tokenizer.py``; written into ``model.path`` only later), else
    ``vocab_size`` (or ``text_config.vocab_size``) of the ``config.json`` :func:`runners.config.model_shapes.find_config`
    finds; None when unknown before verl downloads it (then :func:`check_top_k` warns, for an SC arm: the other arms
    do not use ``method.top_k`` on verl)."""
    from runners.tiny.model import tiny_model_yaml

    if tiny_model_yaml(cfg) is not None:  # written into model.path only before the launch
        from runners.tiny.tokenizer import build_tokenizer

        return len(build_tokenizer()), "the rehearsal's tiny Qwen3, runners/tiny/tokenizer.py"
    found = find_config(str(cfg.model.path))
    if found is not None and (size := _config_vocab(found[0])) is not None:
        return size, found[1]
    return None


def check_top_k(cfg: DictConfig) -> None:
    """Refuse ``method.top_k`` above the model's vocabulary (:func:`runners.config.model_shapes.check_top_k_fits`); warn
    (SC arms) when the vocabulary cannot be known before the launch."""
    k = int(cfg.method.top_k)
    found = vocabulary(cfg)
    if found is None:
        if ArmSpec.of(cfg.method).sc:
            log.warning("method.top_k=%d is not checked against the vocabulary of model.path=%s: not a local folder, "
                        "not in the Hugging Face cache, not in runners/config/model_shapes.py's published shapes",
                        k, cfg.model.path)
        return
    size, source = found
    check_top_k_fits(k, size, f"model.path={cfg.model.path}", source)
