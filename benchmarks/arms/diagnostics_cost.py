"""Benchmark: what the per-step gradient diagnostics (``backend.gradient_diagnostics``) cost.

Two runs of one arm, diagnostics on and off, identical otherwise (same base model, seed, config).
The same batches (sampled once, by the "on" run) go through ``PolicyTrainer.step`` of both,
interleaved (order alternating each round), each trainer reset to the same state before every
timed step. Reported: median trainer-step seconds of each, the median per-round ratio on / off,
and that ratio as a share of a whole training step (``EmbeddedRun.train_step``, sampling included).

    python benchmarks/arms/diagnostics_cost.py                                  # the embedded default, SC arm
    python benchmarks/arms/diagnostics_cost.py -o +experiment=scratchpad --method pg --threads 1
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.arms.cost import compose_cfg  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="sc")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("-o", "--override", action="append", default=[])
    args = parser.parse_args(argv)

    from runners.embedded.backend import EmbeddedRun
    from runners.embedded.trainer import make_batch

    with tempfile.TemporaryDirectory() as tmp:
        runs = {}
        for flag in ("true", "false"):
            cfg = compose_cfg(args.method, Path(tmp) / flag, args.threads,
                              [*args.override, f"backend.gradient_diagnostics={flag}"])
            runs[flag] = EmbeddedRun(cfg, Path(tmp) / flag / "run", "bench")
            runs[flag].restore()
        source = runs["true"]
        batches, full = [], []
        for _ in range(3):
            t = time.perf_counter()
            groups, _ = source.next_batch()
            batches.append(make_batch(groups, source.step, source.pad_id))
            full.append(time.perf_counter() - t)  # sampling share of a step
        states = {k: (copy.deepcopy(r.trainer.model.state_dict()), copy.deepcopy(r.trainer.optimizer.state_dict()))
                  for k, r in runs.items()}
        times = {k: [] for k in runs}
        for r in range(args.rounds + 1):
            for key in (("true", "false") if r % 2 else ("false", "true")):
                trainer = runs[key].trainer
                trainer.model.load_state_dict(states[key][0])
                trainer.optimizer.load_state_dict(states[key][1])
                t = time.perf_counter()
                trainer.step(batches[r % len(batches)])
                if r:  # round 0 is warm-up
                    times[key].append(time.perf_counter() - t)
    ratios = [a / b for a, b in zip(times["true"], times["false"], strict=True)]
    on, off, gen = statistics.median(times["true"]), statistics.median(times["false"]), statistics.median(full)
    report = {"method": args.method, "overrides": args.override, "threads": args.threads, "rounds": args.rounds,
              "trainer_step_on_s": on, "trainer_step_off_s": off, "ratio_on_off": statistics.median(ratios),
              "ratio_range": [min(ratios), max(ratios)], "sampling_s": gen,
              "whole_step_ratio": (gen + on) / (gen + off)}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
