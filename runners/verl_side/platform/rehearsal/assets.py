"""What the rehearsal trains on, written before its launch (:func:`prepare_assets`), once per results root.

The project's shipped tiny Qwen3 as a Hugging Face folder with its tokenizer, and generated arithmetic problems
written by ``math_data``'s own writers in the DAPO/AIME parquet schema.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from runners.verl_side.platform.rehearsal.limits import MODEL_YAML, read_yaml, task_config

#: The manifest beside each written folder: the request it was written from.
MANIFEST = "rehearsal_assets.json"


def _assets_request(cfg: DictConfig) -> dict[str, Any]:
    from runners.tiny.base_model import read_manifest

    return {"model": {"path": str(Path(str(cfg.model.path)).expanduser().resolve()),
                      "shipped_sha256": read_manifest()["sha256"]},
            "data": {"dir": str(Path(str(cfg.data.dir)).expanduser().resolve()),
                     "train": {"file": str(cfg.data.train.file), "rows": int(cfg.data.train.rows)},
                     "eval_sets": [{"name": str(s.name), "file": str(s.file), "size": int(s.size)}
                                   for s in cfg.data.eval_sets],
                     "task": OmegaConf.to_container(task_config(cfg))}}


def _replace_dir(staged: Path, final: Path) -> None:
    if final.exists():
        shutil.rmtree(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staged, final)


def write_model(folder: Path) -> None:
    """The shipped tiny Qwen3 (hash-verified) as an HF folder with its tokenizer and eos."""
    from runners.tiny.base_model import load_shipped
    from runners.tiny.tokenizer import build_tokenizer

    tokenizer = build_tokenizer()
    model = load_shipped(read_yaml(MODEL_YAML))
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def write_data(cfg: DictConfig, folder: Path) -> None:
    """Generated arithmetic in the DAPO-Math (train) and AIME (eval) parquet schema, through
    ``math_data``'s own row builders and writer (the same reports beside each file)."""
    import numpy as np

    from math_data.aime import prepare_eval
    from math_data.dapo import prepare_train
    from math_data.sources import write_parquet
    from runners.tiny.task_by_name import build_task
    from runners.tiny.tokenizer import build_tokenizer

    tokenizer = build_tokenizer()
    task = build_task(task_config(cfg))
    limit = int(cfg.rollout.max_prompt_length)
    problems = task.sample_train(np.random.default_rng(int(task.seed)), int(cfg.data.train.rows))
    source = [{"source_prompt": p.messages, "prompt": p.messages[-1]["content"], "ability": "MATH",
               "reward_model": {"style": "rule", "ground_truth": p.answer}, "extra_info": {"index": p.problem_id}}
              for p in problems]
    rows, report = prepare_train(source, tokenizer, max_prompt_length=limit)
    write_parquet(rows, folder / str(cfg.data.train.file))
    reports = {"train": report}
    for spec, (name, held_out) in zip(cfg.data.eval_sets, task.eval_sets().items(), strict=True):
        source = [{"id": p.problem_id, "problem": p.messages[-1]["content"], "answer": p.answer} for p in held_out]
        rows, report = prepare_eval(source, name, tokenizer, max_prompt_length=limit, expected_count=int(spec.size),
                                    instruction=False)
        write_parquet(rows, folder / str(spec.file))
        reports[name] = report
    (folder / "prep_report.json").write_text(json.dumps(reports, indent=1, default=str) + "\n")


def prepare_assets(cfg: DictConfig) -> dict[str, Any]:
    """Write the rehearsal's model folder (``model.path``) and parquet files (``data.dir``) unless
    the manifest beside them says they were written from the same request; return the request."""
    request = _assets_request(cfg)
    model, data = Path(request["model"]["path"]), Path(request["data"]["dir"])
    for folder, part, writer in ((model, "model", write_model), (data, "data", lambda f: write_data(cfg, f))):
        manifest = folder / MANIFEST
        if manifest.exists() and json.loads(manifest.read_text()) == request[part]:
            continue
        folder.parent.mkdir(parents=True, exist_ok=True)
        staged = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
        try:
            writer(staged)
            (staged / MANIFEST).write_text(json.dumps(request[part], indent=1) + "\n")
            _replace_dir(staged, folder)
        finally:
            shutil.rmtree(staged, ignore_errors=True)
    return request
