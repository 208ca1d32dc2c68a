"""runners.run.contract_check: a valid run passes; every kind of violation is reported with its file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from analysis.synthetic import build_sweep, counts_to_acc, write_run
from runners.run.contract_check import (
    SC_TRAIN_METRICS,
    TIS_TRAIN_METRICS,
    check_run_dir,
    main,
    required_train_metrics,
)


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A finished, valid sc_tis run: 6 train steps, evaluations at 0, 3, 6, sets a (3) and b (2), k=2."""
    evals = {s: {"a": counts_to_acc([0, 1, 2], 2), "b": counts_to_acc([2, s % 2], 2)} for s in (0, 3, 6)}
    return write_run(tmp_path / "sc_tis-seed1", method="sc_tis", seed=1, evals=evals, total_steps=6)


def _edit(run_dir: Path, fn) -> None:
    path = run_dir / "metrics.json"
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


def _one(violations: list[str], *fragments: str) -> str:
    hits = [v for v in violations if all(f in v for f in fragments)]
    assert hits, f"no violation with {fragments} in {violations}"
    return hits[0]


def test_valid_runs_pass(run_dir, tmp_path):
    assert check_run_dir(run_dir) == []
    sweep = build_sweep(tmp_path / "sweep", total_steps=10, eval_every=5, sets={"x": 3}, k=2,
                        running={"sc-seed1": 7})
    for d in sweep.iterdir():
        assert check_run_dir(d) == [], d


def test_running_run_may_be_short_and_open(run_dir):
    _edit(run_dir, lambda d: (d["run"].update(status="running", total_steps=50),
                              d["run"]["attempts"][-1].update(ended=None, end_step=None, status="running")))
    assert check_run_dir(run_dir) == []


def test_required_metrics_per_arm():
    """Required metrics follow the arm's saved traits (its method config), not its name."""
    from ablations.arms import ArmSpec
    from analysis.synthetic import method_config
    from runners.run.run_contract import IS_TRAIN_METRICS, REJECTION_TRAIN_METRICS

    tis, sc, both, pg = (required_train_metrics(ArmSpec.of(method_config(m))) for m in ("tis", "sc", "sc_tis", "pg"))
    assert set(TIS_TRAIN_METRICS) <= set(tis) and not set(SC_TRAIN_METRICS) & set(tis)
    assert set(SC_TRAIN_METRICS) <= set(sc) and not set(TIS_TRAIN_METRICS) & set(sc)
    assert set(TIS_TRAIN_METRICS) <= set(both) and set(SC_TRAIN_METRICS) <= set(both)
    assert len(pg) == 13 and required_train_metrics(None) == pg
    # a name says nothing: an arm called "plain" with a cap is a TIS arm
    assert required_train_metrics(ArmSpec.of({"name": "plain", "tis_cap": 2.0})) == tis
    assert required_train_metrics(ArmSpec.of({"name": "plain"})) == pg
    # verl's rollout correction: its weight's and its mask's metrics, by verl's names
    icepop, geo, sc_icepop = (required_train_metrics(ArmSpec.of(method_config(m)))
                              for m in ("icepop", "geo_mask", "sc_icepop"))
    assert set(IS_TRAIN_METRICS) <= set(icepop) and not set(REJECTION_TRAIN_METRICS) & set(icepop)
    assert set(REJECTION_TRAIN_METRICS) <= set(geo) and not set(IS_TRAIN_METRICS) & set(geo)
    assert set(IS_TRAIN_METRICS) | set(SC_TRAIN_METRICS) <= set(sc_icepop) and not set(TIS_TRAIN_METRICS) & set(sc_icepop)


def test_the_run_arm_comes_from_the_saved_config(run_dir):
    from runners.run.contract_check import run_arm

    (run_dir / "config.yaml").write_text("method:\n  name: odd\n  tis_cap: 1.5\n  score_centering: true\n")
    arm = run_arm(run_dir)
    assert arm.tis and arm.sc and arm.tis_cap == 1.5 and arm.rollout_correction is None
    (run_dir / "config.yaml").write_text("method: tis\n")  # no method section: unknown arm
    assert run_arm(run_dir) is None


def test_missing_and_corrupt_metrics_json(run_dir):
    (run_dir / "metrics.json").write_text('{"schema_version": 1, "run": {')
    v = _one(check_run_dir(run_dir), "metrics.json", "not valid JSON")
    assert str(run_dir) in v
    (run_dir / "metrics.json").unlink()
    _one(check_run_dir(run_dir), "metrics.json", "missing")
    (run_dir / "config.yaml").unlink()
    _one(check_run_dir(run_dir), "config.yaml", "missing")


def test_schema_version(run_dir):
    _edit(run_dir, lambda d: d.update(schema_version=2))
    _one(check_run_dir(run_dir), "metrics.json", "schema_version is 2")


def test_run_fields(run_dir):
    def bad(d):
        d["run"]["seed"] = "one"
        d["run"]["status"] = "done"
        del d["run"]["backend"]
        d["run"]["config_sha256"] = "xyz"
        d["run"]["versions"] = {"torch": 2}
    _edit(run_dir, bad)
    v = check_run_dir(run_dir)
    _one(v, "run.seed must be an integer")
    _one(v, "run.status must be one of running, finished, failed", "'done'")
    _one(v, "run.backend")
    _one(v, "config_sha256 must be hexadecimal")
    _one(v, "run.versions")


def test_seed_fixes_is_optional_and_checked(run_dir):
    from runners.embedded.backend import SEED_FIXES

    assert check_run_dir(run_dir) == []  # records before seed_fixes stay valid
    _edit(run_dir, lambda d: d["run"].update(seed_fixes=SEED_FIXES))
    assert check_run_dir(run_dir) == []

    def bad(d):
        d["run"]["seed_fixes"] = {"streams": ["data_order", "dice"], "how": {}, "not_fixed": {"x": 1},
                                  "reproducible": "yes"}
    _edit(run_dir, bad)
    v = check_run_dir(run_dir)
    _one(v, "run.seed_fixes.streams must be a list of", "'dice'")
    _one(v, "run.seed_fixes.not_fixed must be an object of strings")
    _one(v, "run.seed_fixes.reproducible must be true or false")
    _edit(run_dir, lambda d: d["run"].update(seed_fixes={**SEED_FIXES, "how": {"data_order": "x"}}))
    _one(check_run_dir(run_dir), "run.seed_fixes.how must map each of run.seed_fixes.streams")
    _edit(run_dir, lambda d: d["run"].update(seed_fixes=[]))
    _one(check_run_dir(run_dir), "run.seed_fixes must be an object")


def test_seed_pairing_needs_both_records_the_same_streams_and_the_data_order():
    from runners.embedded.backend import SEED_FIXES as LOCAL
    from runners.run.run_contract import seed_fixes_record, seed_pairing
    from runners.verl_side.backend.ingest import SEED_FIXES as VERL

    assert seed_pairing(LOCAL, dict(LOCAL)) is None and seed_pairing(VERL, VERL) is None
    assert "does not record" in seed_pairing(LOCAL, None) and "does not record" in seed_pairing({}, LOCAL)
    assert "different streams" in seed_pairing(LOCAL, VERL)
    no_order = seed_fixes_record({"sampler": "s"}, {}, reproducible=True)
    assert "does not fix data_order" in seed_pairing(no_order, no_order)
    with pytest.raises(ValueError, match="unknown seed streams"):
        seed_fixes_record({"dice": "d"}, {}, reproducible=True)


def test_last_step_and_finished_before_total(run_dir):
    _edit(run_dir, lambda d: d["run"].update(last_step=5))
    _one(check_run_dir(run_dir), "run.last_step is 5 but the last train step is 6")
    _edit(run_dir, lambda d: d["run"].update(last_step=6, total_steps=10))
    _one(check_run_dir(run_dir), "'finished' but train stops at step 6 of run.total_steps 10")


def test_attempts(run_dir):
    _edit(run_dir, lambda d: d["run"]["attempts"][-1].update(ended=None))
    _one(check_run_dir(run_dir), "'finished' but the last attempt is still open")
    _edit(run_dir, lambda d: d["run"].update(attempts=[
        {"started": "yesterday", "ended": None, "start_step": 0, "end_step": None, "status": "killed"},
        {"started": "2026-01-01T00:00:00+00:00", "ended": "2026-01-01T01:00:00+00:00", "start_step": 2,
         "end_step": 1, "status": "finished"}]))
    v = check_run_dir(run_dir)
    _one(v, "run.attempts[0].started must be an ISO-8601 time")
    _one(v, "run.attempts[0].ended is null but a later attempt exists")
    _one(v, "run.attempts[1].end_step must be null or an integer >= start_step")
    _edit(run_dir, lambda d: d["run"].update(attempts=[]))
    _one(check_run_dir(run_dir), "run.attempts is empty but train has 6 steps")


def test_train_steps_duplicates_gaps_order(run_dir):
    def bad(d):
        rows = d["train"]
        d["train"] = [rows[0], rows[2], rows[1], rows[1], rows[4], rows[5]]  # steps 1,3,2,2,5,6
    _edit(run_dir, bad)
    v = check_run_dir(run_dir)
    _one(v, "metrics.json", "duplicate steps [2]")
    _one(v, "steps not increasing", "2 after 3")
    _one(v, "missing steps [4]")


def test_train_metric_names_and_values(run_dir):
    def bad(d):
        del d["train"][2]["actor/tis_clip_fraction"]
        del d["train"][3]["actor/sc_train_head_mass"]
        d["train"][4]["actor/entropy"] = "high"
        d["train"][5]["actor/grad_norm"] = float("inf")
    _edit(run_dir, bad)  # json.dumps writes Infinity, which Python's json reads back
    v = check_run_dir(run_dir)
    _one(v, "'actor/tis_clip_fraction'", "method 'sc_tis'", "missing in 1 of 6 rows, first at step 3")
    _one(v, "'actor/sc_train_head_mass'", "first at step 4")
    _one(v, "'actor/entropy' must be a finite number or null", "step 5: 'high'")
    _one(v, "'actor/grad_norm' must be a finite number or null", "inf")


def test_null_values_are_allowed(run_dir):
    _edit(run_dir, lambda d: d["train"][1].update({"actor/ppo_kl": None}))
    assert check_run_dir(run_dir) == []


def test_val_rows(run_dir):
    def bad(d):
        d["val"][1]["step"] = 9
        del d["val"][0]["val-aux/a/truncation_ratio"]
    _edit(run_dir, bad)
    v = check_run_dir(run_dir)
    _one(v, "val step 9 outside 0..6")
    _one(v, "val steps must be strictly increasing: step 6 after step 9")
    _one(v, "val step 0 lacks 'val-aux/a/truncation_ratio'")
    _one(v, "step_000009.jsonl", "missing (metrics.json has a val row for step 9)")


def test_val_core_disagrees_with_jsonl(run_dir):
    _edit(run_dir, lambda d: d["val"][2].update({"val-core/a/acc/mean@2": 0.9}))
    _one(check_run_dir(run_dir), "step_000006.jsonl", "mean acc of a is 0.500000", "0.9")


def test_missing_jsonl(run_dir):
    (run_dir / "val" / "step_000003.jsonl").unlink()
    _one(check_run_dir(run_dir), "step_000003.jsonl", "missing")


def _rewrite_lines(path: Path, fn) -> None:
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    out = fn(lines)
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in out) + "\n")


def test_jsonl_line_schema(run_dir):
    path = run_dir / "val" / "step_000003.jsonl"

    def bad(lines):
        lines[0]["acc"] = 2
        lines[1]["acc"] = True
        lines[2]["truncated"] = "no"
        lines[3]["sample"] = -1
        del lines[4]["problem_id"]
        lines[6]["problem_id"] = ""
        lines[5]["score"] = "NaN"
        return [*lines, "{not json"]
    _rewrite_lines(path, bad)
    v = check_run_dir(run_dir)
    _one(v, "step_000003.jsonl", "acc must be 0 or 1", "line 1: 2", "line 2: True")
    _one(v, "truncated must be true or false", "line 3")
    _one(v, "sample must be an integer >= 0", "line 4")
    _one(v, "missing fields", "line 5: problem_id")
    _one(v, "problem_id must be a non-empty string", "line 7")
    _one(v, "score must be a finite number or null", "line 6")
    _one(v, "invalid JSON", "line 11")


def test_jsonl_sample_counts(run_dir):
    path = run_dir / "val" / "step_000006.jsonl"
    _rewrite_lines(path, lambda lines: [*lines, dict(lines[0])])  # a duplicated sample
    _one(check_run_dir(run_dir), "step_000006.jsonl", "samples 0..1 exactly once", "a-00 has samples [0, 0, 1]")
    _rewrite_lines(path, lambda lines: [x for x in lines if x["problem_id"] != "b-01" or x["sample"] == 0])
    _one(check_run_dir(run_dir), "b-01 has samples [0]")


def test_jsonl_empty(run_dir):
    (run_dir / "val" / "step_000000.jsonl").write_text("")
    _one(check_run_dir(run_dir), "step_000000.jsonl", "empty")


def test_problem_ids_stable_across_steps(run_dir):
    path = run_dir / "val" / "step_000006.jsonl"

    def rename(lines):
        for x in lines:
            if x["problem_id"] == "a-02":
                x["problem_id"] = "a-99"
        return lines
    _rewrite_lines(path, rename)
    _one(check_run_dir(run_dir), "step_000006.jsonl", "problems differ from those of step_000000.jsonl",
         "a lacks [a-02]", "a has extra [a-99]")


def test_problem_id_in_two_sets(run_dir):
    path = run_dir / "val" / "step_000000.jsonl"

    def clash(lines):
        for x in lines:
            if x["problem_id"] == "b-00":
                x["problem_id"] = "a-00"
        return lines
    _rewrite_lines(path, clash)
    _one(check_run_dir(run_dir), "problem ids appear in more than one data_source", "a-00")


def test_orphan_jsonl_is_ignored_but_bad_names_are_flagged(run_dir):
    (run_dir / "val" / "step_000005.jsonl").write_text("garbage\n")  # no val row: ignored
    assert check_run_dir(run_dir) == []
    (run_dir / "val" / "step5.jsonl").write_text("")
    _one(check_run_dir(run_dir), "step5.jsonl", "unexpected file name")


def test_cli(run_dir, tmp_path, capsys):
    assert main([str(run_dir)]) == 0
    assert "ok" in capsys.readouterr().out
    bad = tmp_path / "nothing"
    bad.mkdir()
    assert main([str(run_dir), str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"FAIL {bad}" in out and "metrics.json: missing" in out
    proc = subprocess.run([sys.executable, "-m", "runners.run.contract_check", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 1 and "metrics.json: missing" in proc.stdout


def test_numpy_written_values_are_checked(tmp_path):
    # a run whose evaluation has all-correct and all-wrong problems is fine
    evals = {0: {"a": np.ones((2, 3), dtype=int)}, 2: {"a": np.zeros((2, 3), dtype=int)}}
    d = write_run(tmp_path / "pg-seed0", method="pg", seed=0, evals=evals, total_steps=2)
    assert check_run_dir(d) == []


def test_repeated_evaluations_old_and_new_layouts(run_dir):
    assert check_run_dir(run_dir) == []  # no repeat folders: the layout before repeats
    rep = run_dir / "val" / "repeat_01"
    rep.mkdir()
    (rep / "step_000003.jsonl").write_text((run_dir / "val" / "step_000003.jsonl").read_text())
    (rep / "step_000099.jsonl").write_text("not json\n")  # no val row for step 99: ignored like a main file
    assert check_run_dir(run_dir) == []
    lines = (run_dir / "val" / "step_000006.jsonl").read_text().splitlines()
    (rep / "step_000006.jsonl").write_text("\n".join(lines[:-2]) + "\n")  # a problem lost
    _one(check_run_dir(run_dir), "repeat_01/step_000006.jsonl", "problems differ", "lacks [b/b-01]")
    (rep / "step_000006.jsonl").unlink()
    (run_dir / "val" / "repeat_00").mkdir()
    (rep / "notes.txt").write_text("x")
    violations = check_run_dir(run_dir)
    _one(violations, "val/repeat_00", "expected repeat_RR with RR >= 01")
    _one(violations, "repeat_01/notes.txt", "unexpected file name")
