"""python -m analysis end to end: the files and columns of run_contract.md, the words of the summary."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from analysis.__main__ import main
from analysis.load import load_sweep
from analysis.report import build_report, parse_checkpoints, write_report
from analysis.seeds import diff_two_level
from analysis.synthetic import build_sweep, write_known_sweep
from analysis.tables import COMPARISON_COLUMNS, PAIRED_COLUMNS, PASSK_COLUMNS, verdict

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("r") / "sweep"
    return build_sweep(root, total_steps=40, eval_every=10, sets={"aime2024": 12, "aime2025": 10}, k=4,
                       running={"sc-seed1": 25})


@pytest.fixture(scope="module")
def written(sweep_dir):
    assert main([str(sweep_dir)]) == 0
    return sweep_dir / "report"


def test_report_files(written):
    assert sorted(p.name for p in written.iterdir()) == sorted([
        "comparison.csv", "comparison.md", "paired.csv", "passk.csv", "eval_curves.png", "train_curves.png",
        "per_problem.png"])
    for name in ("eval_curves.png", "train_curves.png", "per_problem.png"):
        data = (written / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 20_000


def test_csv_columns_and_rows(sweep_dir, written):
    comp = pd.read_csv(written / "comparison.csv")
    assert list(comp.columns) == COMPARISON_COLUMNS
    assert len(comp) == 4 * 3 * 2  # runs x (sets + avg) x (final, best)
    assert set(comp["checkpoint"]) == {"final", "best"}
    assert set(comp["data_source"]) == {"aime2024", "aime2025", "avg"}
    sc = comp[(comp["run"] == "sc-seed1") & (comp["checkpoint"] == "final")]
    assert set(sc["step"]) == {20}  # the running run's last evaluation
    assert (comp["k"] == 4).all()
    paired = pd.read_csv(written / "paired.csv")
    assert list(paired.columns) == PAIRED_COLUMNS
    assert len(paired) == 6 * 3 * 2  # method pairs x (sets + avg) x checkpoints
    assert list(dict.fromkeys(zip(paired["method_a"], paired["method_b"], strict=True))) == [
        ("pg", "tis"), ("pg", "sc"), ("pg", "sc_tis"), ("tis", "sc"), ("tis", "sc_tis"), ("sc", "sc_tis")]
    # one seed per method: per set, the sign-flip p over every sign pattern of the final scores' differences
    sweep = load_sweep(sweep_dir)
    final = {run: sweep.scores(run)[1][-1] for run in sweep.evaluated_runs}
    rows = paired[paired["checkpoint"] == "final"].set_index(["method_a", "method_b", "data_source"])
    for (a, b, ds), row in rows.iterrows():
        if ds == "avg":
            continue
        d = (final[f"{a}-seed1"] - final[f"{b}-seed1"])[sweep.set_slices[sweep.sets.index(ds)]]
        assert row["diff"] == pytest.approx(d.mean()) and row["p_value"] == pytest.approx(_every_sign_pattern(d))
    pk = pd.read_csv(written / "passk.csv")
    assert list(pk.columns) == PASSK_COLUMNS and sorted(pk["k"].unique()) == [1, 2, 4]


def _every_sign_pattern(d: np.ndarray) -> float:
    """Two-sided sign-flip p by enumeration: the share of the 2^n sign patterns with |sum| >= |sum d|."""
    signs = np.array(list(itertools.product((1, -1), repeat=d.size)))
    return float(np.mean(np.abs(signs @ d) >= abs(d.sum()) - 1e-12))


def test_markdown_words(written):
    md = (written / "comparison.md").read_text()
    assert "Every method has a single seed" in md
    assert "selected on the test sets, optimistic" in md
    assert "sc-seed1 †" in md and "Still running: sc-seed1" in md
    assert "The `final` checkpoints are at different steps" in md
    assert "pass@k (unbiased estimator)" in md
    # one seed per method: every comparison labelled, none claimed (nor counted as a test)
    assert md.count("single seed: between-seed variance not estimated") >= 6 * 3 * 2
    assert "is higher" not in md and "no difference can be claimed" in md
    assert "uncorrected for multiplicity" not in md
    assert "**How to read it:**" in md
    assert "![eval curves](eval_curves.png)" in md


def test_same_numbers_twice(sweep_dir, tmp_path, written):
    write_report(sweep_dir, tmp_path / "again", figures=False)
    for name in ("comparison.csv", "paired.csv", "passk.csv"):
        pd.testing.assert_frame_equal(pd.read_csv(written / name), pd.read_csv(tmp_path / "again" / name))


def test_options(sweep_dir, tmp_path):
    out = tmp_path / "out"
    assert main([str(sweep_dir), "--out", str(out), "--checkpoint", "best", "--k", "1,3",
                 "--no-figures", "--n-boot", "500"]) == 0
    comp = pd.read_csv(out / "comparison.csv")
    assert set(comp["checkpoint"]) == {"best"}
    assert sorted(pd.read_csv(out / "passk.csv")["k"].unique()) == [1, 3]
    assert not (out / "eval_curves.png").exists()
    assert main([str(sweep_dir), "--out", str(out), "--checkpoint", "10", "--no-figures", "--n-boot", "200"]) == 0
    comp = pd.read_csv(out / "comparison.csv")
    assert set(comp["checkpoint"]) == {"step_10"} and set(comp["step"]) == {10}
    assert parse_checkpoints("both") == ["final", "best"]
    with pytest.raises(ValueError, match="expected final, best, both"):
        parse_checkpoints("last")


def test_cli_partial_sweep_skips_and_strict_fails(tmp_path, capsys):
    root = build_sweep(tmp_path / "s", methods=("pg", "sc"), total_steps=10, eval_every=10, sets={"a": 3}, k=2)
    (root / "tis-seed1").mkdir()
    (root / "tis-seed1" / "config.yaml").write_text("method: tis\n")
    assert main([str(root), "--no-figures", "--n-boot", "200"]) == 0
    err = capsys.readouterr().err
    assert "skipped 1 run folder(s) whose record (metrics.json, config.yaml) fails the contract" in err
    assert "tis-seed1/metrics.json: missing" in err
    md = (root / "report" / "comparison.md").read_text()
    assert "Skipped run folders" in md and "tis-seed1 (metrics.json: missing)" in md
    assert set(pd.read_csv(root / "report" / "comparison.csv")["method"]) == {"pg", "sc"}
    assert main([str(root), "--strict", "--no-figures"]) == 2
    assert "tis-seed1/metrics.json: missing" in capsys.readouterr().err


def test_cli_skips_a_run_with_an_edited_config_and_strict_fails(tmp_path, capsys):
    root = build_sweep(tmp_path / "s", methods=("pg", "sc"), total_steps=10, eval_every=10, sets={"a": 3}, k=2)
    config = root / "sc-seed1" / "config.yaml"
    config.write_text(config.read_text() + "trainer: {lr: 0.1}\n")
    assert main([str(root), "--no-figures", "--n-boot", "200"]) == 0
    err = capsys.readouterr().err
    assert "skipped 1 run folder(s) whose record (metrics.json, config.yaml) fails the contract" in err
    assert f"{config}: config.yaml edited after the run wrote it" in err
    md = (root / "report" / "comparison.md").read_text()
    assert "Skipped run folders" in md and "sc-seed1 (config.yaml: config.yaml edited after the run wrote it" in md
    assert set(pd.read_csv(root / "report" / "comparison.csv")["method"]) == {"pg"}
    assert main([str(root), "--strict", "--no-figures"]) == 2
    assert f"{config}: config.yaml edited after the run wrote it" in capsys.readouterr().err


def test_cli_errors_name_the_file(tmp_path):
    root = tmp_path / "s"
    build_sweep(root, methods=("pg", "sc"), total_steps=10, eval_every=10, sets={"a": 2}, k=2)
    (root / "sc-seed1" / "val" / "step_000010.jsonl").unlink()
    proc = subprocess.run([sys.executable, "-m", "analysis", str(root), "--strict"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "sc-seed1/val/step_000010.jsonl: missing" in proc.stderr
    assert not (root / "report").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.run([sys.executable, "-m", "analysis", str(empty)], capture_output=True, text=True)
    assert proc.returncode == 2 and "empty sweep" in proc.stderr


def test_multi_seed_report(tmp_path):
    root = build_sweep(tmp_path / "s", methods=("pg", "sc"), seeds=(1, 2), total_steps=20, eval_every=10,
                       sets={"a": 6, "b": 5}, k=2)
    report = write_report(root, n_boot=500, figures=False)
    comp = report.comparison
    assert list(comp["run"].unique()) == ["pg-seed1", "pg-seed2", "pg (mean of 2 seeds)", "sc-seed1",
                                          "sc-seed2", "sc (mean of 2 seeds)"]
    md = report.files["comparison.md"].read_text()
    assert "Bold rows aggregate the seeds" in md and "Every method has a single seed" not in md
    assert "**pg (mean of 2 seeds)**" in md
    # per comparison: seeds, method, whether the between-seed variance entered
    assert ("| a − b | set | seeds a / b | diff | 95% CI | p | problems | test | mde80 | between-seed variance | "
            "verdict |") in md
    assert "| pg − sc | avg | 2 / 2 |" in md and re.search(r"\| t \| \d\.\d{3} \| yes \|", md)
    assert "| no | single seed" not in md
    assert "Unpaired two-level rows (independent seeds): unpaired: 2 seed pairs (a paired t needs >= 3)" in md
    p = report.paired
    assert p["seed_variance"].all() and (p["test"] == "two-level t (seeds and problems)").all()
    assert (p["seeds_a"] == 2).all() and (p["significant"] == (p["p_value"] < 0.05)).all()
    # the row's numbers are the unpaired two-level test's on the runs' final scores
    sweep = load_sweep(root)
    y = {m: np.stack([sweep.scores(f"{m}-seed{s}")[1][-1] for s in (1, 2)]) for m in ("pg", "sc")}
    t = diff_two_level(y["pg"], y["sc"], sweep.set_slices)
    row = p[p["checkpoint"] == "final"].set_index("data_source").loc[["a", "b", "avg"]]
    for field in ("diff", "se", "df", "ci_low", "ci_high", "p_value"):
        np.testing.assert_allclose(row[field], t["estimate" if field == "diff" else field], rtol=1e-12, err_msg=field)
    csv = report.files["comparison.csv"].read_text()
    assert "\npg,1,pg-seed1,a,final,20,2,6," in csv  # integers stay integers beside the aggregates' blanks
    assert "\npg,,pg (mean of 2 seeds),a,final,20,2,6," in csv


def test_known_sweep_report(tmp_path):
    report = build_report(write_known_sweep(tmp_path / "k"), n_boot=1000)
    p = report.paired.set_index(["data_source", "checkpoint"])
    assert p.at[("alpha", "final"), "diff"] == -0.25 and p.at[("alpha", "final"), "p_value"] == 0.125
    c = report.comparison.set_index(["run", "data_source", "checkpoint"])
    assert c.at[("pg-seed1", "alpha", "final"), "mean_at_k"] == 0.5
    assert np.isclose(c.at[("sc-seed1", "avg", "best"), "mean_at_k"], (11 / 16 + 7 / 12) / 2)


def test_paired_csv_carries_the_verdict_that_comparison_md_shows(tmp_path):
    root = build_sweep(tmp_path / "s", methods=("pg", "tis", "sc"), seeds=(1, 2), total_steps=20, eval_every=10,
                       sets={"a": 6, "b": 5}, k=2)
    single = build_sweep(tmp_path / "one", methods=("pg", "sc"), total_steps=20, eval_every=10,
                                   sets={"a": 6, "b": 5}, k=2)
    for sweep, multi in ((root, True), (single, False)):
        report = write_report(sweep, n_boot=300, figures=False)
        written = pd.read_csv(report.files["paired.csv"])
        assert list(written.columns)[-1] == "verdict"
        assert list(written["verdict"]) == [verdict(r.p_value, r.ci_low, r.ci_high, seed_variance=r.seed_variance)
                                            for r in written.itertuples()]
        assert set(written["verdict"]) <= ({"distinguishable", "borderline", "within noise"} if multi
                                          else {"single seed: between-seed variance not estimated"})
        md = report.files["comparison.md"].read_text()
        for r in written.itertuples():  # the markdown row of each comparison ends with the csv's verdict
            section = md.split(f"### `{r.checkpoint}` checkpoint")[1].split("\n### ")[0]
            row = next(line for line in section.splitlines()
                       if line.startswith(f"| {r.method_a} − {r.method_b} | {r.data_source} | {r.seeds_a} / "))
            assert row.endswith(f"| {r.verdict} |"), row


def test_verdict():
    assert verdict(0.01, 0.02, 0.2) == "distinguishable"
    assert verdict(0.01, -0.01, 0.2) == "borderline"
    assert verdict(0.2, -0.1, 0.1) == "within noise"


def test_failed_run_is_marked(tmp_path):
    from analysis.synthetic import counts_to_acc, write_run

    root = build_sweep(tmp_path / "s", methods=("pg",), total_steps=10, eval_every=5, sets={"a": 3}, k=2)
    write_run(root / "sc-seed1", method="sc", seed=1, evals={0: {"a": counts_to_acc([0, 1, 2], 2)}},
              total_steps=10, last_step=3, status="failed")
    report = write_report(root, n_boot=200, figures=False)
    md = report.files["comparison.md"].read_text()
    assert "sc-seed1 ‡" in md and "Failed: sc-seed1" in md
    assert report.comparison.query("run == 'sc-seed1' and checkpoint == 'final'")["step"].tolist() == [0, 0]


def test_mixed_seeds_and_repeats_in_the_report(tmp_path):
    from analysis.synthetic import counts_to_acc, write_run

    root = build_sweep(tmp_path / "s", methods=("pg", "sc"), seeds=(1, 2), total_steps=10, eval_every=10,
                       sets={"a": 4}, k=2)
    evals = {s: {"a": counts_to_acc([0, 1, 2, 2], 2)} for s in (0, 10)}
    write_run(root / "tis-seed1", method="tis", seed=1, evals=evals, total_steps=10,
              repeat_evals={10: [{"a": counts_to_acc([1, 1, 2, 2], 2)}]})
    report = write_report(root, n_boot=200)
    p = report.paired.set_index(["method_a", "method_b", "data_source", "checkpoint"])
    assert bool(p.at[("pg", "sc", "avg", "final"), "seed_variance"])
    single = p.loc[("pg", "tis", "avg", "final")]
    assert single["test"] == "single seed: between-seed variance not estimated" and not single["significant"]
    assert (single["seeds_a"], single["seeds_b"]) == (2, 1) and np.isnan(single["df"])
    assert "retest.csv" in report.files and (root / "report" / "retest.csv").exists()
    md = report.files["comparison.md"].read_text()
    assert "## Test-retest noise" in md and "| tis-seed1 | a | 1 | 2 |" in md
    assert "| 2 / 1 |" in md and "| bootstrap | — | no | single seed: between-seed variance not estimated |" in md


def test_progress_line_per_stage_for_long_reports(tmp_path, capsys):
    """A line per stage on stderr from PROGRESS_MIN_RUNS run folders (or with --progress); quiet below."""
    import io

    from analysis.progress import PROGRESS_MIN_RUNS, Progress

    root = build_sweep(tmp_path / "s", methods=("pg", "sc"), total_steps=10, eval_every=10, sets={"a": 3}, k=2)
    assert main([str(root), "--n-boot", "200"]) == 0
    assert "analysis:" not in capsys.readouterr().err  # 2 runs: quiet
    assert main([str(root), "--n-boot", "200", "--progress"]) == 0
    lines = capsys.readouterr().err.splitlines()
    stages = ["load", "tables of 2 runs", "curves", "csv", "eval_curves.png", "train_curves.png", "per_problem.png",
              "markdown"]
    assert lines[0] == f"analysis: 2 run folders in {root}; stages: load, tables, curves, csv, 3 figures, markdown"
    assert [line.split(": ")[1] for line in lines[1:]] == stages
    assert all(re.fullmatch(r"analysis: [^:]+: \d+\.\d s \(total \d+\.\d s\)", line) for line in lines[1:]), lines
    assert main([str(root), "--n-boot", "200", "--no-figures"]) == 0 and not capsys.readouterr().err
    assert PROGRESS_MIN_RUNS == 32
    # the times are kept whether or not a line is written, and add up per stage name
    quiet, loud = Progress(), Progress(io.StringIO())
    for progress in (quiet, loud):
        for _ in range(2):
            with progress.stage("x", "detail"):
                pass
    assert set(quiet.times) == {"x"} and quiet.times["x"] >= 0
    assert loud.stream.getvalue().count("analysis: x detail: ") == 2
