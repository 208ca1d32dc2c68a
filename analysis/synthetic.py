"""Synthetic run directories in the shape of run_contract.md, for tests, the benchmark and demos.

:func:`write_run` writes one run from explicit per-sample correctness arrays, so a test knows
every answer by construction. :func:`build_sweep` writes a whole random sweep (methods x seeds,
train metrics, evaluations every ``eval_every`` steps) whose accuracies follow a simple model:
problem j of a set has difficulty logit ``b_j``; at step s method m solves it with probability
``sigmoid(b_j + lift_m * s / total_steps)``. ``metrics.json`` is written through the project's
own :class:`runners.run.run_record.RunRecord`, so the files are what a backend would write.
:func:`two_arm_counts` draws many two-arm sweeps at once (a seed effect on the logit of each run,
truly equal arms or a known shift) for the calibration of the seed-aware statistics, and
:func:`write_two_arm_sweep` writes one of them as run folders.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ablations.arms import ArmSpec, all_arms
from runners.run.contract_check import (
    CONFIG_FILE,
    VAL_DIR,
    required_train_metrics,
    val_file_name,
    val_metric_names,
)
from runners.run.run_contract import repeat_dir_name
from runners.run.run_record import RunRecord


def method_config(method: str) -> dict:
    """The ``method`` section a run of ``method`` saves: its declaration's method node (``ablations/arms/``,
    without ``top_k``), or a PG-like arm (no correction, no score centering) for a name no arm declares."""
    arm = all_arms().get(method)
    if arm is None:
        return {"name": method, "loss_mode": f"ablation_{method}", "tis_cap": None, "score_centering": False,
                "rollout_correction": None}
    return arm.method_node()

DEFAULT_LIFT = {"pg": 0.3, "tis": 0.5, "sc": 0.9, "sc_tis": 1.0}


def problem_ids(ds: str, n: int) -> list[str]:
    """Problem ids ``<ds>-00``, ``<ds>-01``, ... (zero padded so string order is numeric order)."""
    width = max(2, len(str(n - 1)))
    return [f"{ds}-{j:0{width}d}" for j in range(n)]


def synthetic_train_row(method: str, step: int, total_steps: int, rng: np.random.Generator,
                        method_cfg: Mapping | None = None) -> dict[str, float]:
    """One plausible train row holding exactly the metrics the arm must log (its traits: ``method_cfg``,
    default :func:`method_config` of ``method``)."""
    method_cfg = method_config(method) if method_cfg is None else method_cfg
    frac = step / max(total_steps, 1)
    row: dict[str, float] = {
        "critic/score/mean": float(np.clip(-0.6 + 0.8 * frac + rng.normal(0, 0.15), -1, 1)),
        "response_length/mean": float(600 + 400 * frac + rng.normal(0, 40)),
        "response/truncation_ratio": float(np.clip(0.05 + 0.05 * frac + rng.normal(0, 0.02), 0, 1)),
        "batch/zero_variance_group_ratio": float(np.clip(0.5 - 0.2 * frac + rng.normal(0, 0.05), 0, 1)),
        "actor/entropy": float(max(0.05, 0.9 - 0.5 * frac + rng.normal(0, 0.05))),
        "actor/pg_loss": float(rng.normal(0, 0.05)),
        "actor/grad_norm": float(abs(rng.normal(0.5, 0.15))),
        "actor/ppo_kl": float(abs(rng.normal(1e-3, 5e-4))),
        "training/off_policy/trajectory_staleness/mean": float(abs(rng.normal(1.0, 0.2))),
        "training/off_policy/evicted_samples": float(rng.poisson(0.5)),
        "timing_s/step": float(abs(rng.normal(30, 3))),
        "timing_s/gen": float(abs(rng.normal(20, 2))),
        "timing_s/update_actor": float(abs(rng.normal(8, 1))),
    }
    arm = ArmSpec.of(method_cfg)
    if arm.tis:
        row["actor/tis_clip_fraction"] = float(np.clip(rng.normal(0.01, 0.004), 0, 1))
        row["actor/tis_weight_mean"] = float(rng.normal(1.0, 0.01))
    if arm.rollout_correction is not None and arm.is_level is not None:
        row["actor/rollout_corr/rollout_is_mean"] = float(rng.normal(1.0, 0.01))
    if arm.rejection is not None:
        row["actor/rollout_corr/rollout_rs_masked_fraction"] = float(np.clip(rng.normal(0.02, 0.005), 0, 1))
    if arm.sc:
        row["actor/sc_correction"] = float(rng.normal(0, 0.01))
        row["actor/sc_sampler_head_mass"] = float(np.clip(rng.normal(0.97, 0.005), 0, 1))
        row["actor/sc_train_head_mass"] = float(np.clip(rng.normal(0.96, 0.005), 0, 1))
    assert set(row) == set(required_train_metrics(arm))
    return row


def write_val_file(path: Path, acc: Mapping[str, np.ndarray], problems: Mapping[str, Sequence[str]],
                   rng: np.random.Generator | None = None) -> dict[str, float]:
    """Write one ``val/step_NNNNNN.jsonl`` from ``acc[ds]`` of shape (n_problems, k) with 0/1 values.

    Returns the contract's val metrics of this evaluation (``val-core/<ds>/acc/mean@<k>`` etc).
    """
    rng = rng or np.random.default_rng(0)
    lines: list[str] = []
    metrics: dict[str, float] = {}
    for ds, a in acc.items():
        a = np.asarray(a, dtype=int)
        n_problems, k = a.shape
        lengths = rng.integers(200, 4000, size=a.shape)
        truncated = lengths > 3900
        ids = problems[ds]
        for j in range(n_problems):
            for s in range(k):
                lines.append(json.dumps({
                    "data_source": ds, "problem_id": ids[j], "sample": s,
                    "score": 1.0 if a[j, s] else -1.0, "acc": int(a[j, s]),
                    "response_length": int(lengths[j, s]), "truncated": bool(truncated[j, s]),
                }))
        core, length_name, trunc_name = val_metric_names(ds, k)
        metrics[core] = float(a.mean())
        metrics[length_name] = float(lengths.mean())
        metrics[trunc_name] = float(truncated.mean())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return metrics


def write_run(
    run_dir: str | Path,
    *,
    method: str,
    seed: int,
    evals: Mapping[int, Mapping[str, np.ndarray]],
    problems: Mapping[str, Sequence[str]] | None = None,
    total_steps: int | None = None,
    last_step: int | None = None,
    status: str = "finished",
    train_rows: Sequence[Mapping[str, float]] | None = None,
    rng_seed: int = 0,
    repeat_evals: Mapping[int, Sequence[Mapping[str, np.ndarray]]] | None = None,
    method_cfg: Mapping | None = None,
    seed_fixes: Mapping | None = None,
) -> Path:
    """Write a complete run directory (config.yaml, metrics.json, val/*.jsonl).

    ``evals[step][ds]`` is the 0/1 correctness matrix (n_problems, k) of the evaluation at
    ``step``. ``problems[ds]`` names the rows (default :func:`problem_ids`). Train rows 1..last_step
    are ``train_rows`` if given, else :func:`synthetic_train_row`. ``last_step`` defaults to
    ``total_steps`` (itself default: the last evaluated step); ``status`` is the run's status
    ("running" leaves the attempt open). ``repeat_evals[step]`` lists the correctness matrices of
    repeated evaluations 1, 2, ... of that step (``val/repeat_RR/``; the contract's repeat files).
    ``method_cfg`` is the saved ``method`` section (default :func:`method_config`): the arm's traits.
    ``seed_fixes``: the record's ``run.seed_fixes`` (default none, as in records before it).
    """
    import yaml

    method_cfg = dict(method_config(method) if method_cfg is None else method_cfg)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(rng_seed)
    steps = sorted(evals)
    total_steps = total_steps if total_steps is not None else (steps[-1] if steps else 0)
    last_step = last_step if last_step is not None else total_steps
    if problems is None:
        first = evals[steps[0]] if steps else {}
        problems = {ds: problem_ids(ds, np.asarray(a).shape[0]) for ds, a in first.items()}
    config = yaml.safe_dump({"method": method_cfg, "seed": seed, "total_steps": total_steps, "backend": "synthetic"},
                            sort_keys=False)
    (run_dir / CONFIG_FILE).write_text(config)
    record = RunRecord.open(
        run_dir, name=run_dir.name, method=method, seed=seed, backend="synthetic", total_steps=total_steps,
        config_sha256=hashlib.sha256(config.encode()).hexdigest(), versions={"project": "synthetic"},
        seed_fixes=None if seed_fixes is None else dict(seed_fixes),
    )
    record.start_attempt(0)
    for step in range(1, last_step + 1):
        row = dict(train_rows[step - 1]) if train_rows is not None else synthetic_train_row(method, step, total_steps, rng, method_cfg)
        row["step"] = step
        record.add_train(row)
    for step in steps:
        if step > last_step:
            raise ValueError(f"evaluation at step {step} beyond last_step {last_step}")
        metrics = write_val_file(run_dir / VAL_DIR / val_file_name(step), evals[step], problems, rng)
        record.add_val({"step": step, **metrics})
        for r, acc in enumerate((repeat_evals or {}).get(step, ()), start=1):
            write_val_file(run_dir / VAL_DIR / repeat_dir_name(r) / val_file_name(step), acc, problems, rng)
    if status == "running":
        record.save()
    else:
        record.end_attempt(status)
    return run_dir


def build_sweep(
    sweep_dir: str | Path,
    *,
    methods: Sequence[str] = ("pg", "tis", "sc", "sc_tis"),
    seeds: Sequence[int] = (1,),
    total_steps: int = 100,
    eval_every: int = 20,
    sets: Mapping[str, int] | None = None,
    k: int = 8,
    running: Mapping[str, int] | None = None,
    lift: Mapping[str, float] | None = None,
    seed: int = 0,
    method_configs: Mapping[str, Mapping] | None = None,
    coincide: Mapping[str, tuple[str, int]] | None = None,
) -> Path:
    """Write a random sweep: one run ``<method>-seed<seed>`` per method and seed.

    Evaluations at steps 0, ``eval_every``, ... ``total_steps``; ``sets`` maps set name to problem
    count (default aime2024 and aime2025 with 30 each); ``running[run_name] = step`` leaves that
    run in progress at ``step``; ``lift[method]`` is its logit gain over training (default
    :data:`DEFAULT_LIFT`, 0.6 for other names); ``method_configs[method]`` is the method section its
    runs save (default :func:`method_config`). Deterministic given ``seed``.

    ``coincide[follower] = (leader, step)``: each run of ``follower`` repeats the run of ``leader``
    with the same seed (its evaluations, and the train metrics both arms log) through a divergence
    step drawn per seed, uniform on ``step // 2 .. 3 * step // 2`` (:func:`divergence_steps`), as
    PG and SC follow one trajectory until the first sampled token differs; its own draws after.
    Runs of other methods are written exactly as without ``coincide``.
    """
    sweep_dir = Path(sweep_dir)
    sets = dict(sets or {"aime2024": 30, "aime2025": 30})
    running = dict(running or {})
    lift = {**DEFAULT_LIFT, **(lift or {})}
    rng = np.random.default_rng(seed)
    difficulty = {ds: rng.normal(-0.3, 1.6, size=n) for ds, n in sets.items()}
    problems = {ds: problem_ids(ds, n) for ds, n in sets.items()}
    coincide = dict(coincide or {})
    for follower, (leader, _) in coincide.items():
        if follower not in methods or leader not in methods or leader in coincide:
            raise ValueError(f"coincide[{follower!r}] = {leader!r}: both must be methods of the sweep, the leader "
                             "no follower itself")
    runs: dict[tuple[str, int], dict] = {}
    for mi, method in enumerate(methods):
        for si, run_seed in enumerate(seeds):
            name = f"{method}-seed{run_seed}"
            last = running.get(name, total_steps)
            run_rng = np.random.default_rng([seed, mi, si])
            evals = {}
            for step in range(0, last + 1, eval_every):
                gain = lift.get(method, 0.6) * step / max(total_steps, 1)
                evals[step] = {
                    ds: (run_rng.random((n, k)) < 1 / (1 + np.exp(-(difficulty[ds][:, None] + gain)))).astype(int)
                    for ds, n in sets.items()
                }
            runs[method, run_seed] = {
                "run_dir": sweep_dir / name, "method": method, "seed": run_seed, "evals": evals, "problems": problems,
                "total_steps": total_steps, "last_step": last, "status": "running" if name in running else "finished",
                "rng_seed": int(run_rng.integers(1 << 31)), "method_cfg": (method_configs or {}).get(method),
            }
    for follower, (leader, step) in coincide.items():
        for run_seed, until in zip(seeds, divergence_steps(step, len(seeds), [seed, methods.index(follower)]),
                                   strict=True):
            _follow(runs[follower, run_seed], runs[leader, run_seed], until)
    for args in runs.values():
        write_run(**args)
    return sweep_dir


def divergence_steps(step: int, n: int, seed: Sequence[int]) -> np.ndarray:
    """``n`` divergence steps, uniform on ``step // 2 .. 3 * step // 2`` (``numpy.random.default_rng(seed)``)."""
    return np.random.default_rng([*seed, 1]).integers(step // 2, 3 * step // 2 + 1, size=n)


def _train_rows(args: Mapping) -> list[dict[str, float]]:
    """The train rows :func:`write_run` draws for ``args`` when it is given none (the same rng stream)."""
    rng = np.random.default_rng(args["rng_seed"])
    cfg = method_config(args["method"]) if args["method_cfg"] is None else args["method_cfg"]
    return [synthetic_train_row(args["method"], step, args["total_steps"], rng, cfg)
            for step in range(1, args["last_step"] + 1)]


def _follow(follower: dict, leader: Mapping, until: int) -> None:
    """Make ``follower`` (write_run keywords) repeat ``leader`` through step ``until``: the evaluations, and
    the train metrics both log (the follower keeps its own arm's metrics)."""
    for step, acc in leader["evals"].items():
        if step <= until and step in follower["evals"]:
            follower["evals"][step] = {ds: a.copy() for ds, a in acc.items()}
    own, lead = _train_rows(follower), _train_rows(leader)
    for step, (row, ref) in enumerate(zip(own, lead, strict=False), start=1):
        if step <= until:
            row.update({m: v for m, v in ref.items() if m in row})
    follower["train_rows"] = own


# Correct-sample counts (out of KNOWN_K) per problem of the sweep written by write_known_sweep:
# KNOWN_COUNTS[method][step][set]. pg ties its avg at steps 10 and 20 (best = the earlier, 10).
KNOWN_K = 4
KNOWN_COUNTS: dict[str, dict[int, dict[str, list[int]]]] = {
    "pg": {0: {"alpha": [0, 1, 2, 4], "beta": [0, 0, 4]},
           10: {"alpha": [1, 1, 2, 4], "beta": [1, 0, 4]},
           20: {"alpha": [1, 2, 2, 3], "beta": [0, 1, 4]}},
    "sc": {0: {"alpha": [0, 1, 2, 4], "beta": [0, 0, 4]},
           10: {"alpha": [2, 2, 3, 4], "beta": [1, 2, 4]},
           20: {"alpha": [2, 3, 3, 4], "beta": [1, 1, 4]}},
}


def counts_to_acc(counts: Sequence[int], k: int) -> np.ndarray:
    """(n_problems, k) 0/1 matrix whose row j has ``counts[j]`` ones (the first samples correct)."""
    return (np.arange(k)[None, :] < np.asarray(counts)[:, None]).astype(int)


def write_known_sweep(sweep_dir: str | Path) -> Path:
    """A tiny sweep whose every statistic is known by construction (see :data:`KNOWN_COUNTS`).

    Runs ``pg-seed1`` and ``sc-seed1``, 20 train steps, evaluations at 0, 10, 20; sets ``alpha``
    (4 problems) and ``beta`` (3 problems); :data:`KNOWN_K` samples per problem.
    """
    sweep_dir = Path(sweep_dir)
    for method, evals in KNOWN_COUNTS.items():
        acc = {step: {ds: counts_to_acc(c, KNOWN_K) for ds, c in sets.items()} for step, sets in evals.items()}
        write_run(sweep_dir / f"{method}-seed1", method=method, seed=1, evals=acc, total_steps=20)
    return sweep_dir


# -- null and shifted sweeps for the calibration of the seed-aware statistics ---------------------
NULL_DIFFICULTY_BETA = (0.6, 0.9)  # per-problem solve rates of an AIME-like set (mean 0.4, many near 0)


def two_arm_counts(
    rng: np.random.Generator,
    n_sweeps: int,
    seeds: int,
    *,
    n_problems: int = 30,
    k: int = 8,
    seed_sd_logit: float = 0.35,
    shift_logit: float = 0.0,
    difficulty_beta: tuple[float, float] = NULL_DIFFICULTY_BETA,
    seed_corr: float = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Correct counts of arms A and B in ``n_sweeps`` independent sweeps, each (n_sweeps, seeds, n_problems).

    Per sweep: a fresh problem set with solve rates ``p_j ~ Beta(*difficulty_beta)`` (clipped to
    [0.001, 0.999]), logit ``b_j``; run s of arm a has a seed effect ``u_as ~ N(0, seed_sd_logit^2)``
    and solves problem j with probability ``sigmoid(b_j + u_as + shift_logit [arm B only])``;
    counts are ``Binomial(k, that)``. ``shift_logit = 0`` is the null (truly equal arms).
    ``seed_corr`` = rho in [0, 1): run s of both arms shares its seed, ``u_Bs = rho u_As + sqrt(1 - rho^2) z_s``
    (correlation rho between the arms' seed effects, each still N(0, seed_sd_logit^2)); rho = 0 draws
    exactly what independent seeds draw.
    """
    if not 0.0 <= seed_corr < 1.0:
        raise ValueError(f"seed_corr must be in [0, 1), got {seed_corr}")
    p = np.clip(rng.beta(*difficulty_beta, size=(n_sweeps, 1, n_problems)), 1e-3, 1 - 1e-3)
    b = np.log(p / (1 - p))
    u_a = rng.normal(0.0, seed_sd_logit, size=(n_sweeps, seeds, 1))
    u_b = seed_corr * u_a + np.sqrt(1.0 - seed_corr**2) * rng.normal(0.0, seed_sd_logit, size=(n_sweeps, seeds, 1))
    ca = rng.binomial(k, 1 / (1 + np.exp(-(b + u_a))))
    cb = rng.binomial(k, 1 / (1 + np.exp(-(b + u_b + shift_logit))))
    return ca, cb


def run_accuracy_sd(seed_sd_logit: float, *, n_problems: int = 30, shift_logit: float = 0.0,
                    difficulty_beta: tuple[float, float] = NULL_DIFFICULTY_BETA, draws: int = 4000,
                    seed: int = 0) -> float:
    """Seed-to-seed sd of a run's expected accuracy implied by ``seed_sd_logit`` (Monte Carlo, fixed seed).

    The mean over problem sets of the sd over seed effects of ``mean_j sigmoid(b_j + u)``.
    """
    rng = np.random.default_rng(seed)
    p = np.clip(rng.beta(*difficulty_beta, size=(200, 1, n_problems)), 1e-3, 1 - 1e-3)
    b = np.log(p / (1 - p)) + shift_logit
    u = rng.normal(0.0, seed_sd_logit, size=(1, draws // 200 * 10, 1))
    acc = (1 / (1 + np.exp(-(b + u)))).mean(axis=-1)
    return float(acc.std(axis=-1, ddof=1).mean())


def true_difference(shift_logit: float, *, n_problems: int = 30, seed_sd_logit: float = 0.35,
                    difficulty_beta: tuple[float, float] = NULL_DIFFICULTY_BETA, seed: int = 0) -> float:
    """Expected accuracy of arm B minus arm A under :func:`two_arm_counts` (Monte Carlo, fixed seed)."""
    rng = np.random.default_rng(seed)
    p = np.clip(rng.beta(*difficulty_beta, size=(400, 1, n_problems)), 1e-3, 1 - 1e-3)
    b = np.log(p / (1 - p)) + rng.normal(0.0, seed_sd_logit, size=(400, 50, 1))
    return float((1 / (1 + np.exp(-(b + shift_logit))) - 1 / (1 + np.exp(-b))).mean())


def write_two_arm_sweep(sweep_dir: str | Path, counts_a: np.ndarray, counts_b: np.ndarray, k: int,
                        methods: tuple[str, str] = ("pg", "sc"), set_name: str = "aime",
                        seed_fixes: Mapping | None = None,
                        seeds: tuple[Sequence[int], Sequence[int]] | None = None) -> Path:
    """Write one sweep of :func:`two_arm_counts` (arrays (seeds, n_problems)) as run folders.

    One evaluation at step 0 per run, runs ``<method>-seed<seed>``; the sweep the report reads.
    ``seeds``: per arm, the seed of each row of its counts, in the order the folders are written
    (default ``1..S`` for both arms: row s of both arms is seed s + 1). Arms given their seeds in
    different orders pair row i of A with the row of B that has A's seed, not with row i.
    ``seed_fixes`` is every run's ``run.seed_fixes`` (default none: the report treats the seeds as
    independent; a record with ``data_order`` makes the runs of one seed a seed pair).
    """
    sweep_dir = Path(sweep_dir)
    problems = {set_name: problem_ids(set_name, counts_a.shape[-1])}
    arms = (counts_a, counts_b)
    seeds = seeds or tuple(range(1, len(c) + 1) for c in arms)
    for method, counts, arm_seeds in zip(methods, arms, seeds, strict=True):
        if sorted(arm_seeds) != sorted(set(arm_seeds)) or len(arm_seeds) != len(counts):
            raise ValueError(f"{method}: seeds {list(arm_seeds)} must be distinct, one per row of its {len(counts)}")
        for run_seed, row in zip(arm_seeds, np.asarray(counts), strict=True):
            write_run(sweep_dir / f"{method}-seed{run_seed}", method=method, seed=int(run_seed),
                      evals={0: {set_name: counts_to_acc(row, k)}}, problems=problems, total_steps=0,
                      seed_fixes=seed_fixes)
    return sweep_dir
