"""analysis.pairing: the design (seed pairs or not) comes from the run records, and the report follows it."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.cross import cross_table
from analysis.load import load_sweep
from analysis.pairing import PAIRED_BY_SEED, seed_design
from analysis.report import build_report, markdown
from analysis.seeds import diff_paired_two_level, diff_two_level, minimum_detectable
from analysis.synthetic import two_arm_counts, write_run, write_two_arm_sweep
from analysis.tables import PAIRED_TWO_LEVEL, TWO_LEVEL, paired_table
from runners.embedded.backend import SEED_FIXES as LOCAL
from runners.verl_side.backend.ingest import SEED_FIXES as VERL

K, N = 8, 30
SLICES = [slice(0, N)]


def test_design_rules():
    d = seed_design([3, 1, 2], [LOCAL] * 3, [2, 3, 1], [LOCAL] * 3)
    assert d.paired and d.pairs == 3 and d.reason == PAIRED_BY_SEED and d.seeds == (1, 2, 3)
    assert d.order_a == (1, 2, 0) and d.order_b == (2, 0, 1)  # rows in seed order
    assert not seed_design([1, 2, 4], [LOCAL] * 3, [1, 2, 3], [LOCAL] * 3).paired
    assert "seeds differ (1, 2, 4 vs 1, 2, 3)" in seed_design([1, 2, 4], [LOCAL] * 3, [1, 2, 3], [LOCAL] * 3).reason
    assert "several runs of one seed" in seed_design([1, 1, 2], [LOCAL] * 3, [1, 2, 3], [LOCAL] * 3).reason
    older = seed_design([1, 2, 3], [LOCAL, None, LOCAL], [1, 2, 3], [LOCAL] * 3)
    assert not older.paired and older.pairs == 0 and "seed 2: a run does not record" in older.reason
    assert "different streams" in seed_design([1, 2, 3], [LOCAL] * 3, [1, 2, 3], [VERL] * 3).reason
    assert seed_design([1, 2, 3], [VERL] * 3, [1, 2, 3], [VERL] * 3).paired  # verl's seed fixes the prompt order
    two = seed_design([1, 2], [LOCAL] * 2, [1, 2], [LOCAL] * 2)  # 1 df: the unpaired test is stronger
    assert not two.paired and "2 seed pairs (a paired t needs >= 3)" in two.reason


def _sweep(tmp_path, name, seeds=3, seed_fixes=LOCAL, rng_seed=0, corr=0.8):
    ca, cb = two_arm_counts(np.random.default_rng(rng_seed), 1, seeds, n_problems=N, k=K, seed_sd_logit=0.5,
                            seed_corr=corr)
    return write_two_arm_sweep(tmp_path / name, ca[0], cb[0], K, seed_fixes=seed_fixes), ca[0] / K, cb[0] / K


def test_report_uses_the_paired_test_exactly_when_the_records_make_pairs(tmp_path):
    paired_dir, ya, yb = _sweep(tmp_path, "paired")
    row = paired_table(load_sweep(paired_dir), ["final"]).set_index("data_source").loc["avg"]
    t = diff_paired_two_level(ya, yb, SLICES)
    assert row["test"] == PAIRED_TWO_LEVEL and row["pairs"] == 3 and row["pairing"] == PAIRED_BY_SEED
    for col, key in (("diff", "estimate"), ("se", "se"), ("df", "df"), ("p_value", "p_value"),
                     ("ci_low", "ci_low"), ("ci_high", "ci_high")):
        assert row[col] == pytest.approx(t[key][-1], rel=1e-12, abs=1e-15), col
    assert row["mde80"] == pytest.approx(minimum_detectable(t["se"], t["df"])[-1])

    old_dir, ya, yb = _sweep(tmp_path, "old", seed_fixes=None)  # records before seed_fixes: today's test
    row = paired_table(load_sweep(old_dir), ["final"]).set_index("data_source").loc["avg"]
    assert row["test"] == TWO_LEVEL and row["pairs"] == 0 and "does not record" in row["pairing"]
    assert row["p_value"] == pytest.approx(diff_two_level(ya, yb, SLICES)["p_value"][-1], rel=1e-12)


def test_a_seed_without_partner_makes_the_design_unpaired(tmp_path):
    sweep_dir, ya, yb = _sweep(tmp_path, "s")
    acc = (np.arange(K)[None, :] < np.full((N, 1), 4)).astype(int)
    write_run(sweep_dir / "sc-seed9", method="sc", seed=9, evals={0: {"aime": acc}}, total_steps=0,
              problems={"aime": [f"aime-{j:02d}" for j in range(N)]}, seed_fixes=LOCAL)
    paired = paired_table(load_sweep(sweep_dir), ["final"])
    assert (paired["test"] == TWO_LEVEL).all() and (paired["pairs"] == 0).all()
    assert paired["pairing"].str.contains(r"seeds differ \(1, 2, 3 vs 1, 2, 3, 9\)").all()


def test_comparison_md_says_which_test_and_how_many_pairs(tmp_path):
    sweep_dir, _, _ = _sweep(tmp_path, "s")
    text = markdown(build_report(sweep_dir, "final", n_boot=200), figures=False)
    assert "paired t (3 pairs)" in text and "mde80" in text and PAIRED_TWO_LEVEL in text


def test_cross_table_pairs_within_a_sweep_not_across_sweeps(tmp_path):
    a_dir, ya, yb_a = _sweep(tmp_path, "a", rng_seed=1)
    b_dir, _, yb = _sweep(tmp_path, "b", rng_seed=2)
    reference = load_sweep(a_dir)
    table = cross_table(reference, "pg", [reference, load_sweep(b_dir)]).set_index(["sweep", "method", "data_source"])
    within = table.loc[("a", "sc", "avg")]  # the reference sweep's own arm: seed pairs
    t = diff_paired_two_level(yb_a, ya, SLICES)
    assert within["test"] == PAIRED_TWO_LEVEL and within["pairs"] == 3
    assert within["p_value"] == pytest.approx(t["p_value"][-1], rel=1e-12)
    assert within["mde80"] == pytest.approx(minimum_detectable(t["se"], t["df"])[-1])
    across = table.loc[("b", "sc", "avg")]  # another sweep (scenario): independent seeds
    u = diff_two_level(yb, ya, SLICES)
    assert across["test"] == TWO_LEVEL and across["pairs"] == 0
    assert across["p_value"] == pytest.approx(u["p_value"][-1], rel=1e-12)


def _paired_t_by_hand(ya: np.ndarray, yb: np.ndarray) -> dict[str, float]:
    """The paired two-level t of one set written out (docs/statistics.md): D = ya - yb per seed pair; seed
    part var_s(mean_j D) / S; problem part max(0, var_j(mean_s D) - MS_D / S) / n, MS_D the two-way
    residual mean square of D; S - 1 df."""
    from scipy import stats

    d = ya - yb
    s, n = d.shape
    runs, cols = d.mean(axis=1), d.mean(axis=0)
    resid = d - runs[:, None] - cols[None, :] + d.mean()
    ms = (resid**2).sum() / ((s - 1) * (n - 1))
    v_seed = runs.var(ddof=1) / s
    v_prob = max(0.0, cols.var(ddof=1) - ms / s) / n
    se, df = float(np.sqrt(v_seed + v_prob)), s - 1
    est = float(d.mean())
    half = stats.t.ppf(0.975, df) * se
    return {"estimate": est, "se": se, "df": df, "ci_low": est - half, "ci_high": est + half,
            "p_value": float(2 * stats.t.sf(abs(est) / se, df))}


def test_seed_pairs_written_in_another_order_per_arm_are_paired_by_seed(tmp_path):
    """Each arm's folders hold the seeds in its own order, so row i of one arm is not seed i of the other:
    the comparison must pair by seed, whatever the order of the rows it is given."""
    from analysis.pairing import arm_design, compare

    seeds_a, seeds_b = (3, 1, 5, 2, 4), (2, 5, 1, 4, 3)
    ca, cb = two_arm_counts(np.random.default_rng(7), 1, 5, n_problems=N, k=K, seed_sd_logit=0.6, seed_corr=0.9)
    ca, cb = ca[0] / K, cb[0] / K
    sweep = load_sweep(write_two_arm_sweep(tmp_path / "s", ca * K, cb * K, K, seed_fixes=LOCAL,
                                           seeds=(seeds_a, seeds_b)))
    by_seed_a = {s: ca[i] for i, s in enumerate(seeds_a)}
    by_seed_b = {s: cb[i] for i, s in enumerate(seeds_b)}
    hand = _paired_t_by_hand(np.stack([by_seed_a[s] for s in range(1, 6)]),
                             np.stack([by_seed_b[s] for s in range(1, 6)]))
    wrong = _paired_t_by_hand(ca, cb)  # row i with row i: what a comparison blind to the seeds would get
    assert abs(wrong["p_value"] - hand["p_value"]) > 0.05 and abs(wrong["se"] - hand["se"]) > 0.005

    # the rows in the order the folders were written: compare must reorder them by seed
    runs_a, runs_b = [f"pg-seed{s}" for s in seeds_a], [f"sc-seed{s}" for s in seeds_b]
    ya = np.stack([sweep.scores(r)[1][0] for r in runs_a])
    yb = np.stack([sweep.scores(r)[1][0] for r in runs_b])
    assert np.array_equal(ya, ca) and np.array_equal(yb, cb)
    design = arm_design(sweep, runs_a, sweep, runs_b)
    assert design.paired and design.seeds == (1, 2, 3, 4, 5)
    t = compare(ya, yb, design, SLICES)
    for key, value in hand.items():
        assert t[key][0] == pytest.approx(value, rel=1e-12, abs=1e-15), key

    # the report's row (load_sweep lists each arm's runs in seed order): the same numbers
    row = paired_table(sweep, ["final"]).set_index("data_source").loc["aime"]
    assert row["test"] == PAIRED_TWO_LEVEL and row["pairs"] == 5
    for col, key in (("diff", "estimate"), ("se", "se"), ("df", "df"), ("p_value", "p_value"),
                     ("ci_low", "ci_low"), ("ci_high", "ci_high")):
        assert row[col] == pytest.approx(hand[key], rel=1e-12, abs=1e-15), col
