"""Evaluation of the embedded backend: n samples per held-out problem, per-sample jsonl, mean@n.

Like verl's validation, it samples through the rollout engine (the trainer's current weights
passed through the sampler's numerics mismatch) at ``eval.temperature``. Its random stream is
seeded by (run seed, step), so evaluating never perturbs the training stream and a resumed run
evaluates a step exactly as an uninterrupted one would.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from omegaconf import DictConfig

from runners.local.sampler import Sampler
from runners.local.task import ArithmeticTask, prompt_token_ids
from runners.run_record import atomic_write_text


def val_file(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / "val" / f"step_{step:06d}.jsonl"


def evaluate(sampler: Sampler, task: ArithmeticTask, cfg: DictConfig, step: int, run_dir: Path) -> dict:
    """Write ``val/step_NNNNNN.jsonl`` and return the step's val metrics (contract names)."""
    n = int(cfg.eval.n)
    generator = torch.Generator().manual_seed(int(cfg.seed) * 1_000_003 + step)
    tok = sampler.tokenizer
    cap = int(cfg.rollout.max_response_length)
    lines, metrics = [], {"step": step}
    for data_source, problems in task.eval_sets().items():
        rollout = sampler.generate([prompt_token_ids(tok, p) for p in problems], n, cap,
                                   float(cfg.eval.temperature), generator)
        lengths = rollout.response_mask.sum(-1).long().tolist()
        accs, truncs = [], []
        for row, (ids, length) in enumerate(zip(rollout.response_ids.tolist(), lengths, strict=True)):
            problem = problems[row // n]
            score, acc = task.score(tok.decode(ids[:length], skip_special_tokens=True), problem)
            truncated = bool(rollout.truncated[row])
            lines.append(json.dumps({
                "data_source": data_source, "problem_id": problem.problem_id, "sample": row % n,
                "score": score, "acc": acc, "response_length": length, "truncated": truncated,
            }))
            accs.append(acc)
            truncs.append(truncated)
        metrics[f"val-core/{data_source}/acc/mean@{n}"] = sum(accs) / len(accs)
        metrics[f"val-aux/{data_source}/response_length/mean"] = sum(lengths) / len(lengths)
        metrics[f"val-aux/{data_source}/truncation_ratio"] = sum(truncs) / len(truncs)
    path = val_file(run_dir, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "\n".join(lines) + "\n")
    return metrics
