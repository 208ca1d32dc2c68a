"""benchmarks/report/seed_pairing.py: the drift study's seeds are read as published, the correlations are Pearson's."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "report" / "seed_pairing.py"
_spec = importlib.util.spec_from_file_location("seed_pairing", _PATH)
seed_pairing = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(seed_pairing)
DOC, correlation, correlation_table, doc_finals = (seed_pairing.DOC, seed_pairing.correlation,
                                                   seed_pairing.correlation_table, seed_pairing.doc_finals)
first_differing_step, fisher_interval = seed_pairing.first_differing_step, seed_pairing.fisher_interval
pooled, variance_ratio = seed_pairing.pooled, seed_pairing.variance_ratio


def test_the_drift_studys_seeds_are_parsed_from_rounds_2_and_3():
    finals = doc_finals(DOC.read_text())
    assert set(finals) == {"r3 on_policy", "r3 kv4", "r3 bf16_compute", "r2 on_policy", "r2 default",
                           "r2 stale_worst"}
    assert finals["r3 kv4"]["pg"].tolist() == [0.26, 0.42, 0.73, 0.43, 0.25]
    assert set(finals["r3 on_policy"]) == {"pg"}  # the control's other cells read "= PG"
    assert finals["r2 default"]["sc"].tolist() == [0.79, 0.82, 0.65]
    text, by_pair = correlation_table(finals)
    assert "r3 on_policy" not in text  # one arm: nothing to pair
    assert by_pair["pg − sc"][3] == 12  # df pooled over the four mismatch studies: 2 + 2 + 4 + 4


def test_correlation_interval_and_pooling():
    rng = np.random.default_rng(0)
    a = rng.normal(size=8)
    b = 0.7 * a + rng.normal(scale=0.5, size=8)
    r, lo, hi = correlation(a, b)
    assert r == pytest.approx(np.corrcoef(a, b)[0, 1]) and lo < r < hi
    assert np.isnan(correlation(a[:3], b[:3])[1])  # no Fisher interval from 3 pairs
    assert np.isnan(fisher_interval(0.5, 2)[0])
    assert pooled([(a, b)])[0] == pytest.approx(r)  # one study: the pooled r is Pearson's
    assert pooled([(a, b), (a + 5, b - 3)])[0] == pytest.approx(r)  # study means do not enter
    assert variance_ratio(a, a) == 0.0 and variance_ratio(a, -a) == pytest.approx(2.0)


def test_first_differing_step():
    a = pd.DataFrame({"critic/score/mean": [0.1, 0.2, 0.3], "response_length/mean": [5.0, 5.0, 6.0]}, index=[1, 2, 3])
    b = a.copy()
    assert first_differing_step(a, b) is None
    b.loc[3, "response_length/mean"] = 6.5
    assert first_differing_step(a, b) == 3


def test_pairs_needed_is_the_smallest_n_with_mde80_below_delta():
    from scipy import stats

    n = seed_pairing.pairs_needed(0.136, 0.1, paired=True)
    mde = [(stats.t.ppf(0.975, k - 1) + stats.t.ppf(0.8, k - 1)) * 0.136 / np.sqrt(k) for k in (n - 1, n)]
    assert mde[0] > 0.1 >= mde[1]
    assert seed_pairing.pairs_needed(0.136, 0.4, paired=True) < n  # larger effects need fewer pairs
    finals = {"r9 toy": {"pg": np.array([0.2, 0.5, 0.3, 0.6]), "sc": np.array([0.3, 0.55, 0.42, 0.7])}}
    row = [line for line in seed_pairing.reread_table(finals).splitlines() if "sc − pg" in line][0]
    assert f"{stats.ttest_rel(finals['r9 toy']['sc'], finals['r9 toy']['pg']).pvalue:.3f}," in row
