"""The base checkpoint a run starts from: the shipped model when there is one, else the local warm start.

Contract of :func:`load_base_model_for`: a config whose warm-start cache key
(`warmstart.cache_key`) equals a shipped model's key (the default's, or another
`assets/<model.name>_base/`, e.g. the scratchpad task's) gets those shipped weights, verified
against their manifest (`base_model.load_shipped`; a mismatch raises `base_model.BaseModelError`,
there is no fallback to training). Any other config (a smaller test model, another warm-start
recipe) gets the cached warm start of `warmstart.warm_start`, trained on first use on this machine.
"""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig
from transformers import PreTrainedTokenizerBase, Qwen3ForCausalLM

from runners.embedded.warmstart import cache_key, load_base_model, warm_start
from runners.tiny.base_model import ASSET_DIR, load_shipped, read_manifest, shipped_dir_for
from runners.tiny.tokenizer import build_tokenizer

logger = logging.getLogger(__name__)


def load_base_model_for(
    cfg: DictConfig, cache_root: Path, progress: bool = True
) -> tuple[Qwen3ForCausalLM, PreTrainedTokenizerBase, str]:
    """(model, tokenizer, source) of the base checkpoint for `cfg` (reads cfg.model and cfg.data).

    `source` is "shipped:<asset dir>" for a config with a shipped model (verified weights) and
    "cache:<entry dir>" for any other (the machine-local warm start).
    """
    key = cache_key(cfg)
    read_manifest(ASSET_DIR)  # the default's manifest must be there whatever the config
    asset_dir = shipped_dir_for(key)
    if asset_dir is not None:
        manifest = read_manifest(asset_dir)
        logger.info("base model: shipped %s (key %s, sha256 %s)", asset_dir, key, manifest["sha256"][:16])
        return load_shipped(cfg.model, asset_dir), build_tokenizer(), f"shipped:{asset_dir}"
    logger.info("base model: key %s is not one of the shipped models; using the local warm-start cache", key)
    path = warm_start(cfg, cache_root, progress=progress)
    from transformers import AutoTokenizer

    return load_base_model(path, cfg.model), AutoTokenizer.from_pretrained(path), f"cache:{path}"
