"""One damaged file never takes the report down (issue 35, item 2).

Each kind of damage (bytes that are not UTF-8, a truncated JSON line, an empty file) in each file of a
run's record skips that run, listed with the reason, and the other runs are analysed; ``--strict``
fails naming the file. Before the fix a non-UTF-8 ``config.yaml`` raised UnicodeDecodeError out of
the report, and any broken ``val/*.jsonl`` aborted the whole report.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from analysis.__main__ import main as analysis_main
from analysis.load import SweepError, load_sweep
from analysis.synthetic import build_sweep
from runners.run.contract_check import main as contract_main

VAL = "val/step_000010.jsonl"
DAMAGE = {
    "config-not-utf8": ("config.yaml", lambda b: b"\xff\xfe" + b, "not UTF-8 text"),
    "config-empty": ("config.yaml", lambda b: b"", "empty file"),
    "metrics-not-utf8": ("metrics.json", lambda b: b[:10] + b"\xc3\x28" + b[10:], "not UTF-8 text"),
    "metrics-truncated": ("metrics.json", lambda b: b[: len(b) // 2], "not valid JSON"),
    "metrics-empty": ("metrics.json", lambda b: b"", "empty file"),
    "val-not-utf8": (VAL, lambda b: b"\x80" + b, "not UTF-8 text"),
    "val-truncated-line": (VAL, lambda b: b[:-25] + b"\n", "invalid JSON"),
    "val-empty": (VAL, lambda b: b"", "no samples (the file is empty)"),
}


@pytest.fixture
def sweep_dir(tmp_path):
    return build_sweep(tmp_path / "s", methods=("pg", "sc"), seeds=(1, 2), total_steps=10, eval_every=10,
                       sets={"a": 3}, k=2)


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_damaged_file_skips_its_run_only(sweep_dir, kind, capsys):
    name, damage, reason = DAMAGE[kind]
    path = sweep_dir / "sc-seed2" / name
    path.write_bytes(damage(path.read_bytes()))
    sweep = load_sweep(sweep_dir)
    assert list(sweep.runs.index) == ["pg-seed1", "pg-seed2", "sc-seed1"]
    reasons = sweep.skipped[sweep_dir / "sc-seed2"]
    assert any(r.startswith(f"{path}: {reason}") for r in reasons), reasons
    with pytest.raises(SweepError, match=reason.split(" (")[0]):
        load_sweep(sweep_dir, strict=True)
    assert analysis_main([str(sweep_dir), "--no-figures", "--n-boot", "100"]) == 0
    assert f"{path}: {reason}" in capsys.readouterr().err
    assert analysis_main([str(sweep_dir), "--no-figures", "--strict"]) == 2


def test_contract_checker_names_a_sweep_folder_instead_of_a_run(sweep_dir, capsys):
    assert contract_main([str(sweep_dir)]) == 2
    err = capsys.readouterr().err
    assert "is a sweep folder" in err and "sc-seed1" in err and "config.yaml missing" not in err


def test_the_contract_checkers_hint_for_a_sweep_folder_passes_with_a_report_in_it(sweep_dir, capsys):
    """Issue 47: the hint named ``SWEEP/*/``, which holds ``report/`` too, then reported as a failing run."""
    assert analysis_main([str(sweep_dir), "--no-figures", "--n-boot", "100"]) == 0
    capsys.readouterr()
    assert contract_main([str(sweep_dir)]) == 2
    hint = capsys.readouterr().err.strip().split("python -m runners.run.contract_check ")[1]
    assert contract_main(hint.split()) == 0, hint


def test_cross_checkpoint_latest_is_one_clear_line(sweep_dir):
    proc = subprocess.run([sys.executable, "-m", "analysis.cross", f"{sweep_dir}:pg", str(sweep_dir),
                           "--checkpoint", "latest"], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "checkpoint 'latest'" in proc.stderr and "invalid literal" not in proc.stderr


def test_report_out_to_an_unwritable_place_is_one_clear_line(sweep_dir, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    proc = subprocess.run([sys.executable, "-m", "analysis", str(sweep_dir), "--no-figures", "--out",
                           str(blocker / "report")], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: cannot write the report") and str(blocker) in proc.stderr


def test_val_files_without_val_rows_are_named_not_no_evaluation_yet(tmp_path):
    import json

    root = build_sweep(tmp_path / "s", methods=("pg",), total_steps=10, eval_every=10, sets={"a": 3}, k=2)
    metrics = root / "pg-seed1" / "metrics.json"
    record = json.loads(metrics.read_text())
    record["val"] = []
    metrics.write_text(json.dumps(record))
    with pytest.raises(SweepError) as err:
        load_sweep(root)
    text = str(err.value)
    assert "no evaluation yet" not in text
    assert f"{metrics}: no val rows, but {root / 'pg-seed1' / 'val'} holds 2 evaluation file(s)" in text
