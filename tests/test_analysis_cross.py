"""analysis.cross: arms of several sweeps against one reference arm, two-level test and power."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from analysis.cross import cross_table, main, minimum_detectable
from analysis.load import load_sweep
from analysis.seeds import diff_two_level
from analysis.synthetic import build_sweep
from analysis.tables import TWO_LEVEL, arm_scores, checkpoint_steps


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    root = tmp_path_factory.mktemp("cross")
    ref = build_sweep(root / "study_on_policy", methods=("pg",), seeds=(1, 2, 3), lift={"pg": 1.0}, seed=0)
    mis = build_sweep(root / "study_kv4", methods=("pg", "sc_tis"), seeds=(1, 2, 3),
                      lift={"pg": 0.0, "sc_tis": 1.0}, seed=0)
    return load_sweep(ref), load_sweep(mis)


def test_cross_table_equals_the_two_level_test_on_the_same_scores(sweeps):
    ref, mis = sweeps
    table = cross_table(ref, "pg", [mis])
    assert set(table.method) == {"pg", "sc_tis"} and set(table.data_source) == {"aime2024", "aime2025", "avg"}
    y_ref = arm_scores(ref, checkpoint_steps(ref, ["final"]))["pg"][1]
    y_pg = arm_scores(mis, checkpoint_steps(mis, ["final"]))["pg"][1]
    expected = diff_two_level(y_pg, y_ref, ref.set_slices)
    got = table[table.method == "pg"].set_index("data_source")
    np.testing.assert_allclose(got.loc[["aime2024", "aime2025", "avg"], "diff"], expected["estimate"])
    rows = got.loc[["aime2024", "aime2025", "avg"]]
    for column, field in (("p_value", "p_value"), ("df", "df"), ("ci_low", "ci_low"), ("ci_high", "ci_high")):
        np.testing.assert_allclose(rows[column], expected[field], rtol=1e-12, err_msg=column)
    # mde80 = (t_0.975 + t_0.80) x se at the test's df (scipy), from the test's own se
    mde = (stats.t.ppf(0.975, expected["df"]) + stats.t.ppf(0.8, expected["df"])) * expected["se"]
    np.testing.assert_allclose(rows["mde80"], mde, rtol=1e-12)
    assert set(table["test"]) == {TWO_LEVEL} and set(table["pairs"]) == {0}  # across sweeps: independent seeds
    avg = table[table.data_source == "avg"].set_index("method")
    assert avg.at["pg", "diff"] < 0  # no lift under mismatch, lift 1.0 on-policy
    assert avg.at["pg", "ci_high"] < avg.at["sc_tis", "ci_high"]


def test_minimum_detectable_difference_has_the_stated_power():
    se, df = 0.05, 8
    mde = float(minimum_detectable(np.array(se), np.array(df)))
    rng = np.random.default_rng(0)
    # simulate the test: estimate ~ N(mde, se^2) with se estimated on df degrees of freedom
    est = rng.normal(mde, se, 200_000)
    se_hat = se * np.sqrt(rng.chisquare(df, 200_000) / df)
    power = np.mean(np.abs(est / se_hat) > stats.t.ppf(0.975, df))
    assert power == pytest.approx(0.8, abs=0.02)


def test_mismatched_problems_and_single_seeds_are_refused(sweeps, tmp_path):
    ref, _ = sweeps
    other = load_sweep(build_sweep(tmp_path / "other", methods=("pg",), seeds=(1, 2), sets={"x": 10}))
    with pytest.raises(ValueError, match="different problems"):
        cross_table(ref, "pg", [other])
    single = load_sweep(build_sweep(tmp_path / "single", methods=("pg",), seeds=(1,)))
    with pytest.raises(ValueError, match="the reference .* has 1 seed"):
        cross_table(single, "pg", [ref])
    assert main([f"{ref.root}:nope", str(ref.root)]) == 2


def test_an_arm_with_one_seed_is_left_out_and_the_rest_compared(sweeps, tmp_path, capsys):
    """Issue 47: one arm with a single seed made the whole comparison exit 2."""
    ref, mis = sweeps
    mixed = build_sweep(tmp_path / "mixed", methods=("pg", "sc"), seeds=(1, 2))
    import shutil

    shutil.rmtree(mixed / "sc-seed2")
    table = cross_table(ref, "pg", [load_sweep(mixed)])
    assert set(table["method"]) == {"pg"}
    assert table.attrs["skipped"] == [f"{mixed}:sc has 1 seed(s): two or more are needed for the between-seed "
                                      "variance; left out"]
    assert main([f"{ref.root}:pg", str(mixed)]) == 0
    err = capsys.readouterr().err
    assert err.strip() == f"warning: {table.attrs['skipped'][0]}"
    single = build_sweep(tmp_path / "single", methods=("pg",), seeds=(1,))
    assert main([f"{ref.root}:pg", str(single)]) == 2  # nothing left to compare


def _score_with(sweep_dir, numerics: str) -> None:
    """Set ``eval.numerics`` in every run record of ``sweep_dir`` (the record kept in step)."""
    import yaml

    from runners.run.provenance import config_sha256
    from runners.run.run_record import record_config_sha256

    for config_file in sorted(sweep_dir.glob("*/config.yaml")):
        config = yaml.safe_load(config_file.read_text())
        config["eval"] = {"numerics": numerics}
        text = yaml.safe_dump(config, sort_keys=False)
        config_file.write_text(text)
        record_config_sha256(config_file.parent, config_sha256(text))


def test_arms_scored_differently_are_refused_unless_asked(tmp_path, capsys):
    ref_dir = build_sweep(tmp_path / "on_policy", methods=("pg",), seeds=(1, 2), seed=0)
    mis_dir = build_sweep(tmp_path / "kv4", methods=("pg",), seeds=(1, 2), seed=1)
    _score_with(ref_dir, "clean")
    _score_with(mis_dir, "scenario")
    ref, mis = load_sweep(ref_dir), load_sweep(mis_dir)
    with pytest.raises(ValueError, match=r"scored differently.*eval\.numerics: clean \(reference\) vs scenario"):
        cross_table(ref, "pg", [mis])
    assert len(cross_table(ref, "pg", [mis], allow_scoring_mismatch=True)) == 3
    assert main([f"{ref_dir}:pg", str(mis_dir)]) == 2
    assert "--allow-scoring-mismatch" in capsys.readouterr().err
    assert main([f"{ref_dir}:pg", str(mis_dir), "--allow-scoring-mismatch"]) == 0
    _score_with(mis_dir, "clean")
    assert len(cross_table(ref, "pg", [load_sweep(mis_dir)])) == 3
