"""Where one rehearsal arm's start-up goes: every process it starts, when, for how long, and how much CPU it burns.

    python benchmarks/rehearsal/startup_profile.py [--arm pg] [--rollout vllm] [--imports] [--out DIR]

Runs ``python runners/launch.py +experiment=rehearsal method=<arm> seed=42`` into a fresh results root and samples
every process on the machine that starts after the launch (``psutil``, every 0.2 s): its title (Ray names its
workers ``ray::<actor>.<method>``), when it was first and last seen, and its CPU time (user + system), in all and
before the first weight sync to the rollout (the start-up's end, from the rollout's sync log as in
``benchmarks/rehearsal/timing.py``). The table groups processes by title; ``CPU / wall`` of the start-up says how
much of the 2 cores it used (2.0: CPU-bound throughout; near 1: one process at a time, the others waiting).

``--imports`` also sets ``PYTHONPROFILEIMPORTTIME=1`` in the launch's environment (every Python process it starts
inherits it, Ray's workers included) and prints, per process whose stderr Ray kept (its session's
``logs/*.err``), the cumulative import time of the top-level packages that took longest (the profiler's own
overhead inflates them by roughly a tenth). Time it alone: a second torch process slows both several-fold on 2 cores.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
SAMPLE_S = 0.2
IMPORT_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def title(proc: psutil.Process) -> str:
    """A process's group name: Ray's title (``ray::TaskRunner.run`` -> ``ray::TaskRunner``), else its program and
    the first argument that names a module or script."""
    try:
        cmd = proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return "?"
    if not cmd:
        return proc.name()
    if cmd[0].startswith("ray::"):
        return cmd[0].split(".")[0].split(" ")[0]
    words = " ".join(cmd).split()
    program = Path(words[0]).name
    named = next((w for w in words[1:] if w.endswith(".py") or "." in w and not w.startswith("-") and "=" not in w), "")
    if words[1:2] == ["-m"] and len(words) > 2:
        named = "-m " + words[2]
    return f"{program} {Path(named).name if named.endswith('.py') else named}".strip()[:60]


def sample(launch: subprocess.Popen, since: float) -> dict[int, dict]:
    """Every process created after ``since`` while ``launch`` runs: title, first/last seen, CPU-time samples."""
    seen: dict[int, dict] = {}
    while launch.poll() is None:
        now = time.time()
        for proc in psutil.process_iter(["pid", "create_time"]):
            if proc.info["create_time"] is None or proc.info["create_time"] < since:
                continue
            try:
                cpu = proc.cpu_times()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            now_title = title(proc)
            row = seen.setdefault(proc.pid, {"title": now_title, "created": proc.info["create_time"], "cpu": []})
            # a Ray worker starts as setup_worker.py / default_worker.py, names itself ray::<actor> once it holds
            # one, and ray::IDLE between tasks: the first actor's name is kept, a gone process's "?" never
            named = row["title"].startswith("ray::") and row["title"] != "ray::IDLE"
            if now_title != "?" and not named and (now_title.startswith("ray::") or row["title"] in ("?", "python", "python3")):
                row["title"] = now_title
            row["cpu"].append((now, cpu.user + cpu.system))
        time.sleep(SAMPLE_S)
    return seen


def cpu_until(samples: list[tuple[float, float]], until: float) -> float:
    return max((c for t, c in samples if t <= until), default=0.0)


def import_times(session_logs: list[Path], top: int = 6) -> list[tuple[str, float, list[tuple[str, float]]]]:
    """Per stderr file with ``-X importtime`` lines: (file, total seconds of top-level imports, the ``top`` largest)."""
    out = []
    for path in session_logs:
        top_level: dict[str, float] = {}
        for line in path.read_text(errors="replace").splitlines():
            m = IMPORT_LINE.match(line)
            if m and len(m.group(3)) == 1:  # one space of indent: imported at the top level of the process
                top_level[m.group(4)] = top_level.get(m.group(4), 0.0) + int(m.group(2)) / 1e6
        if top_level:
            largest = sorted(top_level.items(), key=lambda kv: -kv[1])[:top]
            out.append((path.name, sum(top_level.values()), largest))
    return sorted(out, key=lambda r: -r[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arm", default="pg")
    ap.add_argument("--rollout", default="vllm", choices=("vllm", "standin"))
    ap.add_argument("--imports", action="store_true", help="profile every process's imports (PYTHONPROFILEIMPORTTIME)")
    ap.add_argument("--out", type=Path, default=None, help="results root (default: a fresh temporary folder)")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="startup_profile_"))
    cmd = [sys.executable, str(REPO / "runners" / "launch.py"), "+experiment=rehearsal", f"method={args.arm}", "seed=42",
           f"results_root={out}", f"backend.rehearsal_rollout={args.rollout}"]
    env = dict(os.environ)
    if args.imports:
        env["PYTHONPROFILEIMPORTTIME"] = "1"
    print("$", " ".join(cmd), flush=True)
    since = time.time() - 0.5
    launch = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen = sample(launch, since)
    wall = time.time() - since
    if launch.returncode != 0:
        print(f"the launch exited with status {launch.returncode}; its log: {out}", file=sys.stderr)
        return 1
    from benchmarks.rehearsal.timing import arm_phases

    run = out / "rehearsal" / f"{args.arm}-seed42"
    phases = arm_phases(run)
    import datetime as dt
    import json

    started = dt.datetime.fromisoformat(json.loads((run / "metrics.json").read_text())["run"]["attempts"][-1]["started"])
    start_up_end = started.timestamp() + phases["start-up"]
    groups: dict[str, dict] = collections.defaultdict(lambda: {"n": 0, "first": 1e18, "last": 0.0, "cpu": 0.0,
                                                               "cpu_startup": 0.0})
    for row in seen.values():
        g = groups[row["title"]]
        g["n"] += 1
        g["first"] = min(g["first"], row["created"] - since)
        g["last"] = max(g["last"], row["cpu"][-1][0] - since)
        g["cpu"] += row["cpu"][-1][1]
        g["cpu_startup"] += cpu_until(row["cpu"], start_up_end)
    startup_s = start_up_end - since
    total_startup_cpu = sum(g["cpu_startup"] for g in groups.values())
    print(f"\n{args.arm} on {args.rollout}: command {wall:.1f} s; attempt start at {started.timestamp() - since:.1f} s, "
          f"start-up ends (first weight sync) at {startup_s:.1f} s; CPU in the start-up {total_startup_cpu:.1f} s "
          f"= {total_startup_cpu / startup_s:.2f} of the cores on average; {len(seen)} processes")
    print("\n| process | count | first start (s) | last seen (s) | CPU in start-up (s) | CPU in all (s) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, g in sorted(groups.items(), key=lambda kv: -kv[1]["cpu_startup"]):
        if g["cpu"] >= 0.2:
            print(f"| {name} | {g['n']} | {g['first']:.1f} | {g['last']:.1f} | {g['cpu_startup']:.1f} | {g['cpu']:.1f} |")
    if args.imports:
        logs = [p for p in Path("/tmp/ray").glob("session_*/logs/*.err") if p.stat().st_mtime >= since]
        logs += [p for p in run.rglob("*.log") if p.stat().st_mtime >= since]
        print("\nimports per process (cumulative seconds of top-level imports; the largest six)")
        for name, total, largest in import_times(logs):
            print(f"- {name}: {total:.1f} s: " + ", ".join(f"{m} {s:.1f}" for m, s in largest))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
