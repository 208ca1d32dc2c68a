"""Device check: what the project's trainer math costs on one GPU, with torch and transformers only.

    bash benchmarks/device_check/device_check.sh             # the borrowed GPU machine: writes to $OUT
    python3 -m benchmarks.device_check --out DIR             # any CUDA machine, from the repository root
    python3 -m benchmarks.device_check --cpu-small --out DIR # the same code, small sizes, CPU, seconds

Parts, each with its own time budget inside the whole check's (``--budget-s``), run in order and
written to ``DIR/device_check.json`` and ``DIR/device_check.md`` after each one (docs/device_check.md):

1. ``head_cost`` (:mod:`.head`): SC and SC+TIS against PG at Qwen3-4B size, time and peak memory;
2. ``numerics`` (:mod:`.numerics`): the correction in fp32 against fp64 at that size;
3. ``model_memory`` (:mod:`.model`): measured trainer memory of Qwen3 models from their configs;
4. ``capacity_plan`` (:mod:`.capacity`): the capacity plan's terms against those, where it exists.

A part that cannot run (no CUDA, an estimate above ``--limit-gib``, out of memory, its budget spent)
is recorded with the reason and the next part runs. Exit status: 0 when every part ran or was
skipped for a stated reason, 1 when a part failed with an unexpected error (its traceback is in the
JSON), 3 when no CUDA device is visible without ``--cpu-small`` (the GPU parts are skipped, so nothing was
checked: a machine whose GPU is hidden does not pass). Imports: the standard library, torch, transformers (in ``.model``), and the project's
torch-only modules; never verl, Ray, vLLM, Hydra or OmegaConf (``meta.loaded_forbidden`` lists any
that were loaded anyway).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

from . import capacity as device_capacity
from . import head as device_head
from . import model as device_model
from . import numerics as device_numerics
from . import report as device_report
from .measure import GIB, Budget, PartSkipped, free_memory, is_oom

FORBIDDEN = ("verl", "ray", "vllm", "hydra", "omegaconf")
#: The exit status of a GPU check on a machine where no CUDA device is visible (every GPU part skipped).
NO_DEVICE = 3

#: Sizes and per-part budgets (seconds). "gpu": Qwen3-4B's trainer micro-batch; "cpu-small": seconds on a CPU
#: (its bf16 logits, 1024 x 20,000 = 41 MB, stay above glibc's 32 MiB mmap threshold, so the peak-RSS
#: meter sees each gradient's allocation).
SIZES = {
    "gpu": {
        "head_cost": {"tokens": 16_384, "vocab": 151_936, "k": 128, "chunk_rows": 1024, "warmup": 3, "repeats": 10},
        "numerics": {"rows": 16_384, "vocab": 151_936, "k": 128, "chunk_rows": 1024, "exact_rows": 64,
                     "grad_rows": 4, "block_rows": 512},
        "model_memory": {"models": ("Qwen3-0.6B", "Qwen3-1.7B"), "tokens": (4096, 16_384), "chunk_rows": 1024,
                         "warmup": 1, "repeats": 2},
        "budgets": {"head_cost": 120, "numerics": 75, "model_memory": 150, "capacity_plan": 15},
    },
    "cpu-small": {
        "head_cost": {"tokens": 1024, "vocab": 20_000, "k": 16, "chunk_rows": 128, "warmup": 1, "repeats": 2},
        "numerics": {"rows": 256, "vocab": 32_000, "k": 16, "chunk_rows": 64, "exact_rows": 8,
                     "grad_rows": 2, "block_rows": 32},
        "model_memory": {"models": ("tiny-qwen3",), "tokens": (64, 128), "chunk_rows": 64, "warmup": 1,
                         "repeats": 1},
        "budgets": {"head_cost": 60, "numerics": 30, "model_memory": 60, "capacity_plan": 15},
    },
}


def _meta(device: torch.device, mode: str) -> dict:
    try:
        import transformers
        transformers_version = transformers.__version__
    except Exception as exc:
        transformers_version = f"not importable ({type(exc).__name__})"
    name = "CPU"
    if device.type == "cuda":
        try:
            props = torch.cuda.get_device_properties(device)
            name = f"{props.name} ({props.total_memory / GIB:.1f} GiB)"
        except Exception as exc:
            name = f"CUDA device (properties not readable: {type(exc).__name__}: {exc})"
    return {"device": name, "mode": mode, "torch": torch.__version__, "cuda": torch.version.cuda,
            "transformers": transformers_version, "python": platform.python_version(),
            "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "argv": sys.argv[1:]}


def run_part(report: dict, name: str, func: Callable[[], dict], out: Path, cuda: bool) -> dict | None:
    """Run one part, record its status (ok / partial / skipped / failed) and reason, rewrite the outputs."""
    report["parts"][name] = {"status": "running", "reason": "started but did not finish: the check was stopped "
                             "from outside (timeout or kill) while this part ran", "result": None}
    device_report.write(report, out)
    started = time.monotonic()
    entry: dict = {"status": "ok", "reason": "", "result": None}
    try:
        entry["result"] = func()
        if entry["result"].get("notes"):
            entry["status"], entry["reason"] = "partial", "; ".join(entry["result"]["notes"])
    except PartSkipped as exc:
        entry["status"], entry["reason"] = "skipped", str(exc)
    except Exception as exc:
        if is_oom(exc):
            entry["status"], entry["reason"] = "skipped", f"out of memory: {str(exc).splitlines()[0][:300]}"
        else:
            entry["status"], entry["reason"] = "failed", f"{type(exc).__name__}: {exc}"
            entry["traceback"] = traceback.format_exc()
    finally:
        free_memory(cuda)
    entry["wall_s"] = round(time.monotonic() - started, 2)
    report["parts"][name] = entry
    device_report.write(report, out)
    print(f"device_check: {name}: {entry['status']} in {entry['wall_s']} s"
          + (f" ({entry['reason']})" if entry["reason"] else ""), file=sys.stderr, flush=True)
    return entry["result"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks.device_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "results/device_check"))
    parser.add_argument("--cpu-small", action="store_true", help="small sizes on the CPU (seconds)")
    parser.add_argument("--budget-s", type=float, default=420.0, help="the whole check's time budget")
    parser.add_argument("--limit-gib", type=float, default=60.0, help="largest estimated peak a part may start")
    parser.add_argument("--parts", nargs="+", choices=list(device_report.SECTIONS), default=list(device_report.SECTIONS))
    args = parser.parse_args(argv)

    started = time.monotonic()
    mode = "cpu-small" if args.cpu_small else "gpu"
    cuda = not args.cpu_small and torch.cuda.is_available()
    device = torch.device("cuda") if cuda else torch.device("cpu")
    sizes, limit = SIZES[mode], int(args.limit_gib * GIB)
    whole = Budget(args.budget_s)
    report: dict = {"meta": _meta(device, mode), "sizes": dict(sizes), "parts": {}}
    try:  # before any part runs: an unwritable OUT is one line, not a traceback after minutes of work
        device_report.write(report, args.out)
    except OSError as err:
        print(f"device_check: cannot write the report into OUT={args.out}: {err.strerror or err}; set OUT to a "
              "writable folder", file=sys.stderr)
        return 2

    def budget(name: str) -> Budget:
        return Budget(sizes["budgets"][name], parent=whole)

    def needs_device(func: Callable[[], dict]) -> Callable[[], dict]:
        def guarded() -> dict:
            if not args.cpu_small and not cuda:
                raise PartSkipped("no CUDA device (torch.cuda.is_available() is False); --cpu-small runs "
                                  "the same code at small sizes on the CPU")
            return func()
        return guarded

    parts: dict[str, Callable[[], dict]] = {
        "head_cost": needs_device(lambda: device_head.run(
            device, **sizes["head_cost"], budget=budget("head_cost"), limit_bytes=limit)),
        "numerics": needs_device(lambda: device_numerics.run(
            device, **sizes["numerics"], budget=budget("numerics"))),
        "model_memory": needs_device(lambda: device_model.run(
            device, **sizes["model_memory"], budget=budget("model_memory"), limit_bytes=limit)),
        "capacity_plan": lambda: device_capacity.run(
            ((report["parts"].get("model_memory") or {}).get("result") or {}).get("rows")),
    }
    for name in args.parts:
        if whole.spent() and name != "capacity_plan":  # the comparison takes no device time
            report["parts"][name] = {"status": "skipped", "reason": f"the check's time budget of {args.budget_s:.0f} s "
                                     "was spent before it started", "result": None}
            continue
        run_part(report, name, parts[name], args.out, cuda)
    report["meta"]["wall_s"] = round(time.monotonic() - started, 1)
    report["meta"]["loaded_forbidden"] = sorted({m.partition(".")[0] for m in sys.modules} & set(FORBIDDEN))
    device_report.write(report, args.out)
    print(device_report.markdown(report))
    print(f"device_check: wrote {args.out / device_report.JSON_NAME} and {args.out / device_report.MARKDOWN_NAME}",
          file=sys.stderr)
    if any(part["status"] == "failed" for part in report["parts"].values()):
        return 1
    if not args.cpu_small and not cuda:  # the GPU check measured nothing: not a pass
        print(f"device_check: no CUDA device is visible (torch.cuda.is_available() is False; CUDA_VISIBLE_DEVICES="
              f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}): no GPU part ran; exit {NO_DEVICE}",
              file=sys.stderr)
        return NO_DEVICE
    return 0


if __name__ == "__main__":
    sys.exit(main())
