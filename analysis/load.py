"""Load a sweep directory (run directories of run_contract.md) into pandas frames.

Every run directory is parsed and checked by :func:`analysis.contract.read_run`; any violation
in any run, runs that disagree on the evaluation protocol (samples per problem, evaluation sets,
problem ids) or an empty sweep raise :class:`SweepError` listing every problem with the file it
comes from. Nothing is dropped silently: the only things skipped are hidden folders, the
``report`` folder and folders that hold none of ``metrics.json``, ``config.yaml``, ``val/`` (they
are listed in :attr:`Sweep.ignored`). Runs still in progress are loaded and flagged
(``runs.in_progress``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.contract import (
    CONFIG_FILE,
    KNOWN_METHODS,
    METRICS_FILE,
    VAL_DIR,
    RunData,
    describe_problem_diff,
    read_run,
    val_file_name,
)

REPORT_DIR = "report"


class SweepError(ValueError):
    """A sweep that cannot be analysed faithfully; the message lists every reason."""

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


def method_sort_key(method: str) -> tuple[int, str]:
    """Order methods pg, tis, sc, sc_tis, then any other name alphabetically."""
    return (KNOWN_METHODS.index(method), "") if method in KNOWN_METHODS else (len(KNOWN_METHODS), method)


def order_methods(methods) -> list[str]:
    """Distinct ``methods`` in the canonical order of :func:`method_sort_key`."""
    return sorted(set(methods), key=method_sort_key)


@dataclass
class Sweep:
    """A loaded sweep.

    - ``runs``: one row per run (index ``run``): method, seed, backend, status, total_steps,
      last_step, n_evals, last_eval_step, in_progress, path; ordered by method then seed.
    - ``train``: one row per (run, step) with every train metric (NaN where null or absent).
    - ``val``: the ``val`` rows of metrics.json, one per (run, step).
    - ``samples``: one row per generated sample of every evaluation (the jsonl lines) with run and step.
    - ``correct``: number of correct samples per problem, index (run, step), columns
      (data_source, problem_id) in ``sets`` order and sorted problem ids.
    - ``k``: samples per problem; ``sets``: evaluation sets (sorted); ``problems``: ids per set.
    """

    root: Path
    runs: pd.DataFrame
    train: pd.DataFrame
    val: pd.DataFrame
    samples: pd.DataFrame
    correct: pd.DataFrame
    k: int
    sets: tuple[str, ...]
    problems: dict[str, tuple[str, ...]]
    ignored: list[Path] = field(default_factory=list)

    @cached_property
    def set_slices(self) -> list[slice]:
        """Column slice of each set (in ``sets`` order) in the ``correct`` columns."""
        out, start = [], 0
        for ds in self.sets:
            out.append(slice(start, start + len(self.problems[ds])))
            start += len(self.problems[ds])
        return out

    @property
    def methods(self) -> list[str]:
        return order_methods(self.runs["method"])

    @property
    def evaluated_runs(self) -> list[str]:
        """Runs with at least one evaluation, in ``runs`` order."""
        return [r for r in self.runs.index if self.runs.at[r, "n_evals"] > 0]

    def steps(self, run: str) -> np.ndarray:
        """Evaluated steps of ``run`` (ascending)."""
        if run not in self.correct.index.get_level_values(0):
            return np.array([], dtype=int)
        return self.correct.loc[run].index.to_numpy()

    def scores(self, run: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps, per-problem mean correctness of shape (n_steps, n_problems)) of ``run``."""
        block = self.correct.loc[run]
        return block.index.to_numpy(), block.to_numpy(dtype=float) / self.k

    def runs_of(self, method: str) -> list[str]:
        return [r for r in self.runs.index if self.runs.at[r, "method"] == method]


def _find_run_dirs(sweep_dir: Path) -> tuple[list[Path], list[Path]]:
    runs, ignored = [], []
    for p in sorted(sweep_dir.iterdir()):
        if not p.is_dir() or p.name.startswith(".") or p.name == REPORT_DIR:
            continue
        if (p / METRICS_FILE).exists() or (p / CONFIG_FILE).exists() or (p / VAL_DIR).is_dir():
            runs.append(p)
        else:
            ignored.append(p)
    return runs, ignored


def _protocol_errors(datas: list[RunData]) -> list[str]:
    """Differences in k, sets and problem ids between evaluated runs (against the first one)."""
    evaluated = [d for d in datas if d.val_files]
    if not evaluated:
        return []
    ref = evaluated[0]
    ref_file = ref.val_files[min(ref.val_files)].path
    errors = []
    for d in evaluated[1:]:
        f = d.val_files[min(d.val_files)].path
        if d.k != ref.k:
            errors.append(f"{f}: {d.k} samples per problem, but {ref_file} has {ref.k} "
                          "(runs must share the evaluation protocol)")
        if d.problems != ref.problems:
            diff = describe_problem_diff(ref.problems or {}, d.problems or {})
            errors.append(f"{f}: evaluation sets/problems differ from {ref_file}: {diff}")
    return errors


def load_sweep(sweep_dir: str | Path) -> Sweep:
    """Load and validate every run of ``sweep_dir``; raise :class:`SweepError` on any problem."""
    root = Path(sweep_dir)
    if not root.is_dir():
        raise SweepError(f"{root}: not a directory")
    if (root / METRICS_FILE).exists():
        raise SweepError(f"{root}: this is a run directory (it has {METRICS_FILE}); pass the sweep "
                         f"directory that contains it, {root.parent}")
    run_dirs, ignored = _find_run_dirs(root)
    if not run_dirs:
        raise SweepError(f"{root}: empty sweep, no run directories (folders with {METRICS_FILE}) found")
    datas, problems = [], []
    for rd in run_dirs:
        data, violations = read_run(rd)
        datas.append(data)
        problems += violations
    if problems:
        raise SweepError([f"{len(problems)} contract violations; fix or remove these runs:", *problems])
    names: dict[str, Path] = {}
    for d in datas:
        name = d.metrics["run"]["name"]
        if name in names:
            problems.append(f"{d.run_dir / METRICS_FILE}: run name {name!r} is also used by "
                            f"{names[name] / METRICS_FILE}")
        names[name] = d.run_dir
    problems += _protocol_errors(datas)
    if problems:
        raise SweepError(problems)
    evaluated = [d for d in datas if d.val_files]
    if not evaluated:
        raise SweepError(f"{root}: no run has an evaluation yet (no val rows in any {METRICS_FILE})")
    ref = evaluated[0]
    return _build(root, datas, ref.k, ref.problems, ignored)


def _build(root: Path, datas: list[RunData], k: int, problems: dict[str, tuple[str, ...]],
           ignored: list[Path]) -> Sweep:
    runs_rows, train_frames, val_rows, sample_frames = [], [], [], []
    for d in datas:
        run = d.metrics["run"]
        name = run["name"]
        val = d.metrics["val"]
        runs_rows.append({
            "run": name, "method": run["method"], "seed": run["seed"], "backend": run["backend"],
            "status": run["status"], "total_steps": run["total_steps"], "last_step": run["last_step"],
            "n_evals": len(val), "last_eval_step": val[-1]["step"] if val else np.nan,
            "in_progress": run["status"] == "running", "path": str(d.run_dir),
        })
        train = pd.DataFrame(d.metrics["train"], dtype=float)
        if train.empty:
            train = pd.DataFrame({"step": pd.Series(dtype=float)})
        train.insert(0, "run", name)
        train_frames.append(train)
        val_rows += [{"run": name, **row} for row in val]
        for step, vf in sorted(d.val_files.items()):
            frame = pd.DataFrame(vf.columns)
            frame.insert(0, "step", step)
            frame.insert(0, "run", name)
            sample_frames.append(frame)
    runs = pd.DataFrame(runs_rows).set_index("run")
    order = sorted(runs.index, key=lambda r: (method_sort_key(runs.at[r, "method"]), runs.at[r, "seed"], r))
    runs = runs.loc[order]
    train = pd.concat(train_frames, ignore_index=True)
    train["step"] = train["step"].astype(int)
    samples = pd.concat(sample_frames, ignore_index=True)
    sets = tuple(sorted(problems))
    columns = pd.MultiIndex.from_tuples([(ds, p) for ds in sets for p in problems[ds]],
                                        names=["data_source", "problem_id"])
    correct = samples.groupby(["run", "step", "data_source", "problem_id"], sort=False)["acc"].sum()
    correct = correct.unstack(["data_source", "problem_id"]).reindex(columns=columns)
    have = set(correct.index.get_level_values(0))
    index = [(r, s) for r in order if r in have for s in sorted(correct.loc[r].index)]
    correct = correct.loc[index].astype(int)
    return Sweep(
        root=root, runs=runs, train=train, val=pd.DataFrame(val_rows), samples=samples, correct=correct,
        k=int(k), sets=sets, problems=dict(problems), ignored=ignored,
    )


def val_path(sweep: Sweep, run: str, step: int) -> Path:
    """The jsonl file of ``run``'s evaluation at ``step``."""
    return Path(sweep.runs.at[run, "path"]) / VAL_DIR / val_file_name(step)
