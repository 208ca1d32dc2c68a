"""Wall time of the CPU rehearsal, whole and per arm, and where it goes.

    python benchmarks/rehearsal_time.py [--arms pg,tis] [--out DIR]

Runs ``python runners/launch.py -m +experiment=rehearsal method=<arms> seed=42`` into a fresh
results root (default: every arm the installed verl can run: PG and TIS on 0.9.1, all four with
score-centering support) and prints the command's wall time, then per arm: the attempt's wall time
(``metrics.json``), its start-up (attempt start -> the first weight sync to the rollout, i.e. Ray,
the workers, the model and the replica are up), its training (first -> last sync) and its end
(last sync -> attempt end: final validation, checkpoint, shutdown). The first and last sync times
come from the CPU rollout's sync log. It also times a bare ``ray.init`` + ``shutdown`` with the
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def default_arms() -> str:
    from runners.verl_backend import revisions

    return "pg,tis,sc,sc_tis" if revisions.supported() else "pg,tis"


def ray_start_seconds() -> float:
    code = ("import time, ray; t = time.perf_counter(); ray.init(num_cpus=16, num_gpus=2, include_dashboard=False, "
            "log_to_driver=False); ray.shutdown(); print(time.perf_counter() - t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


def arm_phases(run: Path) -> dict[str, float]:
    from runners import verl_cpu

    record = json.loads((run / "metrics.json").read_text())
    attempt = record["run"]["attempts"][-1]
    started = dt.datetime.fromisoformat(attempt["started"]).timestamp()
    ended = dt.datetime.fromisoformat(attempt["ended"]).timestamp()
    n = len(record["run"]["attempts"])
    syncs = [json.loads(x) for x in (run / "verl" / f"attempt-{n:03d}" / "cpu" / verl_cpu.SYNC_LOG).read_text().splitlines()]
    first, last = syncs[0]["time"], syncs[-1]["time"]
    return {"wall": ended - started, "start-up": first - started, "training": last - first, "end": ended - last,
            "steps": len(record["train"])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arms", default=None, help="comma-separated arms (default: every arm the installed verl runs)")
    ap.add_argument("--out", type=Path, default=None, help="results root (default: a fresh temporary folder)")
    args = ap.parse_args()
    arms = args.arms or default_arms()
    root = args.out or Path(tempfile.mkdtemp(prefix="rehearsal_time_"))
    cmd = [sys.executable, str(REPO / "runners" / "launch.py"), "-m", "+experiment=rehearsal", f"method={arms}",
           "seed=42", f"results_root={root}"]
    print("$", " ".join(cmd), flush=True)
    start = time.perf_counter()
    subprocess.run(cmd, check=True)
    total = time.perf_counter() - start
    print(f"\nrehearsal of {arms}: {total:.0f} s in all ({root})")
    print(f"{'arm':8} {'wall s':>7} {'start-up s':>11} {'training s':>11} {'end s':>6} {'steps':>6}")
    for arm in arms.split(","):
        p = arm_phases(root / "rehearsal" / f"{arm}-seed42")
        print(f"{arm:8} {p['wall']:7.0f} {p['start-up']:11.0f} {p['training']:11.0f} {p['end']:6.0f} {p['steps']:6d}")
    print(f"bare ray.init + shutdown with the rehearsal's resources: {ray_start_seconds():.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
