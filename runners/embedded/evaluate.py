"""Evaluation of the embedded backend: n samples per held-out problem, per-sample jsonl, mean@n.

``eval.numerics`` says with which numerics it samples the trainer's current weights, at
``eval.temperature``:

* ``clean`` (the default): every numerics knob of ``backend.sampler`` at its identity value
  (:func:`runners.embedded.sampler.clean_sampler_config`: fp32 weights and forward, no quantisation, no
  noise), i.e. the trainer's own policy. What a run is scored on is then what it learned, whatever
  its scenario, and runs of different scenarios (the on-policy control included) are scored alike,
  as the score-centering paper evaluates (a clean sampler, no quantisation);
* ``scenario``: through the scenario's sampler numerics, as verl's validation samples through its
  rollout engine (which runs of ``docs/drift_study.md`` were scored so: its "What changed in the harness").

Either way the evaluation has its own sampler and random streams, so it never changes a training
trajectory: two runs that differ only in ``eval.numerics`` train identically and differ in their
evaluation rows. Its random stream is seeded by (run seed, step), so evaluating never perturbs the
training stream and a resumed run evaluates a step exactly as an uninterrupted one would.

``eval.repeats`` = R >= 1 (default 1): the same checkpoint is evaluated R times. Repeat 0 is
``val/step_NNNNNN.jsonl`` with the stream above (so R = 1 is the run without repeats, byte for
byte) and alone feeds ``metrics.json``; repeat r >= 1 is ``val/repeat_RR/step_NNNNNN.jsonl``
(run contract, :mod:`runners.run.run_contract`) with a stream seeded by ``SeedSequence([seed, step, r])``.
The analysis turns the repeats into a test-retest band (``analysis.tables.retest_table``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig

from runners.config.config_error import ConfigError
from runners.embedded.sampler import Sampler, clean_sampler_config
from runners.run.run_contract import sample_line, val_metrics, val_path
from runners.run.run_record import atomic_write_text
from runners.tiny.arithmetic_task import SeededTask, prompt_token_ids

#: ``val/step_NNNNNN.jsonl`` (repeat 0) or ``val/repeat_RR/step_NNNNNN.jsonl`` (repeat r >= 1).
val_file = val_path


#: Allowed values of ``eval.numerics`` (the schema's ``EvalConfig`` rule says the same).
EVAL_NUMERICS = ("clean", "scenario")


def eval_sampler_config(cfg: DictConfig) -> DictConfig:
    """The ``backend.sampler`` config the evaluation samples with (``eval.numerics``, module docstring)."""
    numerics = cfg.eval.numerics
    if numerics not in EVAL_NUMERICS:
        raise ConfigError(f"eval.numerics={numerics!r}; allowed: {', '.join(EVAL_NUMERICS)}")
    return clean_sampler_config(cfg.backend.sampler) if numerics == "clean" else cfg.backend.sampler


def eval_repeats(cfg: DictConfig) -> int:
    """``eval.repeats`` (default 1); raises ConfigError naming the key unless an integer >= 1."""
    r = cfg.eval.get("repeats", 1)
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise ConfigError(f"eval.repeats must be an integer >= 1 (evaluations of each checkpoint), got {r!r}")
    return r


def eval_generator(seed: int, step: int, repeat: int) -> torch.Generator:
    """The sampling stream of one evaluation: repeat 0 as before repeats existed, others independent."""
    if repeat == 0:
        return torch.Generator().manual_seed(int(seed) * 1_000_003 + step)
    state = np.random.SeedSequence([int(seed), int(step), int(repeat)]).generate_state(1, dtype=np.uint64)[0]
    return torch.Generator().manual_seed(int(state))


def _evaluate_once(sampler: Sampler, task: SeededTask, cfg: DictConfig, step: int,
                   generator: torch.Generator) -> tuple[list[str], dict]:
    n = int(cfg.eval.n)
    tok = sampler.tokenizer
    cap = int(cfg.rollout.max_response_length)
    by_set: dict[str, list[dict]] = {}
    for data_source, problems in task.eval_sets().items():
        rollout = sampler.generate([prompt_token_ids(tok, p) for p in problems], n, cap,
                                   float(cfg.eval.temperature), generator)
        lengths = rollout.response_mask.sum(-1).long().tolist()
        samples = by_set[data_source] = []
        for row, (ids, length) in enumerate(zip(rollout.response_ids.tolist(), lengths, strict=True)):
            problem = problems[row // n]
            score, acc = task.score(tok.decode(ids[:length], skip_special_tokens=True), problem)
            samples.append({"data_source": data_source, "problem_id": problem.problem_id, "sample": row % n,
                            "score": score, "acc": acc, "response_length": length,
                            "truncated": bool(rollout.truncated[row])})
    lines = [sample_line(x) for samples in by_set.values() for x in samples]
    return lines, {"step": step, **val_metrics(by_set, n)}


def evaluate(sampler: Sampler, task: SeededTask, cfg: DictConfig, step: int, run_dir: Path) -> dict:
    """Write the step's val file(s), one per repeat, and return repeat 0's val metrics (contract names)."""
    metrics: dict = {}
    for repeat in range(eval_repeats(cfg)):
        lines, m = _evaluate_once(sampler, task, cfg, step, eval_generator(cfg.seed, step, repeat))
        path = val_file(run_dir, step, repeat)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, "\n".join(lines) + "\n")
        if repeat == 0:
            metrics = m
    return metrics
