"""verl's logs of a run -> ``metrics.json`` and ``val/step_NNNNNN.jsonl`` (docs/run_contract.md).

Inputs, in the run folder (:mod:`runners.run.verl_files`): ``config.yaml``; each attempt's
``verl/attempt-NNN/metrics.jsonl`` (verl's ``file`` logger); verl's validation dump and the optional train
rollout dump (``verl/validation/`` and ``verl/rollouts/``, ``<step>.jsonl``); and verl's checkpoint tracker
(the resume point of an attempt with no lines yet). :func:`ingest_run` rebuilds the whole record from these
files each time it runs (idempotent), so it can run while verl runs (status ``running``) and after.
CLI: ``python -m runners.verl_side.backend.ingest RUN_DIR [--status finished|failed] [--watch SECONDS]``.

Merging attempts. Each file-logger line is ``{"step": N, "data": {...}}``; keys starting with
``val-`` are the evaluation at N, the rest the train step N (verl logs both on one line, and an
evaluation before training -- step 0, or the resume step -- on a line of its own). An attempt
resumes after step ``s`` = the step of its first line when that line is evaluation-only, else
its first train step - 1. Every row of earlier attempts after ``s`` is dropped (that model state
died with the attempt) and the attempt's own rows are added, so a re-logged or re-evaluated step
comes from the later attempt. Train steps must then run 1..last without a gap; a gap raises
:class:`IngestError` naming the missing steps and what each attempt logged. A torn last line (a
line being written) is ignored; a torn line elsewhere raises.

``run.attempts``: one entry per attempt folder. ``start_step`` as above (an attempt with no lines
yet: the step in ``latest_checkpointed_iteration.txt``); ``end_step`` the last train step the
attempt logged (the last attempt: null while running, else the run's last step); ``started`` and
``ended`` are kept from an existing ``metrics.json``, else taken from the files' times; an earlier
attempt still marked running is ``killed``. ``run.status``: the ``status`` argument, else unchanged
when an earlier call closed the record at the same step, else ``finished`` once
``trainer.total_steps`` steps are logged, else ``running``.

Train metrics (``runners.run.run_contract``): every numeric verl metric is kept under its own name;
verl 0.9.1 logs every contract metric under its name except these four, derived here:

* ``actor/entropy``: verl's ``actor/entropy`` (log-prob pass), else ``actor/entropy_loss``
  (update pass; bypass mode skips the log-prob pass);
* ``training/off_policy/evicted_samples``: 0 when absent (verl logs it only for a step that
  evicted stale groups);
* ``response/truncation_ratio``: the share of responses with length >= the cap
  ``rollout.max_response_length``. verl's ``response_length/clip_ratio`` counts responses as long
  as the batch's longest, so it is that share when ``response_length/max`` reaches the cap and 0
  otherwise (a max above the cap is an error);
* ``batch/zero_variance_group_ratio``: verl's if logged, else from the step's rollout dump (share
  of prompt groups, by uid, whose scores are all equal), else null.

A contract metric with no source is written as null and logged.

Validation. Per evaluated step, the row keeps verl's ``val-*`` metrics of the winning attempt and
sets the contract's three metrics of each ``data_source`` of the dump from its samples (each
problem must have exactly ``n``; a ``val-core`` value verl logged differently is logged; truncated
= ``response_length >= cap``). The dump line of a sample becomes a val-file line. verl's dump has
only input/output/gts/score/step/uid plus the reward's extra info, so the launch config must use
:mod:`ablations.reward` (``compute_score`` adds ``data_source`` and ``problem_id``,
``LengthAwareRewardManager`` adds ``response_length``); a dump without them raises. ``sample`` is
the rank of the rollout session id (``uid`` = ``<prompt uid>_<session>_<output>``; the last output
of a session is kept). The newest evaluation is skipped (and logged) while its dump is missing or
incomplete -- verl writes the dump in a background thread -- unless the record is being closed with
``status="finished"``; for an earlier evaluation a missing or incomplete dump raises.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from ablations.arms import ArmSpec
from runners.run import run_contract as rc
from runners.run import verl_files
from runners.run.attempt_logs import (
    AttemptLog,
    IngestError,
    finite_number,
    merged_rows,
    read_attempts,
    truncation_ratio,
)
from runners.run.contract_check import arm_train_metrics
from runners.run.provenance import config_sha256, versions
from runners.run.run_record import RunRecord, recorded_run, write_text_if_changed
from runners.verl_side.platform import platform_for
from runners.verl_side.platform.rehearsal.cpu_platform import standin_seed_fixes

log = logging.getLogger(__name__)

ENTROPY, EVICTED = "actor/entropy", "training/off_policy/evicted_samples"
TRUNCATION, ZERO_VARIANCE = "response/truncation_ratio", "batch/zero_variance_group_ratio"
ENTROPY_SOURCES = (ENTROPY, "actor/entropy_loss")
#: The contract's metrics verl logs under the same name (the others are derived, see the docstring).
TRAIN_DIRECT = tuple(m for m in rc.EVERY_ARM_TRAIN_METRICS if m not in (ENTROPY, EVICTED, TRUNCATION, ZERO_VARIANCE))


#: ``run.seed_fixes`` of a verl run: the project's ``seed`` goes to the four verl keys
#: ``runners.verl_side.backend.overrides`` sets (verl 0.9.1's use of each below). The harness leaves
#: verl's ``full_determinism`` off, so neither engine is made deterministic: runs of one seed share
#: the prompt order, not the sampled tokens.
SEED_FIXES = rc.seed_fixes_record(
    {"data_order": "data.seed: the generator of the train dataloader's shuffle (verl.trainer.ppo.utils)",
     "actor_data_order": "actor_rollout_ref.actor.data_loader_seed: the shuffle of a batch into mini-batches",
     "trainer_engine": "actor_rollout_ref.actor.fsdp_config.seed: applied (enable_full_determinism) only with "
                       "full_determinism, which is off",
     "rollout_engine": "actor_rollout_ref.rollout.seed: vLLM's engine seed (replica rank + seed)"},
    {"sampler": "vLLM samples requests batched as they arrive (async scheduling, several agent workers and "
                "replicas); the draws are not reproducible, per-request seeds only with full_determinism",
     "evaluation": "validation samples through the same vLLM replicas: not reproducible either",
     "schedule": "which groups are trained at which staleness follows the engines' timing",
     "gpu_kernels": "non-deterministic reductions of the trainer and vLLM kernels",
     "eval_problems": "the validation files: the same for every run, whatever its seed"},
    reproducible=False,
)


#: ``run.seed_fixes`` of a rehearsal whose rollout is the CPU stand-in (the platform's record of
#: :data:`SEED_FIXES`: :func:`runners.verl_side.platform.rehearsal.cpu_platform.standin_seed_fixes`).
REHEARSAL_SEED_FIXES = standin_seed_fixes(SEED_FIXES)


def seed_fixes_of(cfg: Any) -> dict[str, Any]:
    """What the seed fixes in this run: :data:`SEED_FIXES` as the run's platform records it
    (:meth:`runners.verl_side.platform.base.Platform.seed_fixes`: :data:`REHEARSAL_SEED_FIXES` where the rehearsal's
    CPU stand-in rolled out, ``backend.rehearsal_rollout=standin``)."""
    return platform_for(cfg).seed_fixes(SEED_FIXES)


def rollout_engine(cfg: Any) -> str:
    """``run.versions.rollout``: the engine that generated the rollouts, with its version: ``vllm <version>``
    (``+cpu``: vLLM's CPU build), or what the run's platform put in its place
    (:meth:`runners.verl_side.platform.base.Platform.rollout_engine`: the rehearsal's CPU stand-in)."""
    from importlib import metadata

    try:
        vllm = f"vllm {metadata.version('vllm')}"
    except metadata.PackageNotFoundError:
        vllm = "vllm (not installed where the record was written)"
    return platform_for(cfg).rollout_engine(vllm)


# -- config ---------------------------------------------------------------------------------------
def _get(cfg: Any, dotted: str, default: Any = None) -> Any:
    """``cfg.a.b`` for a DictConfig or nested dicts; ``default`` when absent, null or unresolvable."""
    node = cfg
    for part in dotted.split("."):
        try:
            node = node[part]
        except Exception:  # missing key, not a mapping, or an unresolvable ${hydra:...} interpolation
            return default
        if node is None:
            return default
    return node


@dataclass(frozen=True)
class RunSpec:
    """What ingestion needs from the run's config."""

    name: str
    method: str
    seed: int
    total_steps: int
    response_cap: int
    eval_n: int | None = None
    arm: ArmSpec | None = None  # the arm, from its method config

    @classmethod
    def from_cfg(cls, cfg: Any, run_dir: Path) -> RunSpec:
        cap = _get(cfg, "rollout.max_response_length")
        total = _get(cfg, "trainer.total_steps")
        if cap is None or total is None:
            raise IngestError(f"{run_dir}: config needs rollout.max_response_length and trainer.total_steps")
        eval_n = _get(cfg, "eval.n")
        return cls(name=str(_get(cfg, "run_name", run_dir.name)), method=str(_get(cfg, "method.name", "unknown")),
                   seed=int(_get(cfg, "seed", 0)), total_steps=int(total), response_cap=int(cap),
                   eval_n=None if eval_n is None else int(eval_n),
                   arm=ArmSpec.of(method) if (method := _get(cfg, "method")) is not None else None)


def load_config(run_dir: Path) -> Any:
    path = Path(run_dir) / rc.CONFIG_FILE
    if not path.is_file():
        raise IngestError(f"{path}: missing (the launcher writes the resolved config there)")
    return OmegaConf.load(path)


def merge_attempts(attempts: list[AttemptLog]) -> tuple[dict[int, dict], dict[int, dict]]:
    """:func:`merged_rows`; a gap in the train steps 1..last raises :class:`IngestError`."""
    train, val = merged_rows(attempts)
    steps = sorted(train)
    missing = sorted(set(range(1, steps[-1] + 1)) - set(steps)) if steps else []
    if missing:
        spans = "; ".join(f"attempt {a.number} ({a.path}): {a.span}" for a in attempts)
        raise IngestError(f"train steps {_short(missing)} are in no attempt's log ({spans})")
    return train, val


def logged_through(run_dir: Path) -> int:
    """The last step ``s`` such that train steps 1..s are all in the attempts' logs (0: none)."""
    train, _ = merged_rows(read_attempts(run_dir))
    s = 0
    while s + 1 in train:
        s += 1
    return s


def _short(items: list[int], limit: int = 10) -> str:
    text = ", ".join(map(str, items[:limit]))
    return f"[{text}{', ...' if len(items) > limit else ''}] ({len(items)})"


class IncompleteDump(IngestError):
    """A validation dump that is missing, torn or lacks samples (may still be being written)."""


def read_val_dump(path: Path, cap: int, n_expected: int | None) -> list[dict[str, Any]]:
    """One verl validation dump as contract samples (val-line dicts, by problem id and sample);
    :class:`IncompleteDump` when not complete."""
    if not path.is_file():
        raise IncompleteDump(f"{path}: missing (is trainer.validation_data_dir set to this folder?)")
    sessions: dict[tuple[str, str, str], tuple[int, int, dict]] = {}
    order = 0
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError as err:
            raise IncompleteDump(f"{path}:{lineno}: not JSON ({err})") from err
        missing = [k for k in ("data_source", "problem_id", "response_length") if entry.get(k) is None]
        if missing:
            raise IngestError(f"{path}:{lineno}: dump line lacks {missing}; the launch config must use the project "
                              "reward (reward.custom_reward_function.path=pkg://ablations.reward, name=compute_score; "
                              "reward.reward_manager.source=importlib, name=LengthAwareRewardManager, "
                              "module.path=pkg://ablations.reward)")
        uid = str(entry.get("uid", f"line{lineno}"))
        parts = uid.rsplit("_", 2)
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            prompt_uid, session, output = parts[0], parts[1], int(parts[2])
        else:
            prompt_uid, session, output = uid, str(lineno), 0
        key = (str(entry["problem_id"]), prompt_uid, session)
        if key not in sessions or output > sessions[key][1]:
            sessions[key] = (order if key not in sessions else sessions[key][0], output, entry)
        order += 1
    by_problem: dict[str, list[tuple[int, str, dict]]] = defaultdict(list)
    for (pid, _uid, session), (first, _out, entry) in sessions.items():
        by_problem[pid].append((int(session) if session.isdigit() else first, session, entry))
    if not by_problem:
        raise IncompleteDump(f"{path}: no samples")
    counts = {pid: len(items) for pid, items in by_problem.items()}
    n = n_expected if n_expected is not None else max(counts.values())
    short = {pid: c for pid, c in counts.items() if c != n}
    if short:
        raise IncompleteDump(f"{path}: problems without exactly {n} samples: "
                             + ", ".join(f"{p} has {c}" for p, c in sorted(short.items())[:5]))
    samples = []
    for pid in sorted(by_problem):
        sources = {str(e["data_source"]) for _, _, e in by_problem[pid]}
        if len(sources) != 1:
            raise IngestError(f"{path}: problem {pid} appears under data sources {sorted(sources)}")
        for rank, (_key, _session, e) in enumerate(sorted(by_problem[pid], key=lambda t: t[0])):
            length = int(e["response_length"])
            acc = int(float(e["acc"] if e.get("acc") is not None else e.get("score", -1)) > 0)
            samples.append({"data_source": str(e["data_source"]), "problem_id": pid, "sample": rank,
                            "score": finite_number(e.get("score")), "acc": acc, "response_length": length,
                            "truncated": length >= cap})
    return samples


def val_summary(samples: list[dict[str, Any]]) -> dict[str, float]:
    """The contract's three per-set metrics (sets in name order) from the samples of one evaluation."""
    by_set: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for x in samples:
        by_set[x["data_source"]].append(x)
    return rc.val_metrics(dict(sorted(by_set.items())), max(x["sample"] for x in samples) + 1)


def zero_variance_from_rollouts(path: Path) -> float | None:
    """Share of prompt groups (uid prefix) whose rollout scores are all equal; None without a dump."""
    if not path.is_file():
        return None
    groups: dict[str, list[float]] = defaultdict(list)
    for line in filter(str.strip, path.read_text(encoding="utf-8").splitlines()):
        try:
            entry = json.loads(line)
        except ValueError:
            return None  # being written
        groups[str(entry.get("uid", "")).rsplit("_", 2)[0]].append(float(entry["score"]))
    return sum(max(v) == min(v) for v in groups.values()) / len(groups) if groups else None


# -- building rows --------------------------------------------------------------------------------
def train_row(step: int, data: dict[str, Any], spec: RunSpec, rollout_dir: Path, missing: dict) -> dict[str, Any]:
    row: dict[str, Any] = {"step": step}
    for key, value in sorted(data.items()):  # every numeric verl metric, under verl's name
        if isinstance(value, bool):
            row[key] = int(value)
        elif isinstance(value, int | float) or value is None:
            row[key] = value  # RunRecord writes a non-finite value as null and logs it
    for name in TRAIN_DIRECT:
        row.setdefault(name, None)
    row[ENTROPY] = next((finite_number(data[k]) for k in ENTROPY_SOURCES if k in data), None)
    row[EVICTED] = finite_number(data.get(EVICTED, 0))
    row[TRUNCATION] = truncation_ratio(data, spec.response_cap, step)
    if ZERO_VARIANCE not in data:
        row[ZERO_VARIANCE] = zero_variance_from_rollouts(rollout_dir / f"{step}.jsonl")
    for name in arm_train_metrics(spec.arm):
        row.setdefault(name, None)
    for name, value in row.items():
        if value is None and name != "step":
            missing[name].append(step)
    return row


def _status(explicit: str | None, previous: dict[str, Any] | None, n_attempts: int, last: int, total: int) -> str:
    if explicit is not None:
        if explicit not in rc.RUN_STATUSES:
            raise IngestError(f"status must be {', '.join(rc.RUN_STATUSES[:-1])} or {rc.RUN_STATUSES[-1]}, got {explicit!r}")
        return explicit
    if previous is not None and previous.get("status") in ("finished", "failed", "stopped") \
            and previous.get("last_step") == last \
            and len(previous.get("attempts") or []) == n_attempts:
        return previous["status"]
    return "finished" if last >= total else "running"


def _iso_mtime(path: Path, *, ctime: bool = False) -> str:
    st = path.stat()
    return dt.datetime.fromtimestamp(st.st_ctime if ctime else st.st_mtime, dt.UTC).isoformat(timespec="seconds")


def build_attempts(run_dir: Path, logs: list[AttemptLog], previous: list[dict], status: str, last: int
                   ) -> list[dict[str, Any]]:
    out = []
    for i, a in enumerate(logs):
        prev = previous[i] if i < len(previous) and isinstance(previous[i], dict) else {}
        is_last = i == len(logs) - 1
        where = a.path if a.path.exists() else a.path.parent
        start = a.resume_step
        if start is None:
            resume = verl_files.resume_step(verl_files.checkpoints_dir(run_dir))
            start = prev.get("start_step", last if resume is None else min(resume, last))
        reached = max(a.train) if a.train else None
        if is_last:
            a_status = status
            ended = None if status == "running" else (prev.get("ended") or _iso_mtime(where))
            end_step = None if status == "running" else last
        else:
            a_status = prev.get("status") if prev.get("status") not in (None, "running") else "killed"
            ended = prev.get("ended") or _iso_mtime(where)
            end_step = reached
        if end_step is not None and end_step < start:
            end_step = start
        out.append({"started": prev.get("started") or _iso_mtime(where, ctime=True), "ended": ended,
                    "start_step": int(start), "end_step": end_step, "status": a_status})
    return out


def _config_text(cfg: Any) -> str:
    try:
        return OmegaConf.to_yaml(cfg)
    except Exception:
        return json.dumps(cfg, sort_keys=True, default=str)


# -- the entry point ------------------------------------------------------------------------------
def ingest_run(run_dir: Path, cfg: Any = None, *, status: str | None = None) -> Path:
    """Merge every attempt's verl logs of ``run_dir`` into its ``metrics.json``; return that path. ``cfg``:
    the resolved project config (None: ``run_dir/config.yaml``); ``status``: ``run.status`` (the module doc)."""
    run_dir = Path(run_dir).resolve()
    cfg = load_config(run_dir) if cfg is None else cfg
    spec = RunSpec.from_cfg(cfg, run_dir)
    config_file = run_dir / rc.CONFIG_FILE
    sha = config_sha256(config_file.read_text() if config_file.is_file() else _config_text(cfg))
    logs = read_attempts(run_dir)
    train, val_logged = merge_attempts(logs)
    last = max(train) if train else 0
    if last > spec.total_steps:
        raise IngestError(f"{run_dir}: train reaches step {last} beyond trainer.total_steps {spec.total_steps}")

    previous = recorded_run(run_dir)  # None: no record yet, or an unreadable one
    run_status = _status(status, previous, len(logs), last, spec.total_steps)

    rollout_dir = verl_files.rollout_dump_dir(run_dir)
    missing: dict[str, list[int]] = defaultdict(list)
    rows = [train_row(s, train[s], spec, rollout_dir, missing) for s in sorted(train)]
    for name, steps in missing.items():
        log.warning("%s: %s has no source at %d of %d steps (first %d): written as null",
                    run_dir.name, name, len(steps), len(rows), steps[0])

    dump_dir = verl_files.validation_dump_dir(run_dir)
    val_rows: list[dict[str, Any]] = []
    val_files: dict[int, str] = {}
    val_steps = sorted(s for s in val_logged if s <= last)
    for s in val_steps:
        try:
            samples = read_val_dump(dump_dir / f"{s}.jsonl", spec.response_cap, spec.eval_n)
        except IncompleteDump as err:
            if status != "finished" and s == val_steps[-1]:
                log.warning("skipping the newest evaluation (step %d) until its dump is complete: %s", s, err)
                continue
            raise
        summary = val_summary(samples)
        logged = val_logged[s]
        for key, value in summary.items():
            m = rc.VAL_CORE_RE.match(key)
            if m and finite_number(logged.get(key)) is not None and abs(logged[key] - value) > 1e-6:
                log.warning("step %d: verl logged %s = %s, the dump gives %s (dump used)", s, key, logged[key], value)
        row = {"step": s}
        row.update({k: v for k, v in sorted(logged.items()) if isinstance(v, int | float | type(None))})
        row.update(summary)
        val_rows.append(row)
        val_files[s] = "".join(rc.sample_line(x) + "\n" for x in samples)

    record = RunRecord.open(run_dir, name=spec.name, method=spec.method, seed=spec.seed, backend="verl",
                            total_steps=spec.total_steps, config_sha256=sha,
                            versions={**versions(), "rollout": rollout_engine(cfg)},
                            seed_fixes=seed_fixes_of(cfg))
    record.truncate_after(0)
    for row in rows:
        record.add_train(row)
    for row in val_rows:
        record.add_val(row)
    prev_attempts = (previous or {}).get("attempts") or []
    record.data["run"]["attempts"] = build_attempts(run_dir, logs, prev_attempts, run_status, last)
    record.data["run"]["status"] = run_status  # run.last_step: add_train kept it (rows 1..last, no gap)

    # order for readers watching the run: a val row appears only after its file, and a file goes
    # only after the record that referenced it is replaced
    rc.val_path(run_dir, 0).parent.mkdir(exist_ok=True)
    for s, text in val_files.items():
        write_text_if_changed(rc.val_path(run_dir, s), text)
    record.save()
    for stale in rc.val_path(run_dir, 0).parent.glob("step_*.jsonl"):
        m = rc.VAL_FILE_RE.match(stale.name)
        if m and int(m["step"]) > last:
            stale.unlink()  # an evaluation of a trajectory a resume discarded
    return record.path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runners.verl_side.backend.ingest", description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--status", choices=rc.RUN_STATUSES, default=None,
                    help="close the record with this status (default: inferred)")
    ap.add_argument("--watch", type=float, default=None, metavar="SECONDS",
                    help="re-ingest every SECONDS until the run is finished or failed")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    while True:
        try:
            path = ingest_run(args.run_dir, status=args.status)
        except IngestError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        run = json.loads(path.read_text())["run"]
        print(f"{path}: {run['status']}, step {run['last_step']}/{run['total_steps']}, {len(run['attempts'])} attempt(s)")
        if args.watch is None or run["status"] != "running":
            return 0
        time.sleep(args.watch)


if __name__ == "__main__":
    raise SystemExit(main())
