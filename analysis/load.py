"""Load a sweep directory (run directories of run_contract.md) into pandas frames.

Every run directory is parsed and checked by :func:`runners.run.contract_check.read_run`, which reads every
file defensively (bytes that are not UTF-8, truncated or empty files are violations, never a crash).
A run folder with any violation in its own files -- ``metrics.json`` missing, unreadable or
off-contract (e.g. a run killed before its first step), ``config.yaml`` missing or edited after the
run wrote it, a ``val/*.jsonl`` that is damaged or disagrees with the record -- is skipped and listed
in :attr:`Sweep.skipped` with every reason, unless ``strict=True``, which raises instead. Runs that
disagree on the evaluation protocol (samples per problem, evaluation sets, problem ids), two runs
of one name, or a sweep with nothing to analyse raise :class:`SweepError` listing every problem
with the file it comes from.

Runs are pooled as seeds of one arm only with their peers (:mod:`analysis.peers`): a run trained
differently (a pooling key of its ``config.yaml`` differs) gets its own arm label naming the keys
(``sc [trainer.lr=0.002]``) and is listed in :attr:`Sweep.apart`; ``strict=True`` refuses such a
sweep. Keys a multirun of the sweep varied on purpose label every run with its value. Besides skipped runs, the only things left out are hidden folders,
the ``report`` folder and folders that hold none of ``metrics.json``, ``config.yaml``, ``val/``
(listed in :attr:`Sweep.ignored`). Runs still in progress are loaded and flagged
(``runs.in_progress``).

The data flow: the per-sample lines are reduced once, here, to the tidy table
:attr:`Sweep.counts`, one row per (run, step, repeat, data_source, problem_id) with the number of
correct samples out of ``k``; every table, interval, test and figure of the report reads it
(:attr:`Sweep.correct` is its repeat-0 view as a (run, step) x problem matrix).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.peers import Peers, group_runs, swept_keys
from runners.run import peer_keys, run_contract
from runners.run.contract_check import RunData, describe_problem_diff, read_run, run_arm
from runners.run.run_contract import CONFIG_FILE, METRICS_FILE, VAL_DIR

REPORT_DIR = "report"


class SweepError(ValueError):
    """A sweep that cannot be analysed faithfully; the message lists every reason."""

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


#: Table rank of a run whose saved config has no method section (after every arm with known traits).
UNKNOWN_RANK = 4


def method_sort_key(method: str, rank: int = UNKNOWN_RANK) -> tuple[int, str]:
    """Order arms by their rank (``ablations.arms.ArmSpec.rank``: uncorrected, corrected, SC, SC corrected),
    then by name: pg, tis, sc, sc_tis for the four arms; a new arm sits with the arms of its traits."""
    return (rank, method)


def order_methods(methods, ranks: dict[str, int] | None = None) -> list[str]:
    """Distinct ``methods`` in the order of :func:`method_sort_key` (``ranks``: method -> trait rank)."""
    ranks = ranks or {}
    return sorted(set(methods), key=lambda m: method_sort_key(m, ranks.get(m, UNKNOWN_RANK)))


@dataclass
class Sweep:
    """A loaded sweep.

    - ``runs``: one row per run (index ``run``): method (the arm label of :mod:`analysis.peers`: the
      method name, with the setting where the run is not a peer of its arm's other runs), arm (the
      method name itself), seed, backend, status, total_steps,
      last_step, n_evals, last_eval_step, in_progress, path, seed_fixes (the record's
      ``run.seed_fixes`` or None); ordered by method then seed.
    - ``train``: one row per (run, step) with every train metric (NaN where null or absent).
    - ``val``: the ``val`` rows of metrics.json, one per (run, step).
    - ``samples``: one row per generated sample of every evaluation (the jsonl lines) with run,
      step and repeat (0 = the main val file, r >= 1 = ``val/repeat_RR/``).
    - ``counts``: the tidy table, one row per (run, step, repeat, data_source, problem_id) with
      ``correct`` (correct samples out of ``k``); rows ordered like ``runs``, then step, repeat,
      set, problem id.
    - ``k``: samples per problem; ``sets``: evaluation sets (sorted); ``problems``: ids per set.
    - ``ignored``: folders that are no run; ``skipped``: run folders left out (path -> reasons).
    - ``peers``: the grouping of :mod:`analysis.peers`; ``apart`` (run -> {key: (its value, its
      peers' value)}) the runs trained differently from their peers, each its own arm label.
    """

    root: Path
    runs: pd.DataFrame
    train: pd.DataFrame
    val: pd.DataFrame
    samples: pd.DataFrame
    counts: pd.DataFrame
    k: int
    sets: tuple[str, ...]
    problems: dict[str, tuple[str, ...]]
    ignored: list[Path] = field(default_factory=list)
    skipped: dict[Path, list[str]] = field(default_factory=dict)
    peers: Peers | None = None

    @property
    def apart(self) -> dict[str, dict]:
        return self.peers.apart if self.peers is not None else {}

    @cached_property
    def correct(self) -> pd.DataFrame:
        """Repeat-0 counts as a matrix: index (run, step), columns (data_source, problem_id) in set order."""
        return correct_matrix(self.counts, self.columns)

    @cached_property
    def columns(self) -> pd.MultiIndex:
        """(data_source, problem_id) of every problem, sets in ``sets`` order, ids sorted."""
        return pd.MultiIndex.from_tuples([(ds, p) for ds in self.sets for p in self.problems[ds]],
                                         names=["data_source", "problem_id"])

    @cached_property
    def avg_scores(self) -> pd.Series:
        """``avg`` mean@k (mean of the sets' mean@k) of every (run, step), from :attr:`correct`."""
        x = self.correct.to_numpy(dtype=float) / self.k
        avg = np.mean([x[:, sl].mean(axis=1) for sl in self.set_slices], axis=0)
        return pd.Series(avg, index=self.correct.index, name="avg")

    @property
    def repeats(self) -> int:
        """Largest number of evaluations of one checkpoint in the sweep (1 = no repeats)."""
        return int(self.counts["repeat"].max()) + 1 if len(self.counts) else 1

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
        return order_methods(self.runs["method"], dict(zip(self.runs["method"], self.runs["arm_rank"], strict=True)))

    @property
    def evaluated_runs(self) -> list[str]:
        """Runs with at least one evaluation, in ``runs`` order."""
        return self.runs.index[self.runs["n_evals"].to_numpy() > 0].tolist()

    @cached_property
    def _rows(self) -> dict[str, np.ndarray]:
        """Positions of each run's rows in :attr:`correct` (one grouping, so that a run's look-up does not
        scan the whole matrix: per-run loops stay linear in the runs)."""
        runs = self.correct.index.get_level_values(0).to_numpy()
        return dict(pd.Series(np.arange(len(runs))).groupby(runs, sort=False).indices)

    @cached_property
    def _matrix(self) -> tuple[np.ndarray, np.ndarray]:
        """(step of each row, correct counts as floats) of :attr:`correct`."""
        return self.correct.index.get_level_values(1).to_numpy(), self.correct.to_numpy(dtype=float)

    def rows(self, run: str) -> np.ndarray:
        """Positions of ``run``'s rows in :attr:`correct` and :attr:`avg_scores` (ascending step; none if unevaluated)."""
        return self._rows.get(run, np.array([], dtype=int))

    def steps(self, run: str) -> np.ndarray:
        """Evaluated steps of ``run`` (ascending)."""
        return self._matrix[0][self.rows(run)]

    def scores(self, run: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps, per-problem mean correctness of shape (n_steps, n_problems)) of ``run``."""
        rows = self._rows[run]
        return self._matrix[0][rows], self._matrix[1][rows] / self.k

    def runs_of(self, method: str) -> list[str]:
        """Runs of ``method``, in ``runs`` order."""
        return self.runs.index[self.runs["method"].to_numpy() == method].tolist()


def find_run_dirs(sweep_dir: Path) -> tuple[list[Path], list[Path]]:
    """(run folders, ignored folders) of ``sweep_dir``, sorted by name (the folders :func:`load_sweep` reads)."""
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


def _apart_errors(peers: Peers, datas: list[RunData]) -> list[str]:
    """--strict: each run trained differently from its peers, with the keys that differ."""
    where = {d.metrics["run"]["name"]: d.run_dir / run_contract.CONFIG_FILE for d in datas}
    return [f"{where[line.split(':', 1)[0]]}: run {line}" for line in peers.apart_lines()]


def _unlisted_val_files(datas: list[RunData]) -> list[str]:
    """Runs whose ``val/`` holds evaluation files that their ``metrics.json`` lists no val row for."""
    out = []
    for d in datas:
        files = sorted((d.run_dir / VAL_DIR).glob("step_*.jsonl")) if (d.run_dir / VAL_DIR).is_dir() else []
        if files and not d.metrics.get("val"):
            out.append(f"{d.run_dir / METRICS_FILE}: no val rows, but {d.run_dir / VAL_DIR} holds {len(files)} "
                       f"evaluation file(s) (e.g. {files[0].name}) that the record does not list")
    return out


def load_sweep(sweep_dir: str | Path, strict: bool = False) -> Sweep:
    """Load and validate every run of ``sweep_dir``; raise :class:`SweepError` on any problem.

    With ``strict=False`` (the default) run folders with a violation in their own files are skipped and
    listed in :attr:`Sweep.skipped`, and runs trained differently from their peers are shown apart
    (:attr:`Sweep.apart`); with ``strict=True`` either raises like any violation.
    """
    root = Path(sweep_dir)
    if not root.is_dir():
        raise SweepError(f"{root}: not a directory")
    if (root / METRICS_FILE).exists():
        raise SweepError(f"{root}: this is a run directory (it has {METRICS_FILE}); pass the sweep "
                         f"directory that contains it, {root.parent}")
    try:
        run_dirs, ignored = find_run_dirs(root)
    except OSError as e:
        raise SweepError(f"{root}: cannot list the folder ({e.strerror or e})") from e
    if not run_dirs:
        raise SweepError(f"{root}: empty sweep, no run directories (folders with {METRICS_FILE}) found")
    datas, problems = [], []
    skipped: dict[Path, list[str]] = {}
    for rd in run_dirs:
        data, violations = read_run(rd)
        if violations and not strict:
            skipped[rd] = violations
            continue
        datas.append(data)
        problems += violations
    if problems:
        raise SweepError([f"{len(problems)} contract violations; fix or remove these runs:", *problems])
    if not datas:
        raise SweepError([f"{root}: no run folder has a valid record ({METRICS_FILE}, {CONFIG_FILE}) and "
                          f"readable {VAL_DIR} files; skipped:", *[f"{p}: {v}" for p, vs in skipped.items() for v in vs]])
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
        unlisted = _unlisted_val_files(datas)
        if unlisted:
            raise SweepError([f"{root}: no run has an evaluation in its {METRICS_FILE}, though evaluation files "
                              "are on disk:", *unlisted])
        raise SweepError(f"{root}: no run has an evaluation yet (no val rows in any {METRICS_FILE})")
    peers = group_runs([(d.metrics["run"]["name"], d.metrics["run"]["method"], d.run_dir,
                         peer_keys.read_config(d.run_dir) or {}) for d in datas], swept_keys(root))
    if strict and peers.apart:
        raise SweepError([f"{len(peers.apart)} run(s) trained differently from their peers (--strict); their "
                          "scores must not be pooled:", *_apart_errors(peers, datas)])
    ref = evaluated[0]
    sweep = _build(root, datas, ref.k, ref.problems, ignored, peers.labels)
    sweep.skipped = skipped
    sweep.peers = peers
    return sweep


def _build(root: Path, datas: list[RunData], k: int, problems: dict[str, tuple[str, ...]],
           ignored: list[Path], labels: dict[str, str] | None = None) -> Sweep:
    runs_rows, train_frames, val_rows, sample_frames = [], [], [], []
    for d in datas:
        run = d.metrics["run"]
        name = run["name"]
        val = d.metrics["val"]
        runs_rows.append({
            "run": name, "method": (labels or {}).get(name, run["method"]), "arm": run["method"], "arm_rank": _arm_rank(d.run_dir), "seed": run["seed"],
            "backend": run["backend"],
            "status": run["status"], "total_steps": run["total_steps"], "last_step": run["last_step"],
            "n_evals": len(val), "last_eval_step": val[-1]["step"] if val else np.nan,
            "in_progress": run["status"] == "running", "path": str(d.run_dir),
            "seed_fixes": run.get("seed_fixes"),
        })
        train = pd.DataFrame(d.metrics["train"], dtype=float)
        if train.empty:
            train = pd.DataFrame({"step": pd.Series(dtype=float)})
        train.insert(0, "run", name)
        train_frames.append(train)
        val_rows += [{"run": name, **row} for row in val]
        files = [(step, 0, vf) for step, vf in d.val_files.items()]
        files += [(step, r, vf) for (step, r), vf in d.repeat_files.items()]
        for step, repeat, vf in sorted(files, key=lambda t: (t[0], t[1])):
            frame = pd.DataFrame(vf.columns)
            frame.insert(0, "repeat", repeat)
            frame.insert(0, "step", step)
            frame.insert(0, "run", name)
            sample_frames.append(frame)
    runs = pd.DataFrame(runs_rows).set_index("run")
    order = sorted(runs.index, key=lambda r: (method_sort_key(runs.at[r, "method"], runs.at[r, "arm_rank"]),
                                              runs.at[r, "seed"], r))
    runs = runs.loc[order]
    train = pd.concat(train_frames, ignore_index=True)
    train["step"] = train["step"].astype(int)
    samples = pd.concat(sample_frames, ignore_index=True)
    sets = tuple(sorted(problems))
    return Sweep(
        root=root, runs=runs, train=train, val=pd.DataFrame(val_rows), samples=samples,
        counts=tidy_counts(samples, order), k=int(k), sets=sets, problems=dict(problems), ignored=ignored,
    )


def _arm_rank(run_dir: Path) -> int:
    """The rank of the run's arm, from its saved config (:func:`runners.run.contract_check.run_arm`)."""
    arm = run_arm(run_dir)
    return UNKNOWN_RANK if arm is None else arm.rank


def tidy_counts(samples: pd.DataFrame, run_order: list[str]) -> pd.DataFrame:
    """Per (run, step, repeat, data_source, problem_id): ``correct`` = sum of ``acc`` (the tidy table)."""
    counts = samples.groupby(["run", "step", "repeat", "data_source", "problem_id"], sort=True)["acc"].sum()
    counts = counts.rename("correct").reset_index()
    counts["_r"] = counts["run"].map({r: i for i, r in enumerate(run_order)})
    counts = counts.sort_values(["_r", "step", "repeat", "data_source", "problem_id"], kind="stable")
    return counts.drop(columns="_r").reset_index(drop=True).astype({"correct": int})


def correct_matrix(counts: pd.DataFrame, columns: pd.MultiIndex, repeat: int = 0) -> pd.DataFrame:
    """Rows of ``counts`` with ``repeat`` as a matrix: index (run, step), columns ``columns``."""
    sel = counts[counts["repeat"] == repeat]
    wide = sel.set_index(["run", "step", "data_source", "problem_id"])["correct"].unstack(
        ["data_source", "problem_id"])
    index = list(dict.fromkeys(zip(sel["run"], sel["step"], strict=True)))
    return wide.reindex(index=pd.MultiIndex.from_tuples(index, names=["run", "step"]), columns=columns).astype(int)


def val_path(sweep: Sweep, run: str, step: int) -> Path:
    """The jsonl file of ``run``'s evaluation at ``step``."""
    return run_contract.val_path(Path(sweep.runs.at[run, "path"]), step)
