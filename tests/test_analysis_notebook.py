"""results/review.ipynb executes headlessly from top to bottom on a fixture sweep."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

from analysis.synthetic import build_sweep

NOTEBOOK = Path(__file__).resolve().parents[1] / "results" / "review.ipynb"


def test_review_notebook_runs(tmp_path, monkeypatch):
    sweep = build_sweep(tmp_path / "nb-sweep", methods=("pg", "sc"), total_steps=20, eval_every=10,
                        sets={"a": 6, "b": 5}, k=4, running={"sc-seed1": 15})
    monkeypatch.setenv("ANALYSIS_SWEEP_DIR", str(sweep))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit the notebook without outputs"
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert f"sweep: {sweep}" in text and "2 runs; 4 samples per problem" in text
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 3  # eval curves, train curves, per-problem matrix
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs)
    assert "sc-seed1" in html and "single seed" in "".join(
        o.get("data", {}).get("text/markdown", "") for o in outputs)


def test_review_notebook_text_names_the_tests_in_use_and_reads_the_verdict_column():
    """The paired-differences text describes both tests the report uses (analysis.tables.paired_table), and
    the code shows paired.csv's verdict instead of computing its own."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    paired_text = markdown.split("## Paired differences")[1].split("\n## ")[0]
    for method in ("two-level t (seeds and problems)", "≥ 2 seeds", "bootstrap", "sign-flip",
                   "single seed:\n  between-seed variance not estimated"):
        assert method in paired_text, method
    assert "verdict(" not in code and 'paired["verdict"]' in code


def test_review_notebook_says_what_the_report_says_on_a_damaged_sweep(tmp_path, monkeypatch):
    """Issue 47: on a sweep with skipped run folders the notebook listed none of them (only "N runs"), and it
    labelled the seeds' sd of a pooled row as a standard error; now it lists each skipped folder with its reasons
    and shows comparison.md's own cells."""
    from analysis.load import load_sweep
    from analysis.report import build_report, comparison_cells

    sweep = build_sweep(tmp_path / "damaged", methods=("pg", "sc"), seeds=(1, 2, 3), total_steps=20,
                        eval_every=10, sets={"a": 6, "b": 5}, k=4)
    (sweep / "pg-seed3" / "metrics.json").write_text("{")  # cut short
    config = sweep / "sc-seed3" / "config.yaml"
    config.write_text(config.read_text() + "# edited\n")
    monkeypatch.setenv("ANALYSIS_SWEEP_DIR", str(sweep))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "4 runs;" in text and "skipped 2 run folder(s)" in text, text
    assert "  pg-seed3:\n    " in text and "  sc-seed3:\n    " in text and "config.yaml edited" in text
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs)
    report = build_report(load_sweep(sweep), n_boot=10_000)
    cells, _ = comparison_cells(report, "final")
    pooled = cells["pg (mean of 2 seeds)"]["avg"]
    assert " sd** [" in pooled and pooled in html  # the seeds' sd, labelled sd, as comparison.md prints it
    assert cells["pg-seed1"]["avg"] in html
