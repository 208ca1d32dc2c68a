"""Benchmark: what each arm costs on the embedded default, relative to PG, and what the sampler's head costs.

One run configuration (the embedded default unless overrides are given: 32 prompts x 5 responses,
k = 8, staleness 4, bf16 sampler), one warm-started base model (results/.cache), four arms.

* **trainer step** — ``PolicyTrainer.step`` of every arm on the *same* batches (sampled once),
  each arm's model and optimizer reset to the same state before every timed step; arms are
  interleaved round-robin (order rotated every round), so a load change on the machine hits
  every arm alike. Reported: median seconds and the median over rounds of the per-round ratio
  arm / PG.
* **full step** — ``EmbeddedRun.train_step`` (sampling with the arm's own sampler, buffer, update,
  weight sync), interleaved the same way; the arms' runs diverge, so this includes their different
  response lengths.
* **sampler head** — ``Sampler.generate`` with and without the top-k head (``return_head``),
  same prompts and random stream, interleaved.
* **peak memory** — one subprocess per arm builds the run and takes ``--memory-steps`` full steps:
  its peak RSS (``ru_maxrss``, set by imports and model loading) and the peak RSS during training
  (kernel high-water mark reset before the steps), with its increase over the RSS before them.

    python benchmarks/arms/cost.py                         # defaults, writes benchmarks/out/arm_cost.json
    python benchmarks/arms/cost.py --rounds 20 --threads 1 --out /tmp/arm_cost.json
    python benchmarks/arms/cost.py -o scenario=fp8         # any Hydra override of the run config
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

ARMS = ("pg", "tis", "sc", "sc_tis")


def compose_cfg(method: str, results_root: Path, threads: int, overrides: list[str]):
    from hydra import compose, initialize_config_dir

    from runners.config import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose(config_name="config", overrides=[
            f"method={method}", f"results_root={results_root}", f"backend.cache_dir={ROOT / 'results' / '.cache'}",
            f"backend.threads={threads}", *overrides,
        ])


def build_run(method: str, tmp: Path, threads: int, overrides: list[str]):
    from runners.embedded.backend import EmbeddedRun
    from runners.run.provenance import config_sha256

    cfg = compose_cfg(method, tmp, threads, overrides)
    run = EmbeddedRun(cfg, tmp / method, config_sha256(method))
    run.restore()  # fresh start: the sampler is synced to version 0
    return run


def _rotate(items: tuple[str, ...], r: int) -> list[str]:
    return list(items[r % len(items):] + items[: r % len(items)])


def _summary(times: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    out = {}
    for arm, ts in times.items():
        ratios = [t / p for t, p in zip(ts, times["pg"], strict=True)]
        out[arm] = {"median_s": statistics.median(ts), "ratio_to_pg": statistics.median(ratios),
                    "ratio_min": min(ratios), "ratio_max": max(ratios), "n": len(ts)}
    return out


def time_trainer(runs: dict, rounds: int, warmup: int) -> dict:
    """Interleaved ``PolicyTrainer.step`` on identical batches, state reset before each step."""
    import copy

    from runners.embedded.trainer import make_batch

    source = runs["pg"]
    batches = []
    for _ in range(4):  # a few real batches from the default schedule (staleness ramps, mixed lengths)
        groups, _ = source.next_batch()
        batches.append(make_batch(groups, source.step, source.pad_id))
    states = {a: (copy.deepcopy(r.trainer.model.state_dict()), copy.deepcopy(r.trainer.optimizer.state_dict()))
              for a, r in runs.items()}
    times = {a: [] for a in runs}
    cpu = {a: [] for a in runs}
    for r in range(warmup + rounds):
        batch = batches[r % len(batches)]
        for arm in _rotate(tuple(runs), r):
            trainer = runs[arm].trainer
            trainer.model.load_state_dict(states[arm][0])
            trainer.optimizer.load_state_dict(states[arm][1])
            t, c = time.perf_counter(), time.process_time()
            trainer.step(batch)
            if r >= warmup:
                times[arm].append(time.perf_counter() - t)
                cpu[arm].append(time.process_time() - c)
    for arm, (model, opt) in states.items():
        runs[arm].trainer.model.load_state_dict(model)
        runs[arm].trainer.optimizer.load_state_dict(opt)
    return {**_summary(times), "cpu_time": _summary(cpu)}


def time_full_step(runs: dict, rounds: int, warmup: int) -> dict:
    times = {a: [] for a in runs}
    cpu = {a: [] for a in runs}
    parts = {a: {"gen": [], "update": []} for a in runs}
    for r in range(warmup + rounds):
        for arm in _rotate(tuple(runs), r):
            t, c = time.perf_counter(), time.process_time()
            row = runs[arm].train_step()
            if r >= warmup:
                times[arm].append(time.perf_counter() - t)
                cpu[arm].append(time.process_time() - c)
                parts[arm]["gen"].append(row["timing_s/gen"])
                parts[arm]["update"].append(row["timing_s/update_actor"])
    out = _summary(times)
    for arm in out:
        out[arm]["median_gen_s"] = statistics.median(parts[arm]["gen"])
        out[arm]["median_update_s"] = statistics.median(parts[arm]["update"])
    out["cpu_time"] = _summary(cpu)
    return out


def time_sampler_head(run, rounds: int, warmup: int) -> dict:
    """``generate`` with and without the top-k head, same prompts and random stream, interleaved."""
    import torch

    from runners.tiny.arithmetic_task import prompt_token_ids

    cfg = run.cfg
    problems = run.task.sample_train(torch.Generator().manual_seed(0), cfg.trainer.prompts_per_step)
    prompts = [prompt_token_ids(run.tokenizer, p) for p in problems]
    times = {"with_head": [], "without_head": []}
    cpu = {"with_head": [], "without_head": []}
    for r in range(warmup + rounds):
        order = [True, False] if r % 2 == 0 else [False, True]
        for head in order:
            gen = torch.Generator().manual_seed(r)
            t, c = time.perf_counter(), time.process_time()
            run.sampler.generate(prompts, cfg.trainer.n, cfg.rollout.max_response_length, cfg.rollout.temperature,
                                 gen, return_head=head)
            if r >= warmup:
                times["with_head" if head else "without_head"].append(time.perf_counter() - t)
                cpu["with_head" if head else "without_head"].append(time.process_time() - c)
    ratios = [a / b for a, b in zip(times["with_head"], times["without_head"], strict=True)]
    cpu_ratios = [a / b for a, b in zip(cpu["with_head"], cpu["without_head"], strict=True)]
    return {"with_head_median_s": statistics.median(times["with_head"]),
            "without_head_median_s": statistics.median(times["without_head"]),
            "ratio_with_to_without": statistics.median(ratios), "ratio_min": min(ratios),
            "ratio_max": max(ratios), "n": len(ratios), "k": run.sampler.top_k,
            "cpu_with_head_median_s": statistics.median(cpu["with_head"]),
            "cpu_without_head_median_s": statistics.median(cpu["without_head"]),
            "cpu_ratio_with_to_without": statistics.median(cpu_ratios)}


def _status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def memory_child(method: str, steps: int, threads: int, overrides: list[str]) -> dict:
    """Peak RSS of the whole process, and the peak during training above the RSS before it.

    Building the run (imports, model load) sets the process's peak; to see what training adds, the
    kernel's high-water mark is reset (``/proc/self/clear_refs`` = 5) after one untimed step and read
    back (``VmHWM``) after ``steps`` more.
    """
    with tempfile.TemporaryDirectory() as tmp:
        run = build_run(method, Path(tmp), threads, overrides)
        run.train_step()
        rss_before = _status_kib("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")
        for _ in range(steps):
            run.train_step()
        hwm = _status_kib("VmHWM")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"peak_rss_mib": peak / 1024, "train_rss_before_mib": rss_before / 1024,
            "train_peak_mib": hwm / 1024, "rss_increase_mib": (hwm - rss_before) / 1024, "steps": steps}


def memory_all(steps: int, threads: int, overrides: list[str]) -> dict:
    out = {}
    for method in ARMS:
        cmd = [sys.executable, __file__, "--memory-child", method, "--memory-steps", str(steps),
               "--threads", str(threads)] + [x for o in overrides for x in ("-o", o)]
        res = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
        out[method] = json.loads(res.stdout.strip().splitlines()[-1])
    for method in ARMS:
        out[method]["peak_ratio_to_pg"] = out[method]["peak_rss_mib"] / out["pg"]["peak_rss_mib"]
        out[method]["train_peak_ratio_to_pg"] = out[method]["train_peak_mib"] / out["pg"]["train_peak_mib"]
    return out


def markdown(result: dict) -> str:
    lines = ["| arm | trainer step (s, median) | / PG | full step (s, median) | / PG | peak RSS (MiB) | / PG "
             "| peak during training (MiB) | / PG | increase over pre-step RSS (MiB) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    tr, fs, mem = result["trainer_step"], result["full_step"], result.get("memory", {})
    for arm in ARMS:
        m = mem.get(arm, {})
        lines.append(
            f"| {arm} | {tr[arm]['median_s']:.3f} | {tr[arm]['ratio_to_pg']:.3f} "
            f"[{tr[arm]['ratio_min']:.2f}-{tr[arm]['ratio_max']:.2f}] | {fs[arm]['median_s']:.3f} | "
            f"{fs[arm]['ratio_to_pg']:.3f} [{fs[arm]['ratio_min']:.2f}-{fs[arm]['ratio_max']:.2f}] | "
            f"{m.get('peak_rss_mib', float('nan')):.0f} | {m.get('peak_ratio_to_pg', float('nan')):.3f} | "
            f"{m.get('train_peak_mib', float('nan')):.0f} | {m.get('train_peak_ratio_to_pg', float('nan')):.3f} | "
            f"{m.get('rss_increase_mib', float('nan')):.1f} |")
    lines.append("")
    lines.append("process CPU time (robust to other load when threads = 1): arm / PG, median over rounds")
    for arm in ARMS:
        tc, fc = tr["cpu_time"][arm], fs["cpu_time"][arm]
        lines.append(f"- {arm}: trainer step {tc['median_s']:.3f} s ({tc['ratio_to_pg']:.3f} x PG "
                     f"[{tc['ratio_min']:.2f}-{tc['ratio_max']:.2f}]), full step {fc['median_s']:.3f} s "
                     f"({fc['ratio_to_pg']:.3f} x PG [{fc['ratio_min']:.2f}-{fc['ratio_max']:.2f}])")
    s = result["sampler_head"]
    lines.append("")
    lines.append(f"sampler generate (32 prompts x 5, k={s['k']}): with head {s['with_head_median_s']:.3f} s, "
                 f"without {s['without_head_median_s']:.3f} s, ratio {s['ratio_with_to_without']:.3f} "
                 f"[{s['ratio_min']:.2f}-{s['ratio_max']:.2f}] over {s['n']} interleaved pairs; CPU time "
                 f"{s['cpu_with_head_median_s']:.3f} vs {s['cpu_without_head_median_s']:.3f} s, ratio "
                 f"{s['cpu_ratio_with_to_without']:.3f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=12, help="timed rounds per measurement (after warm-up)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="torch threads (backend.threads)")
    ap.add_argument("--memory-steps", type=int, default=20)
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("-o", "--override", action="append", default=[], help="Hydra override of the run config")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "arm_cost.json")
    ap.add_argument("--memory-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_child:
        print(json.dumps(memory_child(args.memory_child, args.memory_steps, args.threads, args.override)))
        return
    t0 = time.time()
    result = {"config": {"rounds": args.rounds, "warmup": args.warmup, "threads": args.threads,
                         "overrides": args.override, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}}
    with tempfile.TemporaryDirectory() as tmp:
        runs = {arm: build_run(arm, Path(tmp), args.threads, args.override) for arm in ARMS}
        result["trainer_step"] = time_trainer(runs, args.rounds, args.warmup)
        print("trainer step done", flush=True)
        result["sampler_head"] = time_sampler_head(runs["pg"], 2 * args.rounds, args.warmup)
        print("sampler head done", flush=True)
        result["full_step"] = time_full_step(runs, args.rounds, args.warmup)
        print("full step done", flush=True)
    if not args.skip_memory:
        result["memory"] = memory_all(args.memory_steps, args.threads, args.override)
    result["config"]["wall_s"] = time.time() - t0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(markdown(result))
    print(f"wrote {args.out} ({result['config']['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
