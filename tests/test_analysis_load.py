"""analysis.load: sweeps load into frames; bad sweeps raise errors naming the file and the difference."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from analysis.load import SweepError, load_sweep
from analysis.synthetic import build_sweep, counts_to_acc, write_run


def _sweep(root: Path, **kw) -> Path:
    args = dict(methods=("pg", "sc"), total_steps=20, eval_every=10, sets={"a": 3, "b": 2}, k=2)
    return build_sweep(root, **{**args, **kw})


def test_frames(tmp_path):
    sweep = load_sweep(_sweep(tmp_path / "s", running={"sc-seed1": 12}))
    assert list(sweep.runs.index) == ["pg-seed1", "sc-seed1"]
    assert sweep.runs.at["sc-seed1", "in_progress"] and not sweep.runs.at["pg-seed1", "in_progress"]
    assert sweep.runs.at["sc-seed1", "last_step"] == 12 and sweep.runs.at["sc-seed1", "last_eval_step"] == 10
    assert sweep.k == 2 and sweep.sets == ("a", "b")
    assert len(sweep.samples) == (3 + 2) * 2 * (3 + 2)  # (pg 3 evals + sc 2) x k x problems
    assert sweep.correct.shape == (5, 5)
    assert list(sweep.steps("sc-seed1")) == [0, 10]
    assert sweep.train.groupby("run").size().to_dict() == {"pg-seed1": 20, "sc-seed1": 12}
    # correct counts agree with the samples
    s = sweep.samples
    c = s[(s.run == "pg-seed1") & (s.step == 20) & (s.problem_id == "b-01")]["acc"].sum()
    assert sweep.correct.loc[("pg-seed1", 20), ("b", "b-01")] == c
    assert sweep.set_slices == [slice(0, 3), slice(3, 5)]


def test_empty_and_missing_sweep(tmp_path):
    with pytest.raises(SweepError, match="empty sweep"):
        load_sweep(tmp_path)
    with pytest.raises(SweepError, match="not a directory"):
        load_sweep(tmp_path / "nope")


def test_run_directory_instead_of_sweep(tmp_path):
    root = _sweep(tmp_path / "s")
    with pytest.raises(SweepError, match="this is a run directory"):
        load_sweep(root / "pg-seed1")


def test_missing_metrics_json(tmp_path):
    root = _sweep(tmp_path / "s")
    (root / "sc-seed1" / "metrics.json").unlink()
    with pytest.raises(SweepError) as e:
        load_sweep(root, strict=True)
    assert str(root / "sc-seed1" / "metrics.json") + ": missing" in str(e.value)
    sweep = load_sweep(root)  # default: the partial sweep is analysed, the run listed as skipped
    assert list(sweep.runs.index) == ["pg-seed1"]
    assert list(sweep.skipped) == [root / "sc-seed1"]
    assert str(root / "sc-seed1" / "metrics.json") + ": missing" in sweep.skipped[root / "sc-seed1"]


def test_corrupt_metrics_json(tmp_path):
    root = _sweep(tmp_path / "s")
    path = root / "pg-seed1" / "metrics.json"
    path.write_text(path.read_text()[:200])
    with pytest.raises(SweepError, match=r"pg-seed1/metrics.json: not valid JSON"):
        load_sweep(root, strict=True)
    sweep = load_sweep(root)
    assert list(sweep.runs.index) == ["sc-seed1"]
    assert any("not valid JSON" in v for v in sweep.skipped[root / "pg-seed1"])


def test_partial_sweep_run_aborted_before_first_step(tmp_path):
    root = _sweep(tmp_path / "s")
    (root / "tis-seed1").mkdir()  # killed in the warm start: a config and a log, no metrics.json
    (root / "tis-seed1" / "config.yaml").write_text("method: tis\n")
    sweep = load_sweep(root)
    assert list(sweep.runs.index) == ["pg-seed1", "sc-seed1"]
    assert sweep.skipped == {root / "tis-seed1": [f"{root / 'tis-seed1' / 'metrics.json'}: missing"]}
    with pytest.raises(SweepError, match="tis-seed1/metrics.json: missing"):
        load_sweep(root, strict=True)
    # a val-file violation in a run with a valid metrics.json skips that run too (issue 35); strict fails
    (root / "pg-seed1" / "val" / "step_000010.jsonl").unlink()
    assert list(load_sweep(root).runs.index) == ["sc-seed1"]
    with pytest.raises(SweepError, match="pg-seed1/val/step_000010.jsonl: missing"):
        load_sweep(root, strict=True)


def test_every_run_skipped_is_an_error(tmp_path):
    root = _sweep(tmp_path / "s")
    for run in ("pg-seed1", "sc-seed1"):
        (root / run / "metrics.json").unlink()
    with pytest.raises(SweepError, match=r"no run folder has a valid record \(metrics.json, config.yaml\)"):
        load_sweep(root)


def test_corrupt_jsonl(tmp_path):
    root = _sweep(tmp_path / "s")
    path = root / "sc-seed1" / "val" / "step_000010.jsonl"
    path.write_text(path.read_text()[:-40] + "\n")
    assert any("invalid JSON (line 10" in v for v in load_sweep(root).skipped[root / "sc-seed1"])
    with pytest.raises(SweepError, match=r"sc-seed1/val/step_000010.jsonl: invalid JSON \(line 10"):
        load_sweep(root, strict=True)


def test_different_k(tmp_path):
    root = _sweep(tmp_path / "s", methods=("pg",))
    evals = {0: {"a": counts_to_acc([1, 2, 3], 4), "b": counts_to_acc([0, 4], 4)}}
    write_run(root / "sc-seed1", method="sc", seed=1, evals=evals, problems={"a": ["a-00", "a-01", "a-02"],
                                                                             "b": ["b-00", "b-01"]})
    with pytest.raises(SweepError) as e:
        load_sweep(root)
    msg = str(e.value)
    assert "sc-seed1/val/step_000000.jsonl: 4 samples per problem" in msg
    assert "pg-seed1/val/step_000000.jsonl has 2" in msg


def test_different_sets_and_problem_ids(tmp_path):
    root = _sweep(tmp_path / "s", methods=("pg",))
    evals = {0: {"a": counts_to_acc([1, 2, 0], 2), "c": counts_to_acc([0], 2)}}
    write_run(root / "sc-seed1", method="sc", seed=1, evals=evals,
              problems={"a": ["a-00", "a-01", "a-07"], "c": ["c-00"]})
    with pytest.raises(SweepError) as e:
        load_sweep(root)
    msg = str(e.value)
    assert "sc-seed1/val/step_000000.jsonl: evaluation sets/problems differ" in msg
    assert "a lacks [a-02]" in msg and "a has extra [a-07]" in msg
    assert "set 'b' absent" in msg and "extra set 'c'" in msg


def test_duplicate_run_names(tmp_path):
    root = _sweep(tmp_path / "s", methods=("pg",))
    shutil.copytree(root / "pg-seed1", root / "pg-copy")
    with pytest.raises(SweepError, match="run name 'pg-seed1' is also used by"):
        load_sweep(root)


def test_contract_violation_blocks_the_table(tmp_path):
    root = _sweep(tmp_path / "s")
    path = root / "pg-seed1" / "metrics.json"
    data = json.loads(path.read_text())
    del data["train"][4]
    path.write_text(json.dumps(data))
    with pytest.raises(SweepError, match=r"pg-seed1/metrics.json: train: missing steps \[5\]"):
        load_sweep(root, strict=True)
    assert any("train: missing steps [5]" in v for v in load_sweep(root).skipped[root / "pg-seed1"])


@pytest.mark.parametrize("damage", ["edited", "missing"])
def test_run_with_an_edited_or_missing_config_is_skipped_and_strict_fails(tmp_path, damage):
    """A tampered record (config.yaml edited after the run, or gone) leaves the run out, listed with the
    reason, and the other runs are analysed; ``strict`` refuses the sweep naming the file."""
    root = _sweep(tmp_path / "s")
    config = root / "sc-seed1" / "config.yaml"
    if damage == "edited":
        config.write_text(config.read_text() + "trainer: {lr: 0.1}\n")
        reason = f"{config}: config.yaml edited after the run wrote it: its sha256 is "
    else:
        config.unlink()
        reason = f"{config}: missing (every run keeps its resolved config)"
    sweep = load_sweep(root)
    assert list(sweep.runs.index) == ["pg-seed1"]
    assert list(sweep.skipped) == [root / "sc-seed1"]
    assert [v for v in sweep.skipped[root / "sc-seed1"] if v.startswith(reason)] != []
    with pytest.raises(SweepError) as err:
        load_sweep(root, strict=True)
    assert err.value.problems[0] == "1 contract violations; fix or remove these runs:"
    assert err.value.problems[1].startswith(reason)


def test_no_evaluation_yet(tmp_path):
    root = tmp_path / "s"
    write_run(root / "pg-seed1", method="pg", seed=1, evals={}, total_steps=10, last_step=3, status="running")
    with pytest.raises(SweepError, match="no run has an evaluation yet"):
        load_sweep(root)


def test_unevaluated_running_run_is_kept(tmp_path):
    root = _sweep(tmp_path / "s", methods=("pg",))
    write_run(root / "sc-seed1", method="sc", seed=1, evals={}, total_steps=20, last_step=0, status="running")
    sweep = load_sweep(root)
    assert sweep.runs.at["sc-seed1", "n_evals"] == 0 and sweep.evaluated_runs == ["pg-seed1"]
    assert np.isnan(sweep.runs.at["sc-seed1", "last_eval_step"])


def test_ignored_folders(tmp_path):
    root = _sweep(tmp_path / "s")
    (root / "logs").mkdir()
    (root / ".hydra").mkdir()
    (root / "report").mkdir()
    sweep = load_sweep(root)
    assert [p.name for p in sweep.ignored] == ["logs"]
