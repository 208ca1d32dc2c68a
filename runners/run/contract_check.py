"""The run-contract checker: does a run directory hold what ``docs/run_contract.md`` promises?

This module is the one place the contract's rules are written as code. :func:`check_run_dir`
returns every violation (an empty list means the directory is valid); :func:`read_run` returns
the parsed files together with the same violations, so :mod:`analysis.load` parses each file once
and never builds a table from a directory the checker rejects.

What is checked (schema_version 1):

- ``config.yaml`` and ``metrics.json`` exist; ``metrics.json`` is valid JSON with
  ``schema_version == 1`` and the ``run``/``train``/``val`` sections.
- ``run``: ``name``, ``method``, ``backend``, ``config_sha256`` strings; ``seed``, ``total_steps``,
  ``last_step`` integers; ``status`` in running/finished/failed/stopped (stopped by the user); ``versions`` a mapping of strings;
  ``last_step`` equals the last train step; a finished run trained ``total_steps`` steps;
  ``config_sha256`` is the sha256 of ``config.yaml`` (else ``config.yaml`` was edited after the run
  wrote it: ``runners.run.run_record.config_edited``).
  Optional ``seed_fixes`` (what the seed fixes; records before it lack it): ``streams`` a sorted
  list of stream names of ``runners.run.run_contract.SEED_STREAMS``, ``how`` a string per stream,
  ``not_fixed`` an object of strings, ``reproducible`` a boolean.
- ``attempts``: a list (non-empty once there are train rows) of objects with ISO-8601
  ``started``, ``ended`` (ISO-8601 or null, null only for the last attempt), integer
  ``start_step``, ``end_step`` (integer >= ``start_step`` or null) and ``status``; a run that is
  no longer running has its last attempt closed with the run's status.
- ``train``: steps 1, 2, ..., ``last_step`` exactly (strictly increasing, no duplicates, no gaps);
  every row carries the metric names required for the arm (every arm; a method whose name
  contains ``"tis"`` is a TIS arm and adds the TIS metrics; one containing ``"sc"`` is an SC arm
  and adds the SC metrics); every value is a finite JSON number or null.
- ``val``: steps strictly increasing, in ``0..last_step``; each row holds
  ``val-core/<ds>/acc/mean@<n>``, ``val-aux/<ds>/response_length/mean`` and
  ``val-aux/<ds>/truncation_ratio`` for every evaluation set ``<ds>`` of its jsonl file, with the
  same sets and the same ``n`` in every row; values finite numbers or null.
- ``val/step_NNNNNN.jsonl`` exists for every val row; every line is a JSON object with all of
  ``data_source`` and ``problem_id`` (strings), ``sample`` (integer >= 0), ``score`` (number or
  null), ``acc`` (0 or 1), ``response_length`` (number >= 0 or null), ``truncated`` (boolean);
  a problem id belongs to one set; every problem has exactly ``n`` samples numbered ``0..n-1``;
  the row's ``mean@n`` equals the mean ``acc`` of the file (to 1e-6); the problems of each set
  are the same at every evaluated step.

- Repeated evaluations (optional; ``eval.repeats`` of the embedded backend): the checkpoint of step
  N evaluated again with another sampling seed is ``val/repeat_RR/step_NNNNNN.jsonl`` (RR = 01,
  02, ...; repeat 0 is ``val/step_NNNNNN.jsonl`` itself, which alone feeds ``metrics.json``). A
  repeat file has the lines of a val file and must hold the same sets, problems and n samples
  per problem as the step's main file. Runs without repeat folders are unchanged (older readers
  ignore the folders).

A run with status ``running`` is checked the same way: it may have fewer train rows than
``total_steps`` and its last attempt may still be open. A jsonl file without a val row is not a
violation (a resumed run may leave files of steps its record dropped); it is ignored.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import re
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ablations.arms import ArmSpec, all_arms
from runners.run.run_contract import (
    CONFIG_FILE,
    EVERY_ARM_TRAIN_METRICS,
    IS_TRAIN_METRICS,
    METRICS_FILE,
    REJECTION_TRAIN_METRICS,
    REPEAT_DIR_RE,
    RUN_STATUSES,
    SAMPLE_FIELDS,
    SC_TRAIN_METRICS,
    SCHEMA_VERSION,
    SEED_STREAMS,
    TIS_TRAIN_METRICS,
    VAL_CORE_RE,
    VAL_DIR,
    VAL_FILE_RE,
    sample_problems,
    val_file_name,
    val_metric_names,
)
from runners.run.run_record import config_edited

ACC_TOLERANCE = 1e-6
MAX_EXAMPLES = 3  # examples listed per kind of line error in one file; the rest are counted


def run_arm(run_dir: str | Path) -> ArmSpec | None:
    """The run's arm (:class:`ablations.arms.ArmSpec`) from its saved ``config.yaml``'s ``method`` section;
    None when the file or the section is missing or unreadable."""
    import yaml

    try:
        config = yaml.safe_load((Path(run_dir) / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):  # a UnicodeDecodeError (not UTF-8) is a ValueError
        return None
    method = config.get("method") if isinstance(config, dict) else None
    try:
        return ArmSpec.of(method) if isinstance(method, dict) else None
    except (TypeError, ValueError):  # a hand-damaged method section: checked as an unknown arm
        return None


def _describe(arm: ArmSpec | None) -> str:
    if arm is None:
        return "every arm (no method section in config.yaml)"
    kinds = [k for k, on in (("TIS", arm.tis), ("IS", arm.is_level is not None and not arm.tis),
                             ("rejection", arm.rejection is not None), ("SC", arm.sc)) if on]
    return f"a {' and '.join(kinds)} arm by its config" if kinds else "an arm without TIS or SC by its config"


def arm_train_metrics(arm: ArmSpec | None) -> tuple[str, ...]:
    """The train metrics ``arm`` logs beyond every arm's: its weight's, its rejection mask's, its head's."""
    if arm is None:
        return ()
    names: list[str] = []
    if arm.tis:
        names += TIS_TRAIN_METRICS
    if arm.rollout_correction is not None and arm.is_level is not None:
        names += IS_TRAIN_METRICS
    if arm.rejection is not None:
        names += REJECTION_TRAIN_METRICS
    if arm.sc:
        names += SC_TRAIN_METRICS
    return tuple(names)


def required_train_metrics(arm: ArmSpec | None) -> tuple[str, ...]:
    """Train metric names every row of ``arm`` must carry (run_contract.md, "Metric names"); ``arm=None``
    (a run folder without its method config): the metrics of every arm."""
    return (*EVERY_ARM_TRAIN_METRICS, *arm_train_metrics(arm))


@dataclass
class ValFile:
    """One parsed ``val/step_NNNNNN.jsonl``: its lines as columns (one list per field)."""

    path: Path
    step: int
    columns: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def n_lines(self) -> int:
        return len(self.columns.get("acc", []))


@dataclass
class RunData:
    """A run directory as parsed by :func:`read_run` (``metrics`` is None when unreadable)."""

    run_dir: Path
    metrics: dict[str, Any] | None
    val_files: dict[int, ValFile]  # by step; only the steps that have a val row
    k: int | None = None  # samples per problem (the ``n`` of ``mean@n``)
    problems: dict[str, tuple[str, ...]] | None = None  # set -> sorted problem ids (first val step)
    repeat_files: dict[tuple[int, int], ValFile] = field(default_factory=dict)  # by (step, repeat >= 1)


# -- small helpers --------------------------------------------------------------------------------
def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _finite_or_null(x: Any) -> bool:
    return x is None or (_is_number(x) and math.isfinite(x))


def _is_iso(x: Any) -> bool:
    if not isinstance(x, str):
        return False
    try:
        dt.datetime.fromisoformat(x)
    except ValueError:
        return False
    return True


def _steps_problems(steps: Sequence[int]) -> list[str]:
    """Describe duplicates, decreases and gaps in a train step sequence that must be 1..N."""
    out: list[str] = []
    seen: set[int] = set()
    dup_set: set[int] = set()
    for s in steps:
        if s in seen:
            dup_set.add(s)
        seen.add(s)
    dups = sorted(dup_set)
    if dups:
        out.append(f"duplicate steps {_short(dups)}")
    decreasing = [(a, b) for a, b in zip(steps, steps[1:], strict=False) if b < a]
    if decreasing:
        out.append("steps not increasing: " + ", ".join(f"{b} after {a}" for a, b in decreasing[:MAX_EXAMPLES]))
    if steps:
        missing = sorted(set(range(1, max(steps) + 1)) - seen)
        if missing:
            out.append(f"missing steps {_short(missing)}")
    return out


def _short(items: Sequence[Any], limit: int = 8) -> str:
    """``[a, b, c]``, or the first ``limit`` items and the total count when there are more."""
    items = list(items)
    text = ", ".join(str(i) for i in items[:limit])
    if len(items) > limit:
        return f"[{text}, ...] ({len(items)} in all)"
    return f"[{text}]"


class _Issues:
    """Collects violations; repeated line errors of one kind in one file are summarised."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self._lines: dict[tuple[Path, str], list[str]] = {}
        self._counts: dict[tuple[Path, str], int] = defaultdict(int)

    def add(self, path: Path, message: str) -> None:
        self.items.append(f"{path}: {message}")

    def line(self, path: Path, kind: str, lineno: int, detail: str) -> None:
        key = (path, kind)
        self._counts[key] += 1
        examples = self._lines.setdefault(key, [])
        if len(examples) < MAX_EXAMPLES:
            examples.append(f"line {lineno}: {detail}")

    def result(self) -> list[str]:
        out = list(self.items)
        for (path, kind), examples in self._lines.items():
            extra = self._counts[(path, kind)] - len(examples)
            more = f"; and {extra} more such lines" if extra else ""
            out.append(f"{path}: {kind} ({'; '.join(examples)}{more})")
        return out


def _read_text(path: Path, issues: _Issues) -> str | None:
    """``path``'s text (UTF-8), or None with the reason recorded: unreadable, or bytes that are not UTF-8."""
    try:
        return path.read_bytes().decode("utf-8")
    except OSError as e:
        issues.add(path, f"cannot read: {e.strerror or e}")
    except UnicodeDecodeError as e:
        issues.add(path, f"not UTF-8 text (byte {e.start}: {e.reason}); the file is damaged")
    return None


def _check_config_file(path: Path, issues: _Issues) -> bool:
    """``config.yaml`` is UTF-8 text holding a YAML mapping; False (the reason recorded) when not."""
    import yaml

    text = _read_text(path, issues)
    if text is None:
        return False
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as e:
        issues.add(path, f"not valid YAML ({str(e).splitlines()[0]})")
        return False
    if not isinstance(config, dict):
        issues.add(path, "empty file" if not text.strip() else "not a YAML mapping of config keys")
        return False
    return True


# -- metrics.json ---------------------------------------------------------------------------------
def _check_run_section(run: Any, train_steps: list[int], path: Path, issues: _Issues) -> None:
    if not isinstance(run, dict):
        issues.add(path, "'run' must be an object")
        return
    for key in ("name", "method", "backend", "config_sha256"):
        if not isinstance(run.get(key), str) or not run.get(key):
            issues.add(path, f"run.{key} must be a non-empty string, got {run.get(key)!r}")
    method = run.get("method")
    if isinstance(method, str) and method and not re.fullmatch(r"[A-Za-z0-9_]+", method):
        issues.add(path, f"run.method {method!r} must be a name made of letters, digits and '_' "
                         f"(declared arms: {', '.join(all_arms())})")
    sha = run.get("config_sha256")
    if isinstance(sha, str) and sha and not re.fullmatch(r"[0-9a-fA-F]+", sha):
        issues.add(path, f"run.config_sha256 must be hexadecimal, got {sha!r}")
    for key in ("seed", "total_steps", "last_step"):
        if not _is_int(run.get(key)):
            issues.add(path, f"run.{key} must be an integer, got {run.get(key)!r}")
    status = run.get("status")
    if status not in RUN_STATUSES:
        issues.add(path, f"run.status must be one of {', '.join(RUN_STATUSES)}, got {status!r}")
    versions = run.get("versions")
    if not isinstance(versions, dict) or not all(isinstance(v, str) for v in versions.values()):
        issues.add(path, f"run.versions must be an object of strings, got {versions!r}")
    last_train = train_steps[-1] if train_steps else 0
    last_step, total = run.get("last_step"), run.get("total_steps")
    if _is_int(last_step) and last_step != last_train:
        issues.add(path, f"run.last_step is {last_step} but the last train step is {last_train}")
    if _is_int(total):
        if total < 0:
            issues.add(path, f"run.total_steps must be >= 0, got {total}")
        elif last_train > total:
            issues.add(path, f"train reaches step {last_train}, beyond run.total_steps {total}")
        elif status == "finished" and last_train != total:
            issues.add(path, f"run.status is 'finished' but train stops at step {last_train} of "
                             f"run.total_steps {total}")
    if "seed_fixes" in run:
        _check_seed_fixes(run["seed_fixes"], path, issues)
    _check_attempts(run.get("attempts"), status, last_train, path, issues)


def _check_seed_fixes(fixes: Any, path: Path, issues: _Issues) -> None:
    """Optional ``run.seed_fixes`` (``runners.run.run_contract.seed_fixes_record``)."""
    if not isinstance(fixes, dict):
        issues.add(path, f"run.seed_fixes must be an object, got {type(fixes).__name__}")
        return
    streams, how, not_fixed = fixes.get("streams"), fixes.get("how"), fixes.get("not_fixed")
    if not isinstance(streams, list) or not all(isinstance(x, str) and x in SEED_STREAMS for x in streams):
        issues.add(path, f"run.seed_fixes.streams must be a list of {', '.join(SEED_STREAMS)}, got {streams!r}")
    elif streams != sorted(set(streams)):
        issues.add(path, f"run.seed_fixes.streams must be sorted and without repeats, got {streams!r}")
    elif not isinstance(how, dict) or sorted(how) != streams or not all(isinstance(v, str) for v in how.values()):
        issues.add(path, "run.seed_fixes.how must map each of run.seed_fixes.streams to a string")
    if not isinstance(not_fixed, dict) or not all(isinstance(v, str) for v in not_fixed.values()):
        issues.add(path, f"run.seed_fixes.not_fixed must be an object of strings, got {not_fixed!r}")
    if not isinstance(fixes.get("reproducible"), bool):
        issues.add(path, f"run.seed_fixes.reproducible must be true or false, got {fixes.get('reproducible')!r}")


def _check_attempts(attempts: Any, status: Any, last_train: int, path: Path, issues: _Issues) -> None:
    if not isinstance(attempts, list):
        issues.add(path, f"run.attempts must be a list, got {type(attempts).__name__}")
        return
    if not attempts:
        if last_train > 0:
            issues.add(path, f"run.attempts is empty but train has {last_train} steps")
        return
    for i, a in enumerate(attempts):
        where = f"run.attempts[{i}]"
        if not isinstance(a, dict):
            issues.add(path, f"{where} must be an object")
            continue
        if not _is_iso(a.get("started")):
            issues.add(path, f"{where}.started must be an ISO-8601 time, got {a.get('started')!r}")
        ended = a.get("ended")
        if ended is not None and not _is_iso(ended):
            issues.add(path, f"{where}.ended must be an ISO-8601 time or null, got {ended!r}")
        if ended is None and i < len(attempts) - 1:
            issues.add(path, f"{where}.ended is null but a later attempt exists (only the last may be open)")
        start, end = a.get("start_step"), a.get("end_step")
        if not _is_int(start) or start < 0:
            issues.add(path, f"{where}.start_step must be an integer >= 0, got {start!r}")
        if end is not None and (not _is_int(end) or (_is_int(start) and end < start)):
            issues.add(path, f"{where}.end_step must be null or an integer >= start_step, got {end!r}")
        if not isinstance(a.get("status"), str):
            issues.add(path, f"{where}.status must be a string, got {a.get('status')!r}")
    last = attempts[-1]
    if isinstance(last, dict):
        if _is_int(last.get("start_step")) and last["start_step"] > last_train:
            issues.add(path, f"the last attempt starts at step {last['start_step']} but train ends at {last_train}")
        if status in ("finished", "failed", "stopped"):
            if last.get("ended") is None:
                issues.add(path, f"run.status is {status!r} but the last attempt is still open (ended null)")
            if last.get("status") != status:
                issues.add(path, f"run.status is {status!r} but the last attempt's status is {last.get('status')!r}")
            if _is_int(last.get("end_step")) and last["end_step"] != last_train:
                issues.add(path, f"the last attempt ends at step {last['end_step']} but train ends at {last_train}")


def _check_train(train: list[Any], method: str | None, traits: ArmSpec | None, path: Path,
                 issues: _Issues) -> list[int]:
    steps: list[int] = []
    required = required_train_metrics(traits)
    missing: dict[str, list[int]] = defaultdict(list)
    bad: dict[str, list[str]] = defaultdict(list)
    for i, row in enumerate(train):
        if not isinstance(row, dict) or not _is_int(row.get("step")):
            issues.add(path, f"train[{i}] must be an object with an integer 'step'")
            continue
        step = row["step"]
        steps.append(step)
        for name in required:
            if name not in row:
                missing[name].append(step)
        for key, value in row.items():
            if key != "step" and not _finite_or_null(value):
                bad[key].append(f"step {step}: {value!r}")
    for problem in _steps_problems(steps):
        issues.add(path, f"train: {problem}")
    for name, where in missing.items():
        issues.add(path, f"train metric {name!r} (required for method {method!r}: {_describe(traits)}) missing in {len(where)} of "
                         f"{len(steps)} rows, first at step {where[0]}")
    for key, where in bad.items():
        issues.add(path, f"train metric {key!r} must be a finite number or null: {', '.join(where[:MAX_EXAMPLES])}"
                         + (f" and {len(where) - MAX_EXAMPLES} more" if len(where) > MAX_EXAMPLES else ""))
    return steps


def _check_val_rows(val: list[Any], last_train: int, path: Path, issues: _Issues) -> dict[int, dict[str, Any]]:
    """Validate the ``val`` list; return the well-formed rows by step."""
    rows: dict[int, dict[str, Any]] = {}
    prev = None
    for i, row in enumerate(val):
        if not isinstance(row, dict) or not _is_int(row.get("step")):
            issues.add(path, f"val[{i}] must be an object with an integer 'step'")
            continue
        step = row["step"]
        if prev is not None and step <= prev:
            issues.add(path, f"val steps must be strictly increasing: step {step} after step {prev}")
        prev = step
        if step < 0 or step > last_train:
            issues.add(path, f"val step {step} outside 0..{last_train} (the trained steps)")
        bad = [f"{k}={v!r}" for k, v in row.items() if k != "step" and not _finite_or_null(v)]
        if bad:
            issues.add(path, f"val step {step}: values must be finite numbers or null: {', '.join(bad[:MAX_EXAMPLES])}")
        rows.setdefault(step, row)
    return rows


def _core_sets(row: dict[str, Any]) -> dict[str, int]:
    """``{ds: n}`` from the ``val-core/<ds>/acc/mean@<n>`` keys of a val row."""
    out: dict[str, int] = {}
    for key in row:
        m = VAL_CORE_RE.match(key)
        if m:
            out.setdefault(m["ds"], int(m["n"]))
    return out


# -- val jsonl ------------------------------------------------------------------------------------
def _read_val_file(path: Path, step: int, issues: _Issues) -> ValFile | None:
    """Parse one jsonl file, checking each line's schema; lines with errors are dropped."""
    text = _read_text(path, issues)
    if text is None:
        return None
    cols: dict[str, list[Any]] = {f: [] for f in SAMPLE_FIELDS}
    loads = json.loads
    n_lines = 0
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        n_lines += 1
        try:
            obj = loads(line)
        except ValueError as e:
            issues.line(path, "invalid JSON", lineno, str(e))
            continue
        if not isinstance(obj, dict):
            issues.line(path, "line is not a JSON object", lineno, repr(obj)[:60])
            continue
        missing = [f for f in SAMPLE_FIELDS if f not in obj]
        if missing:
            issues.line(path, "missing fields", lineno, ", ".join(missing))
            continue
        wrong = sample_problems(obj)
        for name, kind in wrong:
            issues.line(path, kind, lineno, repr(obj[name]))
        if not wrong:
            for f in SAMPLE_FIELDS:
                cols[f].append(obj[f])
    cols["acc"] = [int(a) for a in cols["acc"]]
    if n_lines == 0:
        issues.add(path, "no samples (the file is empty)")
    return ValFile(path=path, step=step, columns=cols)


def _check_val_file(vf: ValFile, row: dict[str, Any], metrics_path: Path, issues: _Issues
                    ) -> tuple[int | None, dict[str, tuple[str, ...]]]:
    """Cross-check one parsed jsonl against its val row; return (n, set -> sorted problem ids)."""
    cols = vf.columns
    problem_set: dict[str, str] = {}
    samples: dict[str, list[int]] = defaultdict(list)
    acc_sum: dict[str, int] = defaultdict(int)
    acc_n: dict[str, int] = defaultdict(int)
    clash: set[str] = set()
    for ds, pid, sample, acc in zip(cols["data_source"], cols["problem_id"], cols["sample"], cols["acc"], strict=True):
        if problem_set.setdefault(pid, ds) != ds:
            clash.add(pid)
        samples[pid].append(sample)
        acc_sum[ds] += acc
        acc_n[ds] += 1
    if clash:
        issues.add(vf.path, f"problem ids appear in more than one data_source: {_short(sorted(clash))}")
    core = _core_sets(row)
    file_sets = sorted(acc_n)
    if not core:
        issues.add(metrics_path, f"val step {vf.step} has no 'val-core/<ds>/acc/mean@<n>' metric")
    elif sorted(core) != file_sets and file_sets:
        issues.add(vf.path, f"evaluation sets {file_sets} differ from those of the val row of step {vf.step} "
                            f"in metrics.json: {sorted(core)}")
    for ds in core:
        for name in val_metric_names(ds, core[ds])[1:]:
            if name not in row:
                issues.add(metrics_path, f"val step {vf.step} lacks {name!r}")
    ns = set(core.values())
    if len(ns) > 1:
        issues.add(metrics_path, f"val step {vf.step} mixes sample counts across sets: {core}")
    n = next(iter(ns)) if len(ns) == 1 else None
    if n is not None:
        wrong = []
        for pid, ids in samples.items():
            if sorted(ids) != list(range(n)):
                wrong.append(f"{pid} has samples {_short(sorted(ids), 10)}")
        if wrong:
            issues.add(vf.path, f"every problem must have samples 0..{n - 1} exactly once (n={n} from "
                                f"mean@{n}): {'; '.join(wrong[:MAX_EXAMPLES])}"
                                + (f"; and {len(wrong) - MAX_EXAMPLES} more problems" if len(wrong) > MAX_EXAMPLES else ""))
        for ds, n_ds in core.items():
            key = f"val-core/{ds}/acc/mean@{n_ds}"
            value = row.get(key)
            if ds in acc_n and _is_number(value) and abs(value - acc_sum[ds] / acc_n[ds]) > ACC_TOLERANCE:
                issues.add(vf.path, f"mean acc of {ds} is {acc_sum[ds] / acc_n[ds]:.6f} but metrics.json val step "
                                    f"{vf.step} has {key} = {value}")
    by_set: dict[str, list[str]] = defaultdict(list)
    for pid, ds in problem_set.items():
        by_set[ds].append(pid)
    return n, {ds: tuple(sorted(p)) for ds, p in sorted(by_set.items())}


# -- the run --------------------------------------------------------------------------------------
def read_run(run_dir: str | Path) -> tuple[RunData, list[str]]:
    """Parse a run directory and check it against the contract.

    Returns the parsed files and every violation found (each ``"<file>: <what is wrong>"``).
    The parsed data is only trustworthy when the list is empty.
    """
    run_dir = Path(run_dir)
    issues = _Issues()
    data = RunData(run_dir=run_dir, metrics=None, val_files={})
    if not run_dir.is_dir():
        issues.add(run_dir, "not a directory")
        return data, issues.result()
    config_ok = (run_dir / CONFIG_FILE).is_file()
    if not config_ok:
        issues.add(run_dir / CONFIG_FILE, "missing (every run keeps its resolved config)")
    else:
        config_ok = _check_config_file(run_dir / CONFIG_FILE, issues)
    mpath = run_dir / METRICS_FILE
    if not mpath.is_file():
        issues.add(mpath, "missing")
        return data, issues.result()
    text = _read_text(mpath, issues)
    if text is None:
        return data, issues.result()
    try:
        metrics = json.loads(text)
    except ValueError as e:
        issues.add(mpath, f"not valid JSON ({e})" if text.strip() else "empty file")
        return data, issues.result()
    if not isinstance(metrics, dict):
        issues.add(mpath, "top level must be a JSON object")
        return data, issues.result()
    data.metrics = metrics
    if metrics.get("schema_version") != SCHEMA_VERSION:
        issues.add(mpath, f"schema_version is {metrics.get('schema_version')!r}, expected {SCHEMA_VERSION}")
        return data, issues.result()
    for key in ("run", "train", "val"):
        if key not in metrics:
            issues.add(mpath, f"missing section {key!r}")
    train, val = metrics.get("train", []), metrics.get("val", [])
    if not isinstance(train, list) or not isinstance(val, list):
        issues.add(mpath, "'train' and 'val' must be lists")
        return data, issues.result()
    run = metrics.get("run")
    method = run.get("method") if isinstance(run, dict) and isinstance(run.get("method"), str) else None
    steps = _check_train(train, method, run_arm(run_dir), mpath, issues)
    _check_run_section(run, steps, mpath, issues)
    edited = config_edited(run_dir) if config_ok else None
    if edited is not None:
        issues.add(run_dir / CONFIG_FILE, edited)
    last_train = max(steps) if steps else 0
    rows = _check_val_rows(val, last_train, mpath, issues)

    vdir = run_dir / VAL_DIR
    if vdir.is_dir():
        for p in sorted(vdir.iterdir()):
            if p.suffix == ".jsonl" and not VAL_FILE_RE.match(p.name):
                issues.add(p, "unexpected file name (expected step_NNNNNN.jsonl)")
    core_ref: tuple[str, dict[str, int]] | None = None
    first_path: Path | None = None
    for step, row in rows.items():
        core = _core_sets(row)
        if core_ref is None:
            core_ref = (f"step {step}", core)
        elif core != core_ref[1]:
            issues.add(mpath, f"val step {step} has sets/n {core}, but {core_ref[0]} has {core_ref[1]}")
        vpath = vdir / val_file_name(step)
        if not vpath.is_file():
            issues.add(vpath, f"missing (metrics.json has a val row for step {step})")
            continue
        before = len(issues.result())
        vf = _read_val_file(vpath, step, issues)
        if vf is None:
            continue
        data.val_files[step] = vf
        if len(issues.result()) > before:
            continue  # the file's own lines are broken: cross-checks on the rest would only mislead
        n, problems = _check_val_file(vf, row, mpath, issues)
        if first_path is None:
            data.k, data.problems, first_path = n, problems, vpath
        elif problems != data.problems:
            diff = describe_problem_diff(data.problems or {}, problems)
            issues.add(vpath, f"problems differ from those of {first_path.name}: {diff}")
    _read_repeats(vdir, data, issues)
    return data, issues.result()


def _read_repeats(vdir: Path, data: RunData, issues: _Issues) -> None:
    """Parse and check ``val/repeat_RR/step_NNNNNN.jsonl`` against the main file of the same step."""
    if not vdir.is_dir():
        return
    for rdir in sorted(p for p in vdir.iterdir() if p.is_dir()):
        m = REPEAT_DIR_RE.match(rdir.name)
        if not m or int(m["repeat"]) < 1:
            issues.add(rdir, "unexpected folder in val/ (expected repeat_RR with RR >= 01)")
            continue
        repeat = int(m["repeat"])
        for p in sorted(rdir.iterdir()):
            fm = VAL_FILE_RE.match(p.name)
            if not fm:
                issues.add(p, "unexpected file name (expected step_NNNNNN.jsonl)")
                continue
            step = int(fm["step"])
            main = data.val_files.get(step)
            if main is None:
                continue  # no val row for this step: ignored like a main file without one
            before = len(issues.result())
            vf = _read_val_file(p, step, issues)
            if vf is None or len(issues.result()) > before:
                continue
            data.repeat_files[(step, repeat)] = vf
            _check_repeat_file(vf, main, data.k, issues)


def _problem_samples(vf: ValFile) -> dict[tuple[str, str], list[int]]:
    out: dict[tuple[str, str], list[int]] = defaultdict(list)
    for ds, pid, sample in zip(vf.columns["data_source"], vf.columns["problem_id"], vf.columns["sample"], strict=True):
        out[(ds, pid)].append(sample)
    return out


def _check_repeat_file(vf: ValFile, main: ValFile, n: int | None, issues: _Issues) -> None:
    got, ref = _problem_samples(vf), _problem_samples(main)
    if set(got) != set(ref):
        lack = sorted(f"{ds}/{pid}" for ds, pid in set(ref) - set(got))
        extra = sorted(f"{ds}/{pid}" for ds, pid in set(got) - set(ref))
        issues.add(vf.path, f"problems differ from {main.path}: lacks {_short(lack)}, extra {_short(extra)}")
        return
    if n is not None:
        wrong = [f"{pid} has samples {_short(sorted(ids), 10)}" for (_, pid), ids in got.items()
                 if sorted(ids) != list(range(n))]
        if wrong:
            issues.add(vf.path, f"every problem must have samples 0..{n - 1} exactly once (as in {main.path.name}): "
                                + "; ".join(wrong[:MAX_EXAMPLES]))


def describe_problem_diff(ref: dict[str, tuple[str, ...]], other: dict[str, tuple[str, ...]]) -> str:
    """Human description of how two ``set -> problem ids`` mappings differ."""
    parts = []
    for ds in sorted(set(ref) | set(other)):
        if ds not in other:
            parts.append(f"set {ds!r} absent")
        elif ds not in ref:
            parts.append(f"extra set {ds!r}")
        else:
            lack = sorted(set(ref[ds]) - set(other[ds]))
            extra = sorted(set(other[ds]) - set(ref[ds]))
            if lack:
                parts.append(f"{ds} lacks {_short(lack)}")
            if extra:
                parts.append(f"{ds} has extra {_short(extra)}")
    return "; ".join(parts)


def check_run_dir(run_dir: str | Path) -> list[str]:
    """Every violation of run_contract.md in ``run_dir``; an empty list means the run is valid.

    Each violation names the file and what is wrong, e.g.
    ``".../metrics.json: train: missing steps [4, 5]"``.
    """
    return read_run(run_dir)[1]


def _sweep_folder_runs(folder: Path) -> list[str]:
    """The run folders in ``folder`` when it is a sweep folder (no record of its own, run folders in it)."""
    if not folder.is_dir() or (folder / METRICS_FILE).exists() or (folder / CONFIG_FILE).exists():
        return []
    try:
        return sorted(p.name for p in folder.iterdir() if p.is_dir() and (p / METRICS_FILE).exists())
    except OSError:
        return []


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m runners.run.contract_check RUN_DIR [RUN_DIR...]``: print violations; exit 1 if any, 2 when given a
    sweep folder instead of run folders."""
    parser = argparse.ArgumentParser(prog="python -m runners.run.contract_check", description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path, help="run directories to check")
    args = parser.parse_args(argv)
    for folder in args.run_dirs:
        if sweep := _sweep_folder_runs(folder):
            # the run folders themselves, not {folder}/*/, which holds the report/ folder too
            runs = " ".join(str(folder / run) for run in sweep) if len(sweep) <= 4 else f"$(dirname {folder}/*/{METRICS_FILE})"
            print(f"{folder} is a sweep folder (it holds run folders such as {', '.join(sweep[:3])}), not a run folder; "
                  f"pass the run folders: python -m runners.run.contract_check {runs}", file=sys.stderr)
            return 2
    failed = 0
    for run_dir in args.run_dirs:
        violations = check_run_dir(run_dir)
        if violations:
            failed += 1
            print(f"FAIL {run_dir} ({len(violations)} violations)")
            for v in violations:
                print(f"  - {v}")
        else:
            print(f"ok   {run_dir}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
