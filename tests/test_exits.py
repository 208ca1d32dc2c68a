"""Every way a launch ends is one line and a documented exit status (issue 35, item 6).

Before the fix a run that failed on the embedded backend, Ctrl-C and a full disk ended in full
tracebacks with status 1, Ctrl-C was recorded as "failed", and the README's table listed 2, 3 and 4 only.
"""

from __future__ import annotations

import errno
import json
import re
import types
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from runners import launch, validate
from runners.config import config_checks
from runners.config.config_error import ConfigError
from runners.embedded.backend import EmbeddedRun
from runners.run.provenance import config_sha256
from runners.run.run_error import RunError
from runners.verl_side.backend.dry_run import failure_line

REPO = Path(__file__).resolve().parents[1]


def _backend_raising(monkeypatch, error: BaseException) -> None:
    def run(cfg, run_dir):
        raise error

    monkeypatch.setattr(launch, "backend_module", lambda cfg: types.SimpleNamespace(run=run))


@pytest.mark.parametrize("error,status,line", [
    (RuntimeError("the loss is nan at step 3"), launch.RUN_FAILED,
     r"^run failed: RuntimeError: the loss is nan at step 3 in .*/run; the traceback is in .*run\.log"),
    (OSError(errno.ENOSPC, "No space left on device", "/data/x/run/metrics.json.tmp"), launch.RUN_FAILED,
     r"^run failed: no space left on the device holding /data/x/run; .*metrics\.json keeps the steps"),
    (KeyboardInterrupt(), launch.INTERRUPTED, r"^stopped by the user \(Ctrl-C\): .*/run; run the same command"),
    (RunError("verl exited with status 1; see x.log"), launch.RUN_FAILED, r"^run failed: verl exited with status 1"),
    (ConfigError("actor_rollout_ref.rollout.x=1: no (the dry run)"), launch.CONFIG_ERROR,
     r"^config error: actor_rollout_ref\.rollout\.x=1"),
])
def test_each_way_a_run_stops_is_one_line_and_its_status(tmp_path, monkeypatch, capsys, error, status, line):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _backend_raising(monkeypatch, error)
    with pytest.raises(SystemExit) as stop:
        launch.run_backend(types.SimpleNamespace(), run_dir)
    assert stop.value.code == status
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert re.search(line, err.strip()), err
    if type(error) is RuntimeError:
        assert "Traceback" in (run_dir / "run.log").read_text()  # where the line says to look


@pytest.mark.parametrize("stop,status,line", [
    (KeyboardInterrupt(), launch.INTERRUPTED, "stopped by the user (Ctrl-C)"),
    (launch.Terminated(), launch.TERMINATED, "stopped by SIGTERM"),
])
@pytest.mark.parametrize("then", [BrokenPipeError(32, "Broken pipe"), RuntimeError("the tracker's finish failed")])
def test_an_error_raised_while_stopping_keeps_the_stops_status(tmp_path, monkeypatch, capsys, stop, status, line,
                                                               then):
    """Ctrl-C with ``2>&1 | tee log``: tee dies of the same Ctrl-C, and the stopped run's last progress redraw
    meets the closed pipe; the stop is what happened, not a failed run."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()

    def run(cfg, run_dir):
        try:
            raise stop
        finally:
            raise then

    monkeypatch.setattr(launch, "backend_module", lambda cfg: types.SimpleNamespace(run=run))
    with pytest.raises(SystemExit) as stopped:
        launch.run_backend(types.SimpleNamespace(), run_dir)
    assert stopped.value.code == status
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith(line) and "Traceback" not in err, err
    if isinstance(then, RuntimeError):  # not a closed console: its traceback is kept in the run's log
        assert "the tracker's finish failed" in (run_dir / "run.log").read_text()


def test_ctrl_c_before_any_run_is_one_line_and_130(monkeypatch, capsys):
    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(launch, "prevalidate", interrupted)
    assert launch.cli(["method=pg"]) == launch.INTERRUPTED == 130
    assert capsys.readouterr().err.strip() == "stopped by the user (Ctrl-C) before any run started"


@pytest.mark.parametrize("stop,status,line", [
    (KeyboardInterrupt(), launch.INTERRUPTED, "stopped by the user (Ctrl-C) during the sweep"),
    (launch.Terminated(), launch.TERMINATED, "stopped by SIGTERM during the sweep"),
])
def test_a_stop_outside_any_run_after_the_sweep_started_says_so(monkeypatch, capsys, stop, status, line):
    """hydra/launcher=parallel: the stop reaches the launch in its wait on the job processes, after runs may have
    finished; "before any run started" would be false."""
    def stopped():
        raise stop

    monkeypatch.setattr(launch, "prevalidate", lambda argv: [])
    monkeypatch.setattr(launch, "jobs_run_in_this_process", lambda argv: False)
    monkeypatch.setattr(launch, "main", stopped)
    assert launch.cli(["-m", "method=pg,tis", "hydra/launcher=parallel"]) == status
    err = capsys.readouterr().err.strip()
    assert err.startswith(line) and err.endswith("run the same command again to resume the others"), err
    assert len(err.splitlines()) == 1 and "before any run started" not in err


def test_ctrl_c_is_recorded_as_stopped_by_the_user(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    overrides = [f"results_root={tmp_path}", f"backend.cache_dir={cache}", "trainer.total_steps=4",
                 "trainer.prompts_per_step=4", "trainer.n=2", "backend.micro_batch_size=8", "trainer.test_freq=2",
                 "trainer.save_freq=2", "eval.n=2", "model.warmstart.steps=2", "backend.threads=1"]
    with initialize_config_dir(config_dir=str(config_checks.CONF_DIR), version_base=None):
        cfg = compose(config_name="config", overrides=overrides)
    run_dir = validate.run_dir_of(cfg)
    run_dir.mkdir(parents=True)
    run = EmbeddedRun(cfg, run_dir, config_sha256("x"))
    original = run.train_step

    def train_step():
        if run.step == 1:
            raise KeyboardInterrupt
        return original()

    monkeypatch.setattr(run, "train_step", train_step)
    with pytest.raises(KeyboardInterrupt):
        run.run()
    record = json.loads((run_dir / "metrics.json").read_text())["run"]
    assert record["status"] == "stopped" and record["attempts"][-1]["status"] == "stopped"
    assert record["last_step"] == 1


def test_a_failed_dry_run_check_is_one_line_naming_the_keys(tmp_path):
    reason = ("ValueError: dry run against the installed verl failed:\n  - actor_rollout_ref.rollout.engine_kwargs."
              "vllm.max_logprobs=128 is below the head size 129: vLLM refuses the request\n  - trainer.x must be y\n")
    line = failure_line(reason, tmp_path / "check.log")
    assert "\n" not in line and line.startswith("actor_rollout_ref.rollout.engine_kwargs.vllm.max_logprobs=128")
    assert "trainer.x must be y" in line and str(tmp_path / "check.log") in line


def test_the_readme_lists_every_exit_status_of_the_launcher():
    readme = (REPO / "README.md").read_text()
    table = readme.split("## When something goes wrong", 1)[1].split("\n\n", 2)[1]
    listed = {int(m) for m in re.findall(r"^\|[^|]*\| (\d+) \|", table, flags=re.M)}
    statuses = {0, 1, launch.CONFIG_ERROR, launch.FOLDER_BUSY, launch.RUN_FAILED, launch.DOES_NOT_FIT,
                launch.INTERRUPTED, launch.TERMINATED}  # issue 47: SIGTERM and the dry run's misfit too
    assert statuses == listed, listed


def test_the_device_check_with_an_unwritable_out_is_one_line(tmp_path):
    import subprocess
    import sys

    blocker = tmp_path / "a_file"
    blocker.write_text("")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.device_check", "--cpu-small", "--out",
                           str(blocker / "out")], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().startswith(f"device_check: cannot write the report into OUT={blocker / 'out'}")
