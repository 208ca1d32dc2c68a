"""Verification of an exported Hugging Face model folder (safetensors weights, config, tokenizer).

:func:`verify_export` writes ``<model_dir>/verification.json``: every file with size and sha256;
tensor count, dtypes and parameter count read from the safetensors headers (the ``safetensors``
library); the caller's ``source`` and ``format``; versions; config hash; a load-and-generate check
(transformers, on a GPU where ``torch.cuda.is_available()``, else recorded as skipped). Nothing
here depends on how the folder was produced (verl's merger, for ``runners.verl_side.checkpoints.store``).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from runners.run.provenance import config_sha256, file_sha256, versions
from runners.run.run_record import atomic_write_text, utc_now

VERIFICATION_FILE = "verification.json"
#: Files that would mean training state leaked into the export (PyTorch shards are ``*.pt``).
TRAINING_STATE_FILE = re.compile(r"\.pt$|(^|/)optim")
GENERATE_PROMPT = "1 + 1 ="
GENERATE_TOKENS = 8


class ExportError(RuntimeError):
    """An export or checkpoint operation that cannot proceed; the message says which file or step."""


def safetensors_tensors(path: Path) -> dict[str, tuple[str, list[int]]]:
    """``name -> (dtype, shape)`` of every tensor in a ``.safetensors`` file, from its header only."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy") as f:
            return {name: (f.get_slice(name).get_dtype(), list(f.get_slice(name).get_shape())) for name in f.keys()}
    except (SafetensorError, OSError) as err:
        raise ExportError(f"{path}: not a readable safetensors file ({err})") from err


def tensor_summary(model_dir: Path) -> dict[str, Any]:
    """Tensor count, parameter count and dtypes over every safetensors file of ``model_dir``."""
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise ExportError(f"{model_dir}: no .safetensors files")
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        wanted = set(json.loads(index.read_text())["weight_map"].values())
        if absent := sorted(wanted - {f.name for f in files}):
            raise ExportError(f"{index}: shards {absent} are missing")
    dtypes: dict[str, int] = {}
    count = params = 0
    names: set[str] = set()
    for f in files:
        for name, (dtype, shape) in safetensors_tensors(f).items():
            if name in names:
                raise ExportError(f"{f}: tensor {name} appears in more than one shard")
            names.add(name)
            count += 1
            params += math.prod(int(d) for d in shape)
            dtypes[dtype] = dtypes.get(dtype, 0) + 1
    return {"tensors": count, "parameters": params, "dtypes": dict(sorted(dtypes.items())),
            "all_bf16": set(dtypes) == {"BF16"}, "safetensors_files": [f.name for f in files]}


def load_and_generate(model_dir: Path, device: str) -> dict[str, Any]:
    """Load the export with transformers on ``device`` and greedily generate a few tokens."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).to(device).eval()
        inputs = tokenizer(GENERATE_PROMPT, return_tensors="pt").to(device)
        with torch.no_grad():
            logits = model(**inputs).logits
            out = model.generate(**inputs, max_new_tokens=GENERATE_TOKENS, do_sample=False)
        new = out[0, inputs["input_ids"].shape[1] :]
        return {
            "status": "passed" if bool(torch.isfinite(logits).all()) and new.numel() > 0 else "failed",
            "device": torch.cuda.get_device_name(0) if device.startswith("cuda") else device,
            "prompt": GENERATE_PROMPT,
            "new_token_ids": new.tolist(),
            "output_text": tokenizer.decode(new, skip_special_tokens=True),
            "logits_finite": bool(torch.isfinite(logits).all()),
            "parameter_dtype": str(next(model.parameters()).dtype),
            "num_parameters": int(model.num_parameters()),
        }
    except Exception as err:  # the report records any failure; the caller raises on it
        return {"status": "failed", "device": device, "error": f"{type(err).__name__}: {err}"}


def verify_export(model_dir: Path, *, source: dict[str, Any], config_file: Path, fmt: str,
                  load_check: str = "auto") -> dict:
    """Write ``<model_dir>/verification.json`` for an exported BF16 model and return its content.

    ``load_check`` is ``auto`` (GPU if available, else skipped), ``cpu`` or ``skip``; training state
    files, tensors other than BF16 or a bad ``load_check`` raise :class:`ExportError`.
    """
    model_dir = Path(model_dir)
    files = sorted(p for p in model_dir.rglob("*") if p.is_file() and p.name != VERIFICATION_FILE)
    rel = [p.relative_to(model_dir).as_posix() for p in files]
    if optimizer := [r for r in rel if TRAINING_STATE_FILE.search(r)]:
        raise ExportError(f"{model_dir}: export holds training state files {optimizer}")
    summary = tensor_summary(model_dir)
    if not summary["all_bf16"]:
        raise ExportError(f"{model_dir}: tensors are not all BF16: {summary['dtypes']}")
    if load_check == "skip":
        check = {"status": "skipped", "reason": "not requested (load_check=skip)"}
    elif load_check == "cpu":
        check = load_and_generate(model_dir, "cpu")
    elif load_check == "auto":
        import torch

        check = (load_and_generate(model_dir, "cuda") if torch.cuda.is_available()
                 else {"status": "skipped", "reason": "no GPU: torch.cuda.is_available() is False"})
    else:
        raise ExportError(f"load_check must be auto, cpu or skip, got {load_check!r}")
    if check["status"] == "passed" and check["num_parameters"] != summary["parameters"]:
        check["status"] = "failed"
        check["error"] = f"loaded model has {check['num_parameters']} parameters, headers {summary['parameters']}"
    report = {"created": utc_now(), "source": source, "format": fmt,
              "files": [{"path": r, "bytes": p.stat().st_size, "sha256": file_sha256(p)} for r, p in zip(rel, files, strict=True)],
              **summary, "optimizer_state": False, "versions": versions(),
              "config_sha256": config_sha256(config_file.read_text()) if config_file.is_file() else None,
              "load_and_generate": check}
    atomic_write_text(model_dir / VERIFICATION_FILE, json.dumps(report, indent=1) + "\n")
    return report
