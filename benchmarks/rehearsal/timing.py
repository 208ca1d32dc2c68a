"""Wall time of the CPU rehearsal, whole and per arm, and where it goes.

    python benchmarks/rehearsal/timing.py [--arms pg,tis] [--rollouts vllm,standin] [--out DIR]

Runs ``python runners/launch.py -m +experiment=rehearsal method=<arms> seed=42`` (once per rollout engine,
``backend.rehearsal_rollout=<rollout>``, one after the other: default vLLM's CPU build, then the stand-in) into a fresh
results root (default: every arm the installed verl can run: PG and TIS on 0.9.1, all four with
score-centering support) and prints the command's wall time, then per arm: the attempt's wall time
(``metrics.json``), its start-up (attempt start -> the first weight sync to the rollout, i.e. Ray,
the workers, the model and the replica are up), its training (first -> last sync) and its end
(last sync -> attempt end: final validation, checkpoint, shutdown). The first and last sync times
come from the rollout's sync log (both engines write it). It also times a bare ``ray.init`` + ``shutdown`` with the
rehearsal's resources: what one shared Ray cluster per sweep could save per arm at most.
Time it alone: two torch processes at once slow each other several-fold on 2 cores.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def default_arms() -> str:
    return "pg,tis,sc,sc_tis"


def ray_start_seconds() -> float:
    code = ("import time, ray; t = time.perf_counter(); ray.init(num_cpus=16, num_gpus=2, include_dashboard=False, "
            "log_to_driver=False); ray.shutdown(); print(time.perf_counter() - t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


def arm_phases(run: Path) -> dict[str, float]:
    import statistics

    from runners.verl_side.backend.launch import INGESTED
    from runners.verl_side.platform import rehearsal as verl_cpu

    record = json.loads((run / "metrics.json").read_text())
    attempt = record["run"]["attempts"][-1]
    started = dt.datetime.fromisoformat(attempt["started"]).timestamp()
    n = len(record["run"]["attempts"])
    syncs = [json.loads(x) for x in (run / "verl" / f"attempt-{n:03d}" / "cpu" / verl_cpu.SYNC_LOG).read_text().splitlines()]
    rows = record["train"]
    step_s = [r["timing_s/step"] for r in rows]
    testing = [r.get("timing_s/testing", 0.0) for r in rows]
    first_step_started = syncs[1]["time"] - step_s[0]  # sync i follows step i
    ingest = [float(line.rsplit(INGESTED, 1)[1].split()[0]) for line in (run / "run.log").read_text().splitlines()
              if INGESTED in line]
    ended = dt.datetime.fromisoformat(attempt["ended"]).timestamp()
    out = {"wall": ended - started, "start-up": syncs[0]["time"] - started,
           "validation": (first_step_started - syncs[0]["time"]) + sum(testing),
           "steps": sum(step_s) - sum(testing), "median step": statistics.median(s - t for s, t in zip(step_s, testing, strict=True)),
           "ingestion": ingest[-1] if ingest else float("nan"), "n_steps": len(rows)}
    out["end"] = ended - syncs[-1]["time"] - out["ingestion"]
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(run / "config.yaml")
    responses = int(cfg.trainer.prompts_per_step) * int(cfg.trainer.n)
    out["tokens per step"] = statistics.mean(r["response_length/mean"] for r in rows) * responses
    return out


def token_output_bytes(tokens: int, k: int) -> tuple[int, int]:
    """Pickled bytes of a rollout server's ``TokenOutput`` of ``tokens`` tokens without and with a top-``k``
    head (the project's layout): what Ray serialises from the server to the agent-loop worker."""
    import pickle

    import numpy as np
    from verl.workers.rollout.replica import TokenOutput

    from runners.verl_side.head import TOKEN_IDS, TOKEN_LOG_PROBS

    plain = TokenOutput(token_ids=list(range(tokens)), log_probs=[-0.5] * tokens, stop_reason="completed",
                        extra_fields={"global_steps": 1})
    head = plain.model_copy(deep=True)
    head.extra_fields[TOKEN_IDS] = np.zeros((tokens, k), np.int32)
    head.extra_fields[TOKEN_LOG_PROBS] = np.zeros((tokens, k), np.float32)
    return len(pickle.dumps(plain)), len(pickle.dumps(head))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arms", default=None, help="comma-separated arms (default: every arm the installed verl runs)")
    ap.add_argument("--rollouts", default="vllm,standin", help="rollout engines, one sweep each (default: vllm,standin)")
    ap.add_argument("--out", type=Path, default=None, help="results root (default: a fresh temporary folder)")
    args = ap.parse_args()
    arms = args.arms or default_arms()
    out = args.out or Path(tempfile.mkdtemp(prefix="rehearsal_time_"))
    totals: dict[str, float] = {}
    for rollout in args.rollouts.split(","):
        root = out / rollout
        cmd = [sys.executable, str(REPO / "runners" / "launch.py"), "-m", "+experiment=rehearsal", f"method={arms}",
               "seed=42", f"results_root={root}", f"backend.rehearsal_rollout={rollout}"]
        print("$", " ".join(cmd), flush=True)
        start = time.perf_counter()
        subprocess.run(cmd, check=True)
        totals[rollout] = time.perf_counter() - start
    columns = ("wall", "start-up", "validation", "steps", "median step", "end", "ingestion")
    for rollout, total in totals.items():
        root = out / rollout
        print(f"\nrehearsal of {arms} with rollout {rollout}: {total:.0f} s in all ({root})")
        print("| arm | " + " | ".join(f"{c} s" for c in columns) + " | steps |")
        print("|---|" + "---:|" * (len(columns) + 1))
        phases = {}
        for arm in arms.split(","):
            p = phases[arm] = arm_phases(root / "rehearsal" / f"{arm}-seed42")
            print(f"| {arm} | " + " | ".join(f"{p[c]:.1f}" for c in columns) + f" | {p['n_steps']} |")
    if len(totals) > 1:
        first, *rest = totals
        print("\nwhole sweep relative to " + first + ": " + ", ".join(f"{r} {totals[r] / totals[first]:.2f}x" for r in rest))
    k = 8  # conf/experiment/rehearsal.yaml method.top_k
    plain, head = token_output_bytes(1000, k)
    per_token = (head - plain) / 1000
    print(f"\nTokenOutput pickled per 1,000 tokens: {plain:,} bytes without a head, {head:,} with the top-{k} head: "
          f"{per_token:.1f} bytes per token for the head ({8 * k} of ids and log-probs; at k = 128: "
          f"{(token_output_bytes(1000, 128)[1] - plain) / 1000:.0f} bytes per token)")
    for arm in ("sc", "sc_tis"):
        if arm in phases and phases[arm]["tokens per step"] == phases[arm]["tokens per step"]:
            tokens = phases[arm]["tokens per step"]
            print(f"{arm}: {tokens:.0f} response tokens per step -> {tokens * per_token / 1e3:.1f} kB of head per step "
                  f"(PG's TokenOutputs: {tokens * plain / 1000 / 1e3:.1f} kB); median step {phases[arm]['median step']:.2f} s "
                  f"against PG's {phases['pg']['median step']:.2f} s" if "pg" in phases else "")
    print(f"bare ray.init + shutdown with the rehearsal's resources: {ray_start_seconds():.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
