"""A report that stays fair with more arms (analysis.planned): the planned comparisons and Holm's adjustment."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from analysis.load import load_sweep
from analysis.planned import holm
from analysis.synthetic import build_sweep
from analysis.tables import paired_table

ROOT = Path(__file__).resolve().parent.parent
FIVE = ("pg", "tis", "sc", "sc_tis", "icepop")


def test_holm_is_the_step_down_adjustment():
    p = np.array([0.01, 0.04, 0.03, np.nan, 0.005])
    np.testing.assert_allclose(holm(p), [0.03, 0.06, 0.06, np.nan, 0.02])
    assert holm(np.array([0.01, 0.9]))[1] == 0.9 and holm(np.array([0.6, 0.6, 0.6])).max() == 1.0


@pytest.fixture(scope="module")
def five_arms(tmp_path_factory) -> Path:
    return build_sweep(tmp_path_factory.mktemp("planned") / "sweep", methods=FIVE, seeds=(1, 2, 3),
                       total_steps=10, eval_every=10, sets={"a": 12, "b": 12}, k=4)


def test_four_arms_are_unadjusted_as_before(tmp_path):
    sweep = load_sweep(build_sweep(tmp_path / "s", seeds=(1, 2), total_steps=10, eval_every=10,
                                   sets={"a": 10}, k=4))
    paired = paired_table(sweep, ["final"])
    assert paired["planned"].all() and (paired["adjustment"] == "none").all()
    assert (paired["p_adjusted"] == paired["p_value"]).all() and len(paired) == 6 * 2


def test_more_than_four_arms_adjust_every_pair_by_holm(five_arms):
    paired = paired_table(load_sweep(five_arms), ["final"])
    assert len(paired[["method_a", "method_b"]].drop_duplicates()) == 10 and paired["planned"].all()
    assert (paired["adjustment"] == "holm").all()
    for _, family in paired.groupby("data_source"):
        np.testing.assert_allclose(family["p_adjusted"], holm(family["p_value"].to_numpy()))
    assert (paired["p_adjusted"] >= paired["p_value"]).all()
    assert (paired["significant"] == (paired["p_adjusted"] < 0.05)).all()


def test_a_named_control_plans_each_arm_against_it(five_arms):
    sweep = load_sweep(five_arms)
    free, planned = paired_table(sweep, ["final"]), paired_table(sweep, ["final"], control="tis")
    rows = planned[planned["planned"]]
    assert set(rows["method_b"]) == {"tis"} and set(rows["method_a"]) == {"pg", "sc", "sc_tis", "icepop"}
    assert (planned.loc[~planned["planned"], "adjustment"] == "none").all()
    assert (planned.loc[~planned["planned"], "p_adjusted"] == planned.loc[~planned["planned"], "p_value"]).all()
    # pg - tis is tis - pg turned round: the same test, the sign of the difference and interval flipped
    a = free[(free.method_a == "pg") & (free.method_b == "tis")].set_index("data_source")
    b = rows[rows.method_a == "pg"].set_index("data_source")
    np.testing.assert_allclose(b["diff"], a["diff"])
    c = free[(free.method_a == "tis") & (free.method_b == "sc")].set_index("data_source")
    d = rows[rows.method_a == "sc"].set_index("data_source")
    np.testing.assert_allclose(d["diff"], -c["diff"])
    np.testing.assert_allclose(d["ci_low"], -c["ci_high"])
    np.testing.assert_allclose(d["p_value"], c["p_value"])
    for _, family in rows.groupby("data_source"):  # the family is the four planned comparisons
        np.testing.assert_allclose(family["p_adjusted"], holm(family["p_value"].to_numpy()))


def test_the_report_names_the_plan_and_refuses_an_unknown_control(five_arms, tmp_path):
    out = subprocess.run([sys.executable, "-m", "analysis", str(five_arms), "--control", "tis", "--no-figures",
                          "--out", str(tmp_path / "r"), "--n-boot", "200"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    text = (tmp_path / "r" / "comparison.md").read_text()
    assert "each arm against the control `tis`" in text and "Holm-adjusted" in text
    assert "pg − tis" in text and "sc − pg" not in text and "The other 6 pairs are in paired.csv" in text
    bad = subprocess.run([sys.executable, "-m", "analysis", str(five_arms), "--control", "tiss", "--no-figures",
                          "--out", str(tmp_path / "r2")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "--control tiss: no such arm in this sweep" in bad.stderr
    assert "Traceback" not in bad.stderr
