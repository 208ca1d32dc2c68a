"""Trackers on the embedded backend: ``backend.logger`` sends the run's rows through verl's ``Tracking``.

A tiny run launched with ``backend.logger=[tensorboard]`` leaves a TensorBoard event file in its run
folder whose scalars, read back with TensorBoard's ``EventAccumulator``, are the train and evaluation
rows of ``metrics.json`` (the record); the default (``[]``) writes no tracker file; a name verl does not
know, or a tracker whose package is missing, is a config error naming ``backend.logger``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runners import launch, validate
from runners.config import config_checks, config_error

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = [sys.executable, str(ROOT / "runners" / "launch.py")]


def small(results: Path) -> list[str]:
    return [f"results_root={results}", "trainer.total_steps=2", "trainer.prompts_per_step=4", "trainer.n=2",
            "backend.micro_batch_size=8", "eval.n=1", "trainer.test_freq=2", "trainer.save_freq=2",
            "backend.threads=1"]


def test_tensorboard_event_file_holds_the_records_rows(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = subprocess.run([*LAUNCH, *small(tmp_path), "backend.logger=[tensorboard]"], capture_output=True,
                         text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    run_dir = tmp_path / "embedded_default" / "pg-seed42"
    events = sorted((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1
    acc = EventAccumulator(str(events[0]))
    acc.Reload()
    record = json.loads((run_dir / "metrics.json").read_text())
    for rows in (record["train"], record["val"]):
        for metric in [k for k in rows[0] if k != "step" and rows[0][k] is not None][:12]:
            logged = {e.step: e.value for e in acc.Scalars(metric)}
            assert logged == pytest.approx({r["step"]: r[metric] for r in rows if r.get(metric) is not None},
                                           rel=1e-6), metric
    assert "val-core/arith_a/acc/mean@1" in acc.Tags()["scalars"]


def test_default_runs_open_no_tracker(tmp_path):
    from omegaconf import OmegaConf

    from runners.embedded.trackers import RunTracker

    cfg = OmegaConf.create({"backend": {"logger": [], "project_name": "p"}, "run_name": "r"})
    tracker = RunTracker(cfg, tmp_path)
    tracker.log({"step": 1, "x": 1.0})
    tracker.finish()
    assert tracker.tracking is None and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("logger", "wanted"), [
    ("[nope]", r"backend\.logger contains 'nope', which is not one of verl's trackers; allowed: .*tensorboard"),
    ("[mlflow]", r"backend\.logger contains 'mlflow', but its package 'mlflow' is not installed"),
])
def test_bad_logger_is_a_config_error(tmp_path, logger, wanted):
    import importlib.util

    if logger == "[mlflow]" and importlib.util.find_spec("mlflow") is not None:
        pytest.skip("mlflow is installed here")
    with pytest.raises(config_error.ConfigError, match=wanted):
        launch.prevalidate([f"results_root={tmp_path / 'r'}", f"backend.logger={logger}"])
    assert not (tmp_path / "r").exists()


def test_folders_written_before_the_logger_key_still_resume(tmp_path):
    """Where live curves go changes no number: a folder whose config.yaml predates ``backend.logger`` (or
    names other loggers) resumes."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from runners.run.provenance import config_sha256

    with initialize_config_dir(config_dir=str(config_checks.CONF_DIR), version_base=None):
        cfg = compose(config_name="config", overrides=[f"results_root={tmp_path}", "backend.logger=[console]"])
    old = OmegaConf.to_container(cfg, resolve=True)
    del old["backend"]["logger"], old["backend"]["project_name"]
    old_yaml = OmegaConf.to_yaml(OmegaConf.create(old))
    run_dir = validate.run_dir_of(cfg)
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(old_yaml)
    record = {"schema_version": 1, "run": {"config_sha256": config_sha256(old_yaml)}, "train": [{"step": 1}]}
    (run_dir / "metrics.json").write_text(json.dumps(record))
    assert validate.validate(cfg, OmegaConf.to_yaml(cfg, resolve=True)) == "resume"
