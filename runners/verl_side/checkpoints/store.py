"""verl checkpoints of a run: listing, retention, export to BF16 safetensors, verification.

verl 0.9.1 (FSDP) writes, under ``trainer.default_local_dir`` (``<run>/checkpoints``)::

    global_step_N/actor/model_world_size_W_rank_R.pt     model shards
    global_step_N/actor/optim_world_size_W_rank_R.pt     optimizer state (needed to resume only)
    global_step_N/actor/extra_state_world_size_W_rank_R.pt, fsdp_config.json, huggingface/
    global_step_N/data.pt                                 dataloader state
    latest_checkpointed_iteration.txt                     the step ``resume_mode=auto`` resumes from

Retention (:func:`plan_retention`, :func:`apply_retention`) keeps the latest ``N`` checkpoints,
the best ``M`` by :func:`runners.run.checkpoint_selection.eval_average` of ``metrics.json`` (analysis's rule for
``best``) and always the resume point. **"Best" is selected on the AIME test sets themselves: an
optimistic, test-set selection**, and every plan and export says so. verl's own rotation must be
off (``trainer.max_actor_ckpt_to_keep=null``) or it deletes best checkpoints first.

Export (:func:`export_checkpoint`) runs verl's merger (BF16 HF safetensors plus config and
tokenizer, no optimizer state) into a temporary folder, verifies it
(:func:`runners.verl_side.checkpoints.export_check.verify_export`: ``verification.json``) and moves it to ``<run>/export``::

    python -m verl.model_merger merge --backend fsdp --local_dir <ckpt>/global_step_N/actor --target_dir <out>

CLI::

    python -m runners.verl_side.checkpoints list RUN_DIR
    python -m runners.verl_side.checkpoints retain RUN_DIR --keep-latest 2 --keep-best 1 [--delete]
    python -m runners.verl_side.checkpoints export RUN_DIR --step best|latest|N [--out DIR] [--force]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from runners.run import verl_files
from runners.run.checkpoint_selection import TEST_SET_SELECTION, best_steps, eval_average
from runners.run.run_contract import CONFIG_FILE, EXPORT_DIR, METRICS_FILE
from runners.run.run_record import atomic_write_text, utc_now
from runners.verl_side.checkpoints.export_check import VERIFICATION_FILE, ExportError, verify_export

STEP_DIR = re.compile(r"^global_step_(\d+)$")
MERGER_LOG = "model_merger.log"
#: How verification.json describes the export.
EXPORT_FORMAT = "HF safetensors, BF16, no optimizer state (verl.model_merger merge --backend fsdp)"
#: One error type for checkpoint operations and the export's verification (the CLI reports either).
CheckpointError = ExportError


# -- listing and selection ------------------------------------------------------------------------
def list_checkpoints(ckpt_dir: Path) -> dict[int, Path]:
    """``{step: global_step_N folder}`` of the checkpoints that have an ``actor/`` folder."""
    ckpt_dir = Path(ckpt_dir)
    found = [(STEP_DIR.match(p.name), p) for p in (ckpt_dir.iterdir() if ckpt_dir.is_dir() else [])]
    return dict(sorted((int(m.group(1)), p) for m, p in found if m and (p / "actor").is_dir()))


def _load_metrics(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / METRICS_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path}: cannot read ({err}); run ingestion first") from err


def _best(run_dir: Path, m: int, steps: list[int]) -> tuple[list[int], dict[int, dict[str, Any]]]:
    """The ``m`` best of ``steps`` by eval average (runners.run.checkpoint_selection's rule), and the averages."""
    averages = eval_average(_load_metrics(run_dir))
    return best_steps({s: a["avg"] for s, a in averages.items()}, m, steps), averages


# -- retention ------------------------------------------------------------------------------------
@dataclass
class RetentionPlan:
    ckpt_dir: str
    keep_latest: int
    keep_best: int
    keep: dict[int, list[str]] = field(default_factory=dict)
    delete: list[int] = field(default_factory=list)
    best: list[dict[str, Any]] = field(default_factory=list)
    selection: str = TEST_SET_SELECTION

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["keep"] = {str(k): v for k, v in sorted(self.keep.items())}
        return d


def plan_retention(run_dir: Path, keep_latest: int, keep_best: int) -> RetentionPlan:
    """Which checkpoints to keep (with the reasons) and which to delete; deletes nothing."""
    if keep_latest < 1 or keep_best < 0:
        raise CheckpointError(f"keep_latest must be >= 1 and keep_best >= 0, got {keep_latest}, {keep_best}")
    ckpt_dir = verl_files.checkpoints_dir(run_dir)
    steps = list(list_checkpoints(ckpt_dir))
    plan = RetentionPlan(ckpt_dir=str(ckpt_dir), keep_latest=keep_latest, keep_best=keep_best)
    for s in steps[-keep_latest:]:
        plan.keep.setdefault(s, []).append("latest")
    if keep_best:
        best, averages = _best(run_dir, keep_best, steps)
        for rank, s in enumerate(best, start=1):
            plan.keep.setdefault(s, []).append(f"best #{rank} by eval average (test-set selection)")
            plan.best.append({"rank": rank, "step": s, **averages[s]})
    resume = verl_files.resume_step(ckpt_dir)
    if resume in steps:
        plan.keep.setdefault(resume, []).append("resume point (latest_checkpointed_iteration.txt)")
    plan.delete = [s for s in steps if s not in plan.keep]
    return plan


def apply_retention(plan: RetentionPlan) -> list[Path]:
    """Delete the plan's checkpoints; record the plan in ``<ckpt_dir>/retention.json``."""
    ckpt_dir = Path(plan.ckpt_dir)
    removed = []
    for s in plan.delete:
        path = ckpt_dir / f"global_step_{s}"
        if s in plan.keep:
            raise CheckpointError(f"refusing to delete kept checkpoint {path}")
        shutil.rmtree(path)
        removed.append(path)
    record = {"applied": utc_now(), **plan.as_dict()}
    atomic_write_text(ckpt_dir / "retention.json", json.dumps(record, indent=1) + "\n")
    return removed


# -- export ---------------------------------------------------------------------------------------
def merger_command(actor_dir: Path, target_dir: Path) -> list[str]:
    return [sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp",
            "--local_dir", str(actor_dir), "--target_dir", str(target_dir)]


def run_subprocess(cmd: list[str], log_path: Path) -> None:
    """Run ``cmd`` with its output in ``log_path``; a non-zero exit raises :class:`CheckpointError`."""
    with log_path.open("w") as log:
        code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    if code != 0:
        raise CheckpointError(f"{' '.join(cmd)} exited with {code}; log {log_path}:\n{log_path.read_text()[-2000:]}")


def resolve_step(run_dir: Path, step: str | int, ckpt_dir: Path) -> tuple[int, str]:
    """``(step, selection label)`` for ``best``, ``latest`` or an explicit step number."""
    steps = list(list_checkpoints(ckpt_dir))
    if not steps:
        raise CheckpointError(f"{ckpt_dir}: no global_step_N/actor checkpoints")
    if step == "latest":
        return steps[-1], "latest checkpoint"
    if step == "best":
        best, _ = _best(run_dir, 1, steps)
        if not best:
            raise CheckpointError(f"no checkpoint step of {ckpt_dir} has an evaluation in metrics.json")
        return best[0], TEST_SET_SELECTION
    s = int(step)
    if s not in steps:
        raise CheckpointError(f"{ckpt_dir}: no checkpoint at step {s} (have {steps})")
    return s, "chosen by step number"


def export_checkpoint(run_dir: Path, step: str | int = "best", *, out_dir: Path | None = None, force: bool = False,
                      runner: Callable[[list[str], Path], None] = run_subprocess, load_check: str = "auto") -> Path:
    """Export one checkpoint to BF16 safetensors with ``verification.json``; returns that file's path.

    ``runner(cmd, log_path)`` executes the merger command (tests pass an in-process runner);
    ``load_check`` is ``auto`` (GPU if available, else skipped), ``cpu`` or ``skip``.
    """
    run_dir = Path(run_dir).resolve()
    ckpt_dir = verl_files.checkpoints_dir(run_dir)
    s, selection = resolve_step(run_dir, step, ckpt_dir)
    actor = ckpt_dir / f"global_step_{s}" / "actor"
    out_dir = Path(out_dir) if out_dir else run_dir / EXPORT_DIR
    if out_dir.exists() and any(out_dir.iterdir()) and not force:
        raise CheckpointError(f"{out_dir} exists and is not empty (pass force=True / --force to replace it)")
    tmp = out_dir.with_name(f".{out_dir.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    log_path = out_dir.with_name(f".{out_dir.name}.{MERGER_LOG}")
    try:
        runner(merger_command(actor, tmp), log_path)
        shutil.move(str(log_path), tmp / MERGER_LOG)
        source = {"run_dir": str(run_dir), "checkpoint": str(actor), "step": s, "selection": selection}
        report = verify_export(tmp, source=source, config_file=run_dir / CONFIG_FILE, fmt=EXPORT_FORMAT,
                               load_check=load_check)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    path = out_dir / VERIFICATION_FILE
    if report["load_and_generate"]["status"] == "failed":
        raise CheckpointError(f"{path}: load-and-generate check failed: {report['load_and_generate']['error']}")
    return path


# -- CLI ------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runners.verl_side.checkpoints", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list", help="checkpoints and their evaluation average")
    p.add_argument("run_dir", type=Path)
    p = sub.add_parser("retain", help="plan (and with --delete apply) retention")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--keep-latest", type=int, required=True)
    p.add_argument("--keep-best", type=int, default=0)
    p.add_argument("--delete", action="store_true", help="delete what the plan does not keep")
    p = sub.add_parser("export", help="BF16 safetensors export + verification.json")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--step", default="best", help="best (test-set selection), latest, or a step number")
    p.add_argument("--out", type=Path, default=None, help="default RUN_DIR/export")
    p.add_argument("--force", action="store_true", help="replace an existing export")
    p.add_argument("--load-check", choices=("auto", "cpu", "skip"), default="auto")
    args = ap.parse_args(argv)
    try:
        if args.command == "list":
            ckpt_dir = verl_files.checkpoints_dir(args.run_dir)
            metrics_file = Path(args.run_dir) / METRICS_FILE
            averages = eval_average(_load_metrics(args.run_dir)) if metrics_file.is_file() else {}
            for s, path in list_checkpoints(ckpt_dir).items():
                avg = averages.get(s, {}).get("avg")
                print(f"{s:>7}  {'-' if avg is None else f'{avg:.4f}'}  {path}")
            print(f"(eval average: {TEST_SET_SELECTION})")
        elif args.command == "retain":
            plan = plan_retention(args.run_dir, args.keep_latest, args.keep_best)
            for s, reasons in sorted(plan.keep.items()):
                print(f"keep   {s:>7}  {'; '.join(reasons)}")
            for s in plan.delete:
                print(f"delete {s:>7}")
            if args.delete:
                removed = apply_retention(plan)
                print(f"deleted {len(removed)} checkpoint(s); plan in {Path(plan.ckpt_dir) / 'retention.json'}")
            else:
                print("(dry run: pass --delete to delete)")
        else:
            path = export_checkpoint(args.run_dir, args.step, out_dir=args.out, force=args.force,
                                     load_check=args.load_check)
            report = json.loads(path.read_text())
            print(f"{path}: step {report['source']['step']} ({report['source']['selection']}), "
                  f"{report['parameters']} parameters, load check {report['load_and_generate']['status']}")
    except CheckpointError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
