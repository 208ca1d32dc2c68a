"""No failure loop from a damaged record (issue 47, item 2).

Before the fix: a damaged ``metrics.json`` made every relaunch print "run failed: JSONDecodeError ... running the
same command again resumes" (exit 4), forever; a failed extension rewrote ``config.yaml`` first, so the original
command was then refused as "would shorten it"; with ``metrics.json`` moved away the run restored its checkpoint and
failed "train step 3 does not follow step 0", forever; ``seed=99999999999999999999`` created the folder, then failed
with an overflow and the same promise. Now: the damaged record is refused once (status 2, one line naming the
``mv`` that moves it aside, nothing changed), the launch after the ``mv`` trains the run again (the checkpoint no
record covers moved to ``checkpoints/superseded/``), ``config.yaml`` is written when the attempt starts, and the
seed is checked before anything is written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from runners import launch
from runners.config import CONF_DIR
from runners.embedded import backend as embedded_backend
from runners.embedded.backend import EmbeddedRun
from runners.run.contract_check import check_run_dir

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = [sys.executable, str(ROOT / "runners" / "launch.py")]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
SMALL = ["trainer.total_steps=2", "trainer.prompts_per_step=4", "trainer.n=2", "backend.micro_batch_size=8",
         "eval.n=1", "trainer.test_freq=2", "trainer.save_freq=2", "backend.threads=1"]


def run_launch(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([*LAUNCH, *args], capture_output=True, text=True, timeout=300, cwd=ROOT, env=ENV)


def one_line(stderr: str) -> str:
    assert stderr.strip().splitlines() == [stderr.strip()] and "Traceback" not in stderr, stderr
    return stderr.strip()


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> tuple[Path, Path]:
    """(results_root, run folder) of a finished 2-step run."""
    root = tmp_path_factory.mktemp("results")
    done = run_launch([*SMALL, f"results_root={root}"])
    assert done.returncode == 0, done.stderr
    return root, root / "embedded_default" / "pg-seed42"


def copy_of(finished_run, tmp_path) -> tuple[Path, Path]:
    import shutil

    root, run = finished_run
    shutil.copytree(root, tmp_path / "r")
    return tmp_path / "r", tmp_path / "r" / run.relative_to(root)


def snapshot(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("extend", [False, True], ids=["same-command", "extend"])
def test_a_damaged_record_is_refused_once_then_the_mv_it_names_gets_out(finished_run, tmp_path, extend):
    root, run = copy_of(finished_run, tmp_path)
    metrics = run / "metrics.json"
    metrics.write_text(metrics.read_text()[:200])  # cut short, as a full disk or an editor would
    before = snapshot(run)
    args = [*SMALL, f"results_root={root}", *(["trainer.total_steps=4"] if extend else [])]
    refused = run_launch(args)
    assert refused.returncode == 2
    line = one_line(refused.stderr)
    assert line.startswith(f"config error: {metrics} is damaged (JSONDecodeError"), line
    assert f"mv {metrics} {metrics}.damaged" in line and "resumes" not in line
    assert snapshot(run) == before  # config.yaml included: the refused extension changed nothing
    subprocess.run(["mv", str(metrics), f"{metrics}.damaged"], check=True)  # the command the line names
    again = run_launch(args)
    assert again.returncode == 0, again.stderr
    record = json.loads(metrics.read_text())
    assert record["run"]["status"] == "finished" and [r["step"] for r in record["train"]] == [1, 2, 3, 4][:len(
        record["train"])] and record["run"]["last_step"] == (4 if extend else 2)
    assert (run / "checkpoints" / "superseded" / "step_000002.pt").exists()


def test_a_record_moved_away_restarts_from_what_the_folder_proves(finished_run, tmp_path):
    root, run = copy_of(finished_run, tmp_path)
    (run / "metrics.json").rename(tmp_path / "elsewhere.json")
    done = run_launch([*SMALL, f"results_root={root}"])
    assert done.returncode == 0, done.stderr  # before: "train step 3 does not follow step 0", forever
    assert json.loads((run / "metrics.json").read_text())["run"]["last_step"] == 2
    assert "moved to" in (run / "run.log").read_text()
    assert (run / "checkpoints" / "superseded" / "step_000002.pt").exists()
    assert (run / "checkpoints" / "step_000002.pt").exists()  # the new attempt's own
    assert check_run_dir(run) == []


def test_an_extension_that_fails_before_its_attempt_leaves_config_yaml(finished_run, tmp_path, monkeypatch):
    root, run = copy_of(finished_run, tmp_path)
    config = (run / "config.yaml").read_text()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose(config_name="config", overrides=[*SMALL, f"results_root={root}", "trainer.total_steps=4"])

    def broken(run_dir):
        raise OSError(5, "Input/output error", str(run_dir))

    monkeypatch.setattr(embedded_backend, "load_latest", broken)
    with pytest.raises(OSError):
        EmbeddedRun(cfg, run, "sha").run()
    assert (run / "config.yaml").read_text() == config  # the original command still resumes
    assert run_launch([*SMALL, f"results_root={root}"]).returncode == 0


def test_a_seed_out_of_range_is_refused_before_anything_is_written(tmp_path):
    done = run_launch([*SMALL, f"results_root={tmp_path / 'r'}", "seed=99999999999999999999"])
    assert done.returncode == 2
    assert one_line(done.stderr).startswith("config error: seed=99999999999999999999: must be an integer >= 0")
    assert not (tmp_path / "r").exists()


def test_a_failure_on_a_damaged_record_does_not_promise_a_resume(tmp_path, monkeypatch, capsys):
    (tmp_path / "metrics.json").write_text("{")

    def run(cfg, run_dir):
        raise RuntimeError("boom")

    monkeypatch.setattr(launch, "backend_module", lambda cfg: types.SimpleNamespace(run=run))
    with pytest.raises(SystemExit) as stop:
        launch.run_backend(types.SimpleNamespace(), tmp_path)
    assert stop.value.code == launch.RUN_FAILED
    line = one_line(capsys.readouterr().err)
    assert "resumes" not in line and f"mv {tmp_path / 'metrics.json'}" in line, line
