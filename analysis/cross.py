"""Comparisons across sweeps: every arm of each sweep against one reference arm, with power stated.

A scenario study puts each mismatch scenario in its own sweep folder (``results/<study>_<scenario>/``),
and its most useful question crosses them: does an arm under mismatch reach what training reaches
on-policy? :func:`cross_table` answers it with the same two-level test as the within-sweep paired
table (seeds and problems both enter; the sweeps must share their evaluation problems). Within one
sweep (the reference sweep's own arms) it pairs the runs by seed where the records allow
(:mod:`analysis.pairing`), as the paired table does; across sweeps it treats the seeds as
independent: another scenario changes the sampler from the first token, so the runs of one seed
share little but the prompt order (the drift study's finals of kv4 and bf16_compute arms against
on-policy PG correlate −0.60 to +0.30 across seeds, ``benchmarks/report/seed_pairing.py --doc --reread``),
and pairing would only cost degrees of freedom. ``test`` and ``pairs`` say which. It adds ``mde80``: the smallest true difference the test would detect
with 80% power at this variance, ``(t_{0.975, df} + t_{0.80, df}) x se``, so a "no effect" reads as
"no effect larger than mde80".

    python -m analysis.cross results/scratchpad_on_policy:pg results/scratchpad_kv4 results/scratchpad_bf16_compute
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.load import Sweep, load_sweep
from analysis.pairing import arm_design, compare, unpaired_design
from analysis.report import parse_checkpoints
from analysis.seeds import minimum_detectable
from analysis.tables import PAIRED_TWO_LEVEL, TWO_LEVEL, arm_scores, checkpoint_steps, set_labels
from runners.run import peer_keys

__all__ = ["CROSS_COLUMNS", "cross_table", "main", "minimum_detectable"]

CROSS_COLUMNS = ["sweep", "method", "reference", "data_source", "checkpoint", "seeds", "reference_seeds",
                 "mean", "reference_mean", "diff", "ci_low", "ci_high", "p_value", "df", "mde80", "test", "pairs"]


def _problems(sweep: Sweep) -> list[str]:
    return [str(p) for p in sweep.correct.columns]


def scoring(sweep: Sweep, runs: Sequence[str]) -> dict[str, str]:
    """How ``runs`` of ``sweep`` were scored: ``{eval.* key: value}`` over their records (a run written
    before a key existed: what it did, ``runners.config.config_history``); a key whose runs disagree maps to
    their values joined by `` | ``."""
    values: dict[str, set[str]] = {}
    for run in runs:
        config = peer_keys.read_config(Path(sweep.runs.loc[run, "path"])) or {}
        for key, value in peer_keys.setting(config).items():
            if key.startswith("eval."):
                values.setdefault(key, set()).add(peer_keys.text(value))
    return {k: " | ".join(sorted(v)) for k, v in values.items()}


def _scored_alike(reference: dict[str, str], other: dict[str, str], what: str, allow: bool) -> None:
    differ = peer_keys.differences(reference, other)
    if differ and not allow:
        shown = "; ".join(f"{k}: {a} (reference) vs {b}" for k, (a, b) in differ.items())
        raise ValueError(f"{what} was scored differently from the reference ({shown}): its numbers are not "
                         "comparable; pass --allow-scoring-mismatch to compare anyway")


def cross_table(reference: Sweep, reference_method: str, sweeps: Sequence[Sweep], checkpoint: str = "final",
                allow_scoring_mismatch: bool = False) -> pd.DataFrame:
    """Each method of each sweep minus ``reference_method`` of ``reference``, per set and ``avg``.

    Raises ValueError when a sweep's evaluation problems differ from the reference's, an arm was scored
    with other evaluation keys (``eval.*``, e.g. ``eval.numerics``; unless ``allow_scoring_mismatch``) or
    the reference has fewer than 2 seeds (the between-seed variance cannot be estimated). An arm with fewer than 2
    seeds is left out, and named in ``table.attrs["skipped"]`` (one line each); the other arms are compared.
    """
    ref_arms = arm_scores(reference, checkpoint_steps(reference, [checkpoint]))
    if reference_method not in ref_arms:
        raise ValueError(f"{reference.root}: no evaluated runs of method {reference_method!r}; its arms: "
                         f"{', '.join(ref_arms)} (an arm label with a setting in brackets: analysis.peers)")
    ref_runs, y_ref = ref_arms[reference_method]
    ref_scoring = scoring(reference, ref_runs)
    labels = set_labels(reference)
    rows = []
    skipped: list[str] = []
    for sweep in sweeps:
        if _problems(sweep) != _problems(reference):
            raise ValueError(f"{sweep.root} and {reference.root} evaluate different problems: not comparable")
        for method, (runs, y) in arm_scores(sweep, checkpoint_steps(sweep, [checkpoint])).items():
            if sweep.root == reference.root and method == reference_method:
                continue  # the reference against itself
            _scored_alike(ref_scoring, scoring(sweep, runs), f"{sweep.root}:{method}", allow_scoring_mismatch)
            if len(ref_runs) < 2:
                raise ValueError(f"the reference {reference.root}:{reference_method} has {len(ref_runs)} seed(s): two "
                                 "or more are needed for the between-seed variance")
            if len(runs) < 2:  # this arm only: the others are still compared
                skipped.append(f"{sweep.root}:{method} has {len(runs)} seed(s): two or more are needed for the "
                               "between-seed variance; left out")
                continue
            design = (arm_design(sweep, runs, reference, ref_runs) if sweep.root == reference.root
                      else unpaired_design(len(runs), len(ref_runs), "runs of different sweeps"))
            t = compare(y, y_ref, design, reference.set_slices)
            mde = minimum_detectable(t["se"], t["df"])
            means = [y[:, s].mean() for s in reference.set_slices]
            ref_means = [y_ref[:, s].mean() for s in reference.set_slices]
            for j, ds in enumerate(labels):
                mean = means[j] if j < len(means) else float(np.mean(means))
                ref_mean = ref_means[j] if j < len(ref_means) else float(np.mean(ref_means))
                rows.append({"sweep": sweep.root.name, "method": method,
                             "reference": f"{reference.root.name}:{reference_method}", "data_source": ds,
                             "checkpoint": checkpoint, "seeds": len(runs), "reference_seeds": len(ref_runs),
                             "mean": mean, "reference_mean": ref_mean, "diff": t["estimate"][j],
                             "ci_low": t["ci_low"][j], "ci_high": t["ci_high"][j], "p_value": t["p_value"][j],
                             "df": t["df"][j], "mde80": mde[j],
                             "test": PAIRED_TWO_LEVEL if design.paired else TWO_LEVEL, "pairs": design.pairs})
    table = pd.DataFrame(rows, columns=CROSS_COLUMNS)
    table.attrs["skipped"] = skipped
    return table


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.cross", description=__doc__.splitlines()[0])
    parser.add_argument("reference", help="SWEEP_DIR:METHOD, the reference arm (e.g. the on-policy control)")
    parser.add_argument("sweeps", nargs="+", type=Path, help="sweep folders to compare against it")
    parser.add_argument("--checkpoint", default="final", help="final (default), best, last_quarter or a step")
    parser.add_argument("--out", type=Path, default=None, help="write the table as CSV here")
    parser.add_argument("--allow-scoring-mismatch", action="store_true",
                        help="compare arms scored with other evaluation keys (eval.*) than the reference")
    args = parser.parse_args(argv)
    if ":" not in args.reference:
        parser.error(f"reference {args.reference!r} must be SWEEP_DIR:METHOD")
    ref_dir, ref_method = args.reference.rsplit(":", 1)
    try:
        checkpoint = parse_checkpoints(args.checkpoint)
    except ValueError as err:
        parser.error(str(err))
    if len(checkpoint) != 1:
        parser.error(f"--checkpoint {args.checkpoint!r}: one checkpoint (final, best or an evaluated step number)")
    try:
        table = cross_table(load_sweep(ref_dir), ref_method, [load_sweep(s) for s in args.sweeps], checkpoint[0],
                            args.allow_scoring_mismatch)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for line in table.attrs.get("skipped", []):
        print(f"warning: {line}", file=sys.stderr)
    if table.empty:
        print("error: no arm to compare with the reference (each is left out above)", file=sys.stderr)
        return 2
    if args.out:
        try:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            table.to_csv(args.out, index=False)
        except OSError as err:
            print(f"error: cannot write {args.out}: {err.strerror or err}", file=sys.stderr)
            return 2
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table[table.data_source == "avg"].drop(columns=["data_source", "checkpoint"]).round(3).to_string(
            index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
