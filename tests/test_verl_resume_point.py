"""An attempt never resumes past a checkpoint whose step's metrics were not logged.

verl saves step N's checkpoint before it validates and logs step N: a launcher killed in between
leaves the tracker at N and step N in no log (found by the rehearsal's kill test: attempt 4 resumed
at step 8 that attempt 3 had checkpointed but not logged, and ingestion refused the gap for good).
The checkpoint lookup is verl's own (``find_latest_ckpt_path``, what ``resume_mode=auto`` calls).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

from runners.run import verl_files
from runners.verl_side.backend import resume_point
from runners.verl_side.backend.ingest import IngestError, merge_attempts, read_attempts


def write_attempt(run: Path, number: int, resumed_at: int, last: int) -> None:
    """An attempt's file-logger lines: the evaluation at its resume step, then train steps after it."""
    lines = [{"step": resumed_at, "data": {"val-core/aime2024/acc/mean@2": 0.5}}]
    lines += [{"step": s, "data": {"critic/score/mean": s + number / 10}} for s in range(resumed_at + 1, last + 1)]
    path = verl_files.AttemptPaths(run, number).file_logger
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def write_checkpoints(run: Path, steps: list[int], tracked: int) -> Path:
    ckpt = verl_files.checkpoints_dir(run)
    for s in steps:
        (ckpt / f"global_step_{s}" / "actor").mkdir(parents=True)
        (ckpt / f"global_step_{s}" / "data.pt").write_text(f"dataloader at {s}")
    (ckpt / verl_files.TRACKER).write_text(str(tracked))
    return ckpt


def merged_steps(run: Path) -> dict[int, float]:
    train, _ = merge_attempts(read_attempts(run))
    return {s: row["critic/score/mean"] for s, row in train.items()}


@pytest.fixture
def killed_after_checkpoint(tmp_path) -> Path:
    """Attempt 1 logged 1..3, attempt 2 resumed at 2 and logged 3..7, then saved step 8 and died."""
    run = tmp_path / "pg-seed42"
    write_attempt(run, 1, 0, 3)
    write_attempt(run, 2, 2, 7)
    write_checkpoints(run, [2, 4, 6, 8], tracked=8)
    return run


def test_the_next_attempt_resumes_from_the_newest_logged_checkpoint(killed_after_checkpoint):
    run = killed_after_checkpoint
    ckpt = verl_files.checkpoints_dir(run)
    assert find_latest_ckpt_path(str(ckpt)).endswith("global_step_8")  # what verl alone would do

    assert resume_point.align(run, 3) == 6
    assert find_latest_ckpt_path(str(ckpt)).endswith("global_step_6")
    moved = ckpt / resume_point.SUPERSEDED / "global_step_8-before-attempt-003"
    assert (moved / "data.pt").read_text() == "dataloader at 8"  # moved, not deleted
    assert not (ckpt / "global_step_8").exists()

    write_attempt(run, 3, 6, 10)  # the resumed attempt trains 7..10 again
    steps = merged_steps(run)
    assert sorted(steps) == list(range(1, 11))
    assert steps[7] == pytest.approx(7.3) and steps[5] == pytest.approx(5.2)


def test_without_the_alignment_the_record_has_a_gap(killed_after_checkpoint):
    run = killed_after_checkpoint
    write_attempt(run, 3, 8, 10)  # verl's own resume from the unlogged checkpoint
    with pytest.raises(IngestError, match=r"train steps \[8\] \(1\) are in no attempt's log"):
        merged_steps(run)


def test_a_run_already_left_with_a_gap_is_healed(killed_after_checkpoint):
    run = killed_after_checkpoint
    write_attempt(run, 3, 8, 12)  # resumed at the unlogged step 8 before this fix
    write_checkpoints(run, [10, 12], tracked=12)
    assert resume_point.align(run, 4) == 6
    assert sorted(p.name for p in (verl_files.checkpoints_dir(run) / resume_point.SUPERSEDED).iterdir()) == [
        f"global_step_{s}-before-attempt-004" for s in (10, 12, 8)]
    write_attempt(run, 4, 6, 12)
    assert sorted(merged_steps(run)) == list(range(1, 13))


def test_a_logged_checkpoint_is_left_alone(tmp_path):
    run = tmp_path / "pg-seed42"
    write_attempt(run, 1, 0, 9)
    ckpt = write_checkpoints(run, [4, 8], tracked=8)
    assert resume_point.align(run, 2) == 8
    assert find_latest_ckpt_path(str(ckpt)).endswith("global_step_8")
    assert not (ckpt / resume_point.SUPERSEDED).exists()


def test_no_logged_checkpoint_means_a_fresh_start(tmp_path):
    run = tmp_path / "pg-seed42"
    write_attempt(run, 1, 0, 1)
    ckpt = write_checkpoints(run, [2], tracked=2)
    assert resume_point.align(run, 2) is None
    assert find_latest_ckpt_path(str(ckpt)) is None
    assert (ckpt / resume_point.SUPERSEDED / "global_step_2-before-attempt-002" / "actor").is_dir()


def test_a_tracker_torn_by_a_kill_points_at_the_newest_logged_checkpoint(tmp_path):
    run = tmp_path / "pg-seed42"
    write_attempt(run, 1, 0, 5)
    ckpt = write_checkpoints(run, [2, 4], tracked=4)
    (ckpt / verl_files.TRACKER).write_text("")  # verl's open(..., "w") done, its write not
    with pytest.raises(ValueError):
        find_latest_ckpt_path(str(ckpt))  # verl alone: the next attempt dies at start-up
    assert resume_point.align(run, 2) == 4
    assert find_latest_ckpt_path(str(ckpt)).endswith("global_step_4")
    assert not (ckpt / resume_point.SUPERSEDED).exists()
