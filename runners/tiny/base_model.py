"""The shipped base model: one warm-start checkpoint of the default model config, for every machine.

The supervised warm start (`warmstart.py`) is deterministic on one machine but not across CPUs
(other kernels, other reduction orders: the same recipe gave step-0 mean@8 of 0.49 on one CPU and
0.12 under emulated older kernels). So the base model of the default config is trained once and
shipped in the package, in `runners/tiny/assets/<name>/`:

* `model.safetensors`: the fp32 weights (`safetensors.torch.save_model`; the tied lm-head is
  stored once);
* `base_model.json`, the manifest: `key` (the warm-start cache key of the config it was trained
  from, `warmstart.cache_key`), `recipe` (that model and data config, warm-start settings
  included), `code_version` (the project's git commit when it was written), the torch and
  transformers versions and thread count used, the training summary, and `sha256` of the weights
  file.

Which base model a run gets (shipped or the machine-local warm start) is decided by
`base_checkpoint.load_base_model_for`. Loading shipped weights checks their sha256 against the
manifest (a mismatch, or a missing file, raises :class:`BaseModelError` naming the file and the
regeneration command; there is no fallback to training).

Regenerate the shipped file (after changing the default model/data config or the warm-start
procedure; the test suite fails until one does) with one command:

    python -m runners.embedded.warmstart --ship
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from safetensors.torch import load_model, save_model
from transformers import Qwen3ForCausalLM

from runners.run.provenance import file_sha256
from runners.tiny.model import build_model, count_parameters
from runners.tiny.tokenizer import build_tokenizer

logger = logging.getLogger(__name__)

ASSETS_ROOT = Path(__file__).resolve().parent / "assets"
ASSET_DIR = ASSETS_ROOT / "tiny_qwen3_base"  # the embedded default's; other shipped models sit next to it
WEIGHTS = "model.safetensors"
MANIFEST = "base_model.json"
MANIFEST_FORMAT = 1
REGENERATE = "python -m runners.embedded.warmstart --ship"


class BaseModelError(RuntimeError):
    """The shipped base model is missing, incomplete or does not match its manifest."""


def read_manifest(asset_dir: Path = ASSET_DIR) -> dict[str, Any]:
    """The manifest of the shipped base model; raises BaseModelError when it is missing or malformed."""
    path = Path(asset_dir) / MANIFEST
    if not path.is_file():
        raise BaseModelError(f"shipped base model manifest {path} is missing; regenerate it with `{REGENERATE}`")
    manifest = json.loads(path.read_text())
    for key in ("format", "key", "sha256", "recipe"):
        if key not in manifest:
            raise BaseModelError(f"{path} has no {key!r} field; regenerate it with `{REGENERATE}`")
    if manifest["format"] != MANIFEST_FORMAT:
        raise BaseModelError(f"{path} has format {manifest['format']}, this code reads {MANIFEST_FORMAT}")
    return manifest


def verify(asset_dir: Path = ASSET_DIR) -> dict[str, Any]:
    """Check the weights file against the manifest's sha256; return the manifest (BaseModelError if not)."""
    manifest = read_manifest(asset_dir)
    weights = Path(asset_dir) / WEIGHTS
    if not weights.is_file():
        raise BaseModelError(f"shipped base model weights {weights} are missing; regenerate with `{REGENERATE}`")
    actual = file_sha256(weights)
    if actual != manifest["sha256"]:
        raise BaseModelError(
            f"shipped base model {weights} has sha256 {actual}, but {Path(asset_dir) / MANIFEST} records "
            f"{manifest['sha256']}: the file was modified or is incomplete (a Git LFS pointer?). Restore it "
            f"(`git checkout -- {weights.parent}`) or regenerate both with `{REGENERATE}`"
        )
    return manifest


def load_shipped(model_cfg: DictConfig, asset_dir: Path = ASSET_DIR) -> Qwen3ForCausalLM:
    """The verified shipped weights in a model built from `model_cfg` (fp32, eval mode)."""
    verify(asset_dir)
    model = build_model(model_cfg, build_tokenizer())
    missing, unexpected = load_model(model, Path(asset_dir) / WEIGHTS, strict=True)
    if missing or unexpected:  # strict=True raises first; kept as a guard on the library's contract
        raise BaseModelError(f"shipped weights do not fit the model: missing {missing}, unexpected {unexpected}")
    model.eval()
    return model


def shipped_dir_for(key: str, root: Path = ASSETS_ROOT) -> Path | None:
    """The asset folder under ``root`` whose manifest records cache key ``key``, or None."""
    for manifest in sorted(Path(root).glob(f"*/{MANIFEST}")):
        if json.loads(manifest.read_text()).get("key") == key:
            return manifest.parent
    return None


def asset_dir_for(cfg: DictConfig) -> Path:
    """Where ``--ship`` writes the base model of ``cfg``: ``assets/<model.name>_base/``."""
    return ASSETS_ROOT / f"{cfg.model.name}_base"


def write_shipped(
    model: Qwen3ForCausalLM, cfg: DictConfig, stats: dict[str, Any], key: str, asset_dir: Path = ASSET_DIR
) -> dict[str, Any]:
    """Write `model.safetensors` and (last) `base_model.json` into `asset_dir`; return the manifest.

    `key` is the warm-start cache key of `cfg` (`warmstart.cache_key`), recorded in both files.
    """
    import transformers

    from runners.run.provenance import project_version

    asset_dir = Path(asset_dir)
    asset_dir.mkdir(parents=True, exist_ok=True)
    weights = asset_dir / WEIGHTS
    save_model(model, str(weights), metadata={"format": "pt", "key": key})
    weights.chmod(0o644)  # safetensors writes it private; the asset is meant to be read by all
    manifest = {
        "format": MANIFEST_FORMAT,
        "key": key,
        "sha256": file_sha256(weights),
        "n_parameters": count_parameters(model),
        "recipe": {
            "model": OmegaConf.to_container(cfg.model, resolve=True),
            "data": OmegaConf.to_container(cfg.data, resolve=True),
            "procedure": "runners/embedded/warmstart.py train_warm_start (supervised, teacher-forced)",
        },
        "code_version": project_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "training": {k: v for k, v in stats.items() if k != "loss_curve"},
        "regenerate": REGENERATE,
    }
    (asset_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
