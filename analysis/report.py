"""Write ``<sweep>/report/``: the tables and figures of run_contract.md plus the human summary.

Files: ``comparison.csv``, ``paired.csv`` (the contract's columns first, then the seed-aware
ones of :data:`analysis.tables.PAIRED_COLUMNS`), ``passk.csv`` (unbiased pass@k), ``retest.csv``
(only when a run has repeated evaluations), ``comparison.md`` (everything in words and tables),
``eval_curves.png``, ``train_curves.png``, ``per_problem.png``. :func:`build_report` computes everything and
returns a :class:`Report`; :func:`write_report` also writes the files. Both time their stages in an
:class:`analysis.progress.Progress` (``progress``), which also prints a line per stage when given a stream.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import plots
from analysis.load import REPORT_DIR, Sweep, SweepError, load_sweep
from analysis.planned import NO_ADJUSTMENT
from analysis.progress import Progress
from analysis.stats import N_BOOT, N_FLIP, SEED, Resampler
from analysis.styles import several_seeds
from analysis.tables import (
    ALPHA,
    AVG,
    LAST_QUARTER,
    PAIRED_TWO_LEVEL,
    SINGLE_SEED,
    TWO_LEVEL,
    checkpoint_note,
    comparison_table,
    eval_curves_table,
    paired_table,
    passk_table,
    retest_band,
    retest_table,
    seed_aggregate_table,
    seeds_per_method,
)

DEFAULT_KS = (1, 2, 4, 8)


@dataclass
class Report:
    """Everything the report shows, as frames, plus the paths written (if any)."""

    sweep: Sweep
    checkpoints: list[str | int]
    comparison: pd.DataFrame  # per-run rows followed, per method, by its seed-aggregate row
    paired: pd.DataFrame
    passk: pd.DataFrame
    curves: pd.DataFrame  # eval curves per run
    method_curves: pd.DataFrame  # eval curves per method (seed-averaged, two-level bands with >= 2 seeds)
    retest: pd.DataFrame  # repeated evaluations of one checkpoint (empty without repeats)
    n_boot: int
    seed: int
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def checkpoint_labels(self) -> list[str]:
        return list(dict.fromkeys(self.comparison["checkpoint"]))


def parse_checkpoints(spec: str | Sequence[str | int]) -> list[str | int]:
    """``"both"`` -> [final, best]; ``"final"``, ``"best"``, ``"last_quarter"``, an integer step, or a comma list
    of these."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out: list[str | int] = []
    for item in items:
        item = item.strip() if isinstance(item, str) else item
        if item == "both":
            out += ["final", "best"]
        elif item in ("final", "best", LAST_QUARTER):
            out.append(item)
        elif isinstance(item, int) or (isinstance(item, str) and item.isdigit()):
            out.append(int(item))
        else:
            raise ValueError(f"checkpoint {item!r}: expected final, best, both, {LAST_QUARTER} or an evaluated "
                             "step number")
    return list(dict.fromkeys(out))


def build_report(sweep: Sweep | str | Path, checkpoints: str | Sequence[str | int] = "both",
                 ks: Sequence[int] = DEFAULT_KS, n_boot: int = N_BOOT, seed: int = SEED,
                 strict: bool = False, progress: Progress | None = None, control: str | None = None) -> Report:
    """Compute every table of the report for ``sweep`` (a loaded sweep or a sweep directory).

    ``strict``: passed to :func:`analysis.load.load_sweep` when a directory is given. ``progress``:
    times the stages ``load``, ``tables`` and ``curves`` (default a silent one). ``control``: the arm the
    planned comparisons are against (:mod:`analysis.planned`); a name the sweep lacks is a SweepError.
    """
    progress = progress or Progress()
    if not isinstance(sweep, Sweep):
        with progress.stage("load"):
            sweep = load_sweep(sweep, strict=strict)
    cps = parse_checkpoints(checkpoints)
    if control is not None and control not in sweep.methods:
        raise SweepError(f"--control {control}: no such arm in this sweep; its arms: {', '.join(sweep.methods)}")
    resampler = Resampler(n_boot=n_boot, seed=seed)
    with progress.stage("tables", f"of {len(sweep.runs)} runs"):
        report = _tables(sweep, cps, ks, resampler, n_boot, seed, control)
    with progress.stage("curves"):
        report.curves = eval_curves_table(sweep, resampler, by="run")
        report.method_curves = eval_curves_table(sweep, resampler, by="method")
    return report


def _tables(sweep: Sweep, cps: list[str | int], ks: Sequence[int], resampler: Resampler, n_boot: int,
            seed: int, control: str | None = None) -> Report:
    """The report's tables but the curves (left empty)."""
    comp = comparison_table(sweep, cps, resampler)
    agg = seed_aggregate_table(sweep, cps)
    if not agg.empty:  # each method's aggregate row right after its seeds
        comp = pd.concat([comp, agg], ignore_index=True)
        comp["_agg"] = comp["seed"].isna()
        comp["_m"] = comp["method"].map({m: i for i, m in enumerate(sweep.methods)})
        comp["_c"] = comp["checkpoint"].map({c: i for i, c in enumerate(dict.fromkeys(comp["checkpoint"]))})
        comp["_d"] = comp["data_source"].map({d: i for i, d in enumerate([*sweep.sets, AVG])})
        comp["_r"] = comp["run"].map({r: i for i, r in enumerate(sweep.runs.index)}).fillna(len(sweep.runs))
        comp = comp.sort_values(["_c", "_m", "_agg", "_r", "_d"], kind="stable").drop(
            columns=["_agg", "_m", "_c", "_d", "_r"]).reset_index(drop=True)
    passk = passk_table(sweep, cps, ks)
    for table in (comp, passk):  # integers stay integers next to the aggregates' empty cells
        for col in ("seed", "step"):
            table[col] = table[col].astype("Int64")
    comp["n_seeds"] = comp["n_seeds"].astype(int)
    return Report(
        sweep=sweep, checkpoints=cps, comparison=comp,
        paired=paired_table(sweep, cps, resampler, n_flip=N_FLIP, seed=seed, control=control),
        passk=passk, curves=pd.DataFrame(), method_curves=pd.DataFrame(), retest=retest_table(sweep),
        n_boot=n_boot, seed=seed,
    )


def write_report(sweep_dir: str | Path, out_dir: str | Path | None = None,
                 checkpoints: str | Sequence[str | int] = "both", ks: Sequence[int] = DEFAULT_KS,
                 n_boot: int = N_BOOT, seed: int = SEED, figures: bool = True, strict: bool = False,
                 progress: Progress | None = None, control: str | None = None) -> Report:
    """Load ``sweep_dir``, compute the report and write it to ``out_dir`` (default ``<sweep_dir>/report``).

    ``progress``: times (and, given a stream, reports) the stages of :func:`build_report`, then
    ``csv``, one per figure and ``markdown`` (default a silent one).
    """
    progress = progress or Progress()
    report = build_report(sweep_dir, checkpoints, ks, n_boot, seed, strict=strict, progress=progress,
                          control=control)
    out = Path(out_dir) if out_dir is not None else Path(sweep_dir) / REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    files = report.files
    with progress.stage("csv"):
        files["comparison.csv"] = out / "comparison.csv"
        report.comparison.to_csv(files["comparison.csv"], index=False)
        files["paired.csv"] = out / "paired.csv"
        report.paired.to_csv(files["paired.csv"], index=False)
        files["passk.csv"] = out / "passk.csv"
        report.passk.to_csv(files["passk.csv"], index=False)
        if not report.retest.empty:
            files["retest.csv"] = out / "retest.csv"
            report.retest.to_csv(files["retest.csv"], index=False)
    if figures:
        resampler = Resampler(n_boot=n_boot, seed=seed)
        figures_of = {
            "eval_curves.png": lambda: plots.eval_curves(report.sweep, resampler, report.curves, report.retest,
                                                         report.method_curves),
            "train_curves.png": lambda: plots.train_curves(report.sweep),
            "per_problem.png": lambda: plots.per_problem(report.sweep, "final"),
        }
        for name, make in figures_of.items():
            with progress.stage(name):
                files[name] = plots.save(make(), out / name)
    with progress.stage("markdown"):
        files["comparison.md"] = out / "comparison.md"
        files["comparison.md"].write_text(markdown(report, figures=figures))
    return report


# -- markdown -------------------------------------------------------------------------------------
def _f(x: float, digits: int = 3) -> str:
    return "—" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.{digits}f}"


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _p(p: float, eq: bool = False) -> str:
    """p-value text: ``<0.001`` or three decimals (with ``eq``: ``< 0.001`` / ``= 0.123``)."""
    if p < 0.001:
        return "< 0.001" if eq else "<0.001"
    return f"= {p:.3f}" if eq else f"{p:.3f}"


def _run_cell(sweep: Sweep, run: str) -> str:
    if run in sweep.runs.index and sweep.runs.at[run, "in_progress"]:
        return f"{run} †"
    if run in sweep.runs.index and sweep.runs.at[run, "status"] in ("failed", "stopped"):
        return f"{run} ‡"
    return run if run in sweep.runs.index else f"**{run}**"


def _runs_section(sweep: Sweep) -> list[str]:
    rows = []
    for run, r in sweep.runs.iterrows():
        state = r["status"] + (" †" if r["in_progress"] else " ‡" if r["status"] in ("failed", "stopped") else "")
        rows.append([run, r["method"], str(r["seed"]), r["backend"], state, f"{r['last_step']}/{r['total_steps']}",
                     str(r["n_evals"]), "—" if r["n_evals"] == 0 else str(int(r["last_eval_step"]))])
    out = ["## Runs", "", _md_table(["run", "method", "seed", "backend", "status", "trained steps",
                                     "evaluations", "last evaluated step"], rows), ""]
    notes = []
    running = sweep.runs.index[sweep.runs["in_progress"]].tolist()
    if running:
        notes.append(f"† Still running: {', '.join(running)}. Their `final` is the last evaluation so far; "
                     "rerun the report when they finish.")
    failed = sweep.runs.index[sweep.runs["status"] == "failed"].tolist()
    if failed:
        notes.append(f"‡ Failed: {', '.join(failed)}. Their `final` is their last evaluation before the failure.")
    stopped = sweep.runs.index[sweep.runs["status"] == "stopped"].tolist()
    if stopped:
        notes.append(f"‡ Stopped by the user (Ctrl-C): {', '.join(stopped)}. Their `final` is their last evaluation "
                     "before the stop; the same launch command resumes them.")
    unevaluated = [r for r in sweep.runs.index if sweep.runs.at[r, "n_evals"] == 0]
    if unevaluated:
        notes.append(f"Not in the tables (no evaluation yet): {', '.join(unevaluated)}.")
    finals = {r: int(sweep.steps(r)[-1]) for r in sweep.evaluated_runs}
    if len(set(finals.values())) > 1:
        notes.append("**The `final` checkpoints are at different steps** ("
                     + ", ".join(f"{r}: {s}" for r, s in finals.items())
                     + "), so `final` rows compare runs at unequal training budgets.")
    if sweep.ignored:
        notes.append("Ignored folders (no metrics.json, config.yaml or val/): "
                     + ", ".join(p.name for p in sweep.ignored) + ".")
    if sweep.peers is not None and sweep.peers.swept:
        notes.append("This sweep varies " + ", ".join(f"`{k}`" for k in sweep.peers.swept) + " on purpose (its "
                     "multirun.yaml): each value is its own row, named in brackets after the method; runs are "
                     "pooled as seeds only within one value.")
    if sweep.apart:
        notes.append("**Runs trained differently from their peers** (a key of their config.yaml that can change a "
                     "result differs from the other runs'; `--strict` makes this an error). Each is its own row, "
                     "its label naming the keys, and is not averaged with its arm's seeds: "
                     + "; ".join(sweep.peers.apart_lines()) + ".")
    if sweep.skipped:
        notes.append("**Skipped run folders** (their record, metrics.json or config.yaml, or a val file fails the contract; "
                     "`--strict` makes this an error): "
                     + "; ".join(f"{p.name} ({'; '.join(v.removeprefix(str(p) + '/') for v in vs)})"
                                 for p, vs in sweep.skipped.items()) + ".")
    return out + [n + "\n" for n in notes]


def _seed_note(sweep: Sweep) -> str:
    counts = seeds_per_method(sweep)
    if all(n == 1 for n in counts.values()):
        return ("Every method has a single seed. The ± and intervals measure only the noise of sampling "
                "these problems and responses; they do not include seed-to-seed variation of training, "
                "which for RL runs is often as large as the differences between methods.")
    multi = {m: n for m, n in counts.items() if n > 1}
    single = [m for m, n in counts.items() if n == 1]
    text = ("Bold rows aggregate the seeds of a method: mean over seeds, the standard deviation of the "
            "seeds' mean@k (sd), and in brackets the 95% two-level t interval that counts both the seeds and "
            "the problems (se from the spread of the seeds plus the problem part, t with Satterthwaite df; "
            "docs/statistics.md). " + ", ".join(f"{m}: {n} seeds" for m, n in multi.items()) + ".")
    if single:
        text += f" Single seed: {', '.join(single)} (interval over problems only)."
    return text


def comparison_cells(report: Report, label: str) -> tuple[dict[str, dict[str, str]], dict[str, object]]:
    """The cells of ``comparison.md``'s table at checkpoint ``label``, ``{run: {data_source: cell}}``, and each
    run's step: a run's cell is ``mean ± se [ci]``, a mean of seeds' ``**mean ± sd sd** [ci]`` (the seeds' standard
    deviation). The notebook (``results/review.ipynb``) shows these same cells."""
    comp = report.comparison
    c = comp[comp["checkpoint"] == label]
    sds = c[c["seed"].notna()].groupby(["method", "data_source"])["mean_at_k"].std(ddof=1)  # the seeds' spread
    cells: dict[str, dict[str, str]] = {}
    steps: dict[str, object] = {}
    for r in c.itertuples(index=False):  # one pass over the rows: the markdown grows with the runs, no faster
        if pd.isna(r.seed):
            cell = f"**{_f(r.mean_at_k)} ± {_f(sds.get((r.method, r.data_source), np.nan))} sd** "
        else:
            cell = f"{_f(r.mean_at_k)} ± {_f(r.se)} "
        cells.setdefault(r.run, {})[r.data_source] = cell + f"[{_f(r.ci_low)}, {_f(r.ci_high)}]"
        steps.setdefault(r.run, r.step)
    return cells, steps


def _comparison_section(report: Report, label: str) -> list[str]:
    sweep = report.sweep
    sets = [*sweep.sets, AVG]
    cells, steps = comparison_cells(report, label)
    rows = [[_run_cell(sweep, run), "—" if pd.isna(steps[run]) else str(int(steps[run])),
             *[by_set[ds] for ds in sets]] for run, by_set in cells.items()]
    title = f"## mean@{sweep.k} at the `{label}` checkpoint"
    header = ["run", "step", *[f"{ds} (n={len(sweep.problems[ds])})" for ds in sweep.sets],
              f"avg (n={sum(len(p) for p in sweep.problems.values())})"]
    return [title, "", f"Checkpoint: {checkpoint_note(label)}.", "",
            f"Cells of a run: mean@{sweep.k} ± standard error [95% percentile bootstrap over problems, "
            f"{report.n_boot:,} resamples; stratified by set for avg] — the noise of one run's evaluation.", "",
            _md_table(header, rows), "", _seed_note(sweep), ""]


def _plan_note(paired: pd.DataFrame) -> list[str]:
    """What was planned and how the p-values were adjusted (analysis.planned)."""
    planned = paired[paired["planned"].astype(bool)]
    pairs = len(planned[["method_a", "method_b"]].drop_duplicates())
    unplanned = len(paired[~paired["planned"].astype(bool)][["method_a", "method_b"]].drop_duplicates())
    if (planned["adjustment"] == NO_ADJUSTMENT).all():
        return [f"Planned comparisons: all {pairs} pairs of arms, unadjusted (four arms or fewer and no "
                "`--control`).", ""]
    controls = planned["method_b"].unique()  # one arm in every planned row only with --control (> 4 arms otherwise)
    against = (f"each arm against the control `{controls[0]}` named by `--control` (rows read arm − {controls[0]})"
               if len(controls) == 1 else f"all {pairs} pairs of arms (more than four arms and no `--control`)")
    return [f"Planned comparisons: {against}; {pairs} comparisons per checkpoint and set, their p-values "
            "**Holm-adjusted** within each checkpoint and set (family-wise error rate at "
            f"{ALPHA}); the verdict and 'significant' read the adjusted p, the 95% intervals are not adjusted."
            + (f" The other {unplanned} pairs are in paired.csv (`planned` false), unadjusted and not shown here: "
               "exploratory, not evidence." if unplanned else ""), ""]


def _paired_section(report: Report) -> list[str]:
    paired = report.paired
    out = ["## Paired differences between methods", "",
           "**How to read it:** a difference counts only where the *between-seed variance* column says yes "
           f"and the verdict is *distinguishable* (p < {ALPHA} and the 95% interval excludes 0); a single-seed "
           "row is never evidence of a difference, whatever its interval.", "",
           "diff = mean over problems of (method a's per-problem mean@k − method b's), the problems "
           "aligned by problem_id, a method's seeds averaged. "
           f"With ≥ 2 seeds in both methods: *{TWO_LEVEL}* — se from the spread of the seeds' scores plus "
           "the method × problem part, t interval and two-sided t-test (docs/statistics.md); when the runs' "
           "records make the two methods' runs seed pairs (the same seeds, each seed fixing the same prompt "
           f"order and random streams in both: `run.seed_fixes`), *{PAIRED_TWO_LEVEL}* instead — the seed "
           "part from the spread of the per-seed differences, so what a shared seed explains is not counted "
           "as noise. The design decides which test a row uses, never the p-value; `test`, `pairs` and "
           "`pairing` in paired.csv say which and why. mde80: the smallest true difference the row's test "
           "detects with 80% power. "
           f"Otherwise *{SINGLE_SEED}*: a 95% paired bootstrap interval over problems and a sign-flip p "
           "over problems, which say how precisely these runs were evaluated, not whether the methods differ. "
           "Verdict (two-level rows): *distinguishable* when p < "
           f"{ALPHA} and the interval excludes 0, *borderline* when only one of the two holds, *within noise* "
           "otherwise.", ""]
    if paired.empty:
        return out + ["Only one method is evaluated; there is nothing to pair.", ""]
    out += _plan_note(paired)
    paired = paired[paired["planned"].astype(bool)]
    n_tests = int(paired["seed_variance"].sum())
    for label in dict.fromkeys(paired["checkpoint"]):
        p = paired[paired["checkpoint"] == label]
        rows, dist = [], []
        for r in p.itertuples(index=False):
            v = r.verdict
            test = f"paired t ({r.pairs} pairs)" if r.pairs else "t" if r.seed_variance else "bootstrap"
            p_text = _p(r.p_value) if r.adjustment == NO_ADJUSTMENT else f"{_p(r.p_value)} (Holm {_p(r.p_adjusted)})"
            rows.append([f"{r.method_a} − {r.method_b}", r.data_source, f"{r.seeds_a} / {r.seeds_b}",
                         f"{r.diff:+.3f}", f"[{r.ci_low:+.3f}, {r.ci_high:+.3f}]", p_text, str(r.n_problems),
                         test, _f(r.mde80), "yes" if r.seed_variance else "no", v])
            if v == "distinguishable":
                higher = r.method_a if r.diff > 0 else r.method_b
                p_used = r.p_value if r.adjustment == NO_ADJUSTMENT else r.p_adjusted
                dist.append(f"- {r.data_source}: {r.method_a} − {r.method_b} = {r.diff:+.3f} "
                            f"(95% CI [{r.ci_low:+.3f}, {r.ci_high:+.3f}], "
                            f"{'p' if r.adjustment == NO_ADJUSTMENT else 'Holm-adjusted p'} {_p(p_used, eq=True)}, "
                            f"{r.seeds_a} and {r.seeds_b} seeds): **{higher} is higher**")
        out += [f"### `{label}` checkpoint", "",
                _md_table(["a − b", "set", "seeds a / b", "diff", "95% CI", "p", "problems", "test", "mde80",
                           "between-seed variance", "verdict"], rows), ""]
        unpaired = dict.fromkeys(r.pairing for r in p.itertuples(index=False)
                                 if r.seed_variance and not r.pairs)
        if unpaired:
            out += ["Unpaired two-level rows (independent seeds): " + "; ".join(unpaired) + ".", ""]
        tested = int(p["seed_variance"].sum())
        if dist:
            out += [f"Distinguishable from noise at the `{label}` checkpoint ({len(dist)} of {tested} "
                    "two-level comparisons):", "", *dist, "",
                    f"The other {len(rows) - len(dist)} rows are borderline, within noise or single-seed: "
                    "this sweep cannot tell those methods apart.", ""]
        elif tested:
            out += [f"At the `{label}` checkpoint no difference is distinguishable from noise.", ""]
        else:
            out += [f"At the `{label}` checkpoint every comparison has a single seed in at least one method "
                    "(between-seed variance not estimated): no difference can be claimed. Run ≥ 2 seeds per "
                    "method (3–5 to have any power; docs/statistics.md).", ""]
    if n_tests:
        out += [f"These are {n_tests} two-level tests at the {ALPHA} level, uncorrected for multiplicity: even "
                f"if all methods were equal, about {ALPHA * n_tests:.1f} of them would come out 'distinguishable' "
                "by chance. Rows of one checkpoint share the problems and the runs, so they are not independent "
                "either. Few seeds give little power: see the calibration table in docs/statistics.md.", ""]
    return out


def _retest_section(report: Report) -> list[str]:
    if report.retest.empty:
        return []
    band = retest_band(report.retest)
    rows = [[r.run, r.data_source, str(r.n_steps), str(r.n_repeats), _f(r.sd), _f(r.predicted_sd)]
            for r in band.itertuples(index=False)]
    return ["## Test-retest noise (repeated evaluations of one checkpoint)", "",
            "Each checkpoint with repeats was evaluated several times with different sampling seeds, the model "
            "fixed. sd = standard deviation of mean@k across those evaluations, pooled over the steps (root "
            "mean square); predicted = the sd that sampling the responses alone predicts (binomial, per "
            "problem). An evaluation of one checkpoint moves by about ±1.96 sd on a rerun; the eval curves "
            "draw that band. Per step: `retest.csv`.", "",
            _md_table(["run", "set", "steps with repeats", "evaluations", "sd", "predicted sd"], rows), ""]


def _passk_section(report: Report) -> list[str]:
    sweep, pk = report.sweep, report.passk
    if pk.empty:
        return []
    ks = sorted(pk["k"].unique())
    out = ["## pass@k (unbiased estimator)", "",
           f"pass@k = mean over problems of 1 − C(n−c, k)/C(n, k) with n = {sweep.k} samples and c correct "
           "(the combinatorial estimator of Chen et al. 2021, not a bootstrap of best-of-k); avg = mean of the sets. "
           "pass@1 equals mean@k.", ""]
    for label in dict.fromkeys(pk["checkpoint"]):
        p = pk[pk["checkpoint"] == label]
        wide = p.set_index(["run", "data_source", "k"])["pass_at_k"].unstack("k")  # one pivot, not one per row
        keys = list(dict.fromkeys(zip(p["run"], p["data_source"], strict=True)))
        values = wide.reindex(index=pd.MultiIndex.from_tuples(keys), columns=ks).to_numpy()
        rows = [[_run_cell(sweep, run), ds, *[_f(v) for v in row]] for (run, ds), row in zip(keys, values, strict=True)]
        out += [f"### `{label}` checkpoint", "", _md_table(["run", "set", *[f"pass@{k}" for k in ks]], rows), ""]
    return out


def markdown(report: Report, figures: bool = True) -> str:
    """The human-facing ``comparison.md`` of ``report``."""
    sweep = report.sweep
    sets = ", ".join(f"{ds} ({len(sweep.problems[ds])} problems)" for ds in sweep.sets)
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    out = [f"# Ablation report: {sweep.root.name}", "",
           f"Sweep `{sweep.root}`; generated {now} by `python -m analysis`. "
           f"Evaluation protocol shared by every run: {sweep.k} samples per problem; sets: {sets}. "
           f"All numbers are computed from the per-sample jsonl files. Bootstrap: {report.n_boot:,} "
           f"resamples, numpy default_rng seeded with {report.seed}.", "",
           "**How to read it:** only a paired difference with between-seed variance \"yes\" and verdict "
           "*distinguishable* is evidence that two methods differ; single-seed rows and per-run intervals "
           "measure evaluation noise only.", ""]
    out += _runs_section(sweep)
    for label in report.checkpoint_labels:
        out += _comparison_section(report, label)
    out += _paired_section(report)
    out += _retest_section(report)
    out += _passk_section(report)
    if figures:
        several = several_seeds(sweep)
        out += ["## Figures", "",
                f"- `eval_curves.png`: mean@{sweep.k} per set and avg against training step, raw (no smoothing), "
                + ("one line per method, the mean of its seeds at the steps all of them evaluated, with each "
                   "point's 95% two-level interval over seeds and problems (the tables' interval) as its band; "
                   "each seed is a thin line of its method's colour" if several else
                   "one line per run with each point's 95% bootstrap band over problems")
                + "; for runs with repeated evaluations, the hatched ±1.96 sd test-retest band.",
                "- `train_curves.png`: training metrics as backward 20-step moving averages (the value at step s "
                "is the mean of steps s−19..s)"
                + ("; per method the mean of its seeds' moving averages with its 95% t interval over seeds, each "
                   "seed thin" if several else "")
                + "; an arm that does not log a metric is absent from its panel.",
                "- `per_problem.png`: per-problem accuracy of every run at its final checkpoint"
                + (" (above them, each method's mean over its seeds)" if several else "")
                + "; problems sorted hardest to easiest within each set, so columns whose colour changes "
                "between rows are the problems that move.",
                "- Under a curve panel, a note names the arms whose lines coincide: "
                + ("per pair of methods, in how many seeds the two runs of one seed coincide from the start and "
                   "through which step (the median over those seeds)." if several else
                   "which runs, over which steps."), "",
                "![eval curves](eval_curves.png)", "", "![train curves](train_curves.png)", "",
                "![per-problem accuracy](per_problem.png)", ""]
    return "\n".join(out)
