"""SIGTERM like Ctrl-C, a closed pipe, and ordinary inputs without a traceback (issue 47, items 3 and 4).

Before the fix: SIGTERM (a scheduler's preemption or time limit, ``timeout``) printed nothing, exited 124 or -15 and
left the record ``running``; Ctrl-C while piping through ``2>&1 | tee log`` exited 1 from a ``BrokenPipeError``;
``python -m analysis SWEEP --n-boot 0`` raised ``IndexError``; ``-m hydra/launcher=parallel`` at too many threads
printed Hydra's "Error executing job" and a traceback, the useful line last.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from analysis.__main__ import main as analysis_main
from analysis.synthetic import build_sweep
from runners import launch
from runners.run import run_folder

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = [sys.executable, str(ROOT / "runners" / "launch.py")]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
#: A run long enough to be interrupted in its loop (a step takes about 0.1 s on one thread).
LONG = ["trainer.total_steps=400", "trainer.prompts_per_step=4", "trainer.n=2", "backend.micro_batch_size=8",
        "eval.n=1", "trainer.test_freq=400", "trainer.save_freq=400", "backend.threads=1"]


def wait_for_steps(run: Path, proc: subprocess.Popen, steps: int = 2, limit_s: float = 240) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the launcher ended before it was interrupted"
        try:
            if json.loads((run / "metrics.json").read_text())["run"]["last_step"] >= steps:
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"no step {steps} in {run} within {limit_s} s")


def record(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())["run"]


def test_sigterm_is_one_line_status_143_and_the_run_stopped_and_resumable(tmp_path):
    run = tmp_path / "embedded_default" / "pg-seed42"
    proc = subprocess.Popen([*LAUNCH, *LONG, f"results_root={tmp_path}"], cwd=ROOT, env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for_steps(run, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == launch.TERMINATED == 143
    line = (f"stopped by SIGTERM (a scheduler's preemption or time limit, timeout, kill): {run}; run the same "
            "command again to resume it\n")  # after the progress bar's last redraw
    assert err.count("stopped") == 1 and line in err, err[-2000:]
    assert "Traceback" not in err
    assert record(run)["status"] == "stopped" and record(run)["attempts"][-1]["status"] == "stopped"
    assert run_folder.plan(run, (run / "config.yaml").read_text()) == "resume"  # the same command resumes


def test_ctrl_c_with_a_closed_pipe_keeps_status_130(tmp_path):
    run = tmp_path / "embedded_default" / "pg-seed42"
    proc = subprocess.Popen([*LAUNCH, *LONG, f"results_root={tmp_path}"], cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # as `2>&1 | tee log`
    wait_for_steps(run, proc)
    # tee dies of the same Ctrl-C: the signal, then the pipe closes while the launcher stops; the stopped run's last
    # progress redraw meets the closed pipe (a BrokenPipeError raised while handling the Ctrl-C: it ended as "run
    # failed", status 4, in one fresh-clone CI run; tests/test_exits.py holds that order deterministically)
    proc.send_signal(signal.SIGINT)
    proc.stdout.close()
    assert proc.wait(timeout=120) == launch.INTERRUPTED
    assert record(run)["status"] == "stopped"


def test_say_on_a_closed_stderr_is_silent(monkeypatch):
    class Closed:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self):
            raise ValueError("closed")

    monkeypatch.setattr(sys, "stderr", Closed())
    launch.say("stopped by the user (Ctrl-C): x")  # no exception


@pytest.mark.parametrize("n_boot", ["0", "-5", "39", "x"])
def test_n_boot_is_checked_in_one_line(tmp_path, capsys, n_boot):
    build_sweep(tmp_path / "s", methods=("pg", "sc"), seeds=(1, 2))
    with pytest.raises(SystemExit) as stop:
        analysis_main([str(tmp_path / "s"), "--n-boot", n_boot, "--no-figures"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [err.strip()] and err.startswith("error: python -m analysis: argument --n-boot")
    assert not (tmp_path / "s" / "report").exists()


def test_the_parallel_launchers_refusal_is_one_line_before_any_job(tmp_path):
    done = subprocess.run([*LAUNCH, "-m", "method=pg,tis", f"results_root={tmp_path}", "hydra/launcher=parallel",
                           "hydra.launcher.n_jobs=2", f"backend.threads={os.cpu_count()}"],
                          capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()], done.stderr
    assert done.stderr.startswith(f"config error: backend.threads={os.cpu_count()} x hydra.launcher.n_jobs=2")
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_during_a_checkpoint_save_is_enospc_naming_the_file(tmp_path, monkeypatch):
    import errno
    import io

    import torch

    from runners.embedded import checkpoint

    class FullDisk(io.RawIOBase):
        """A file on a disk with 1 kB left."""

        def __init__(self):
            self.written = 0

        def writable(self):
            return True

        def write(self, data):
            if self.written + len(data) > 1024:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.written += len(data)
            return len(data)

    state = {"w": torch.zeros(4096)}
    with pytest.raises(RuntimeError, match="enforce fail"):  # what torch's own writer reports
        torch.save(state, FullDisk())

    def atomic_write(path, write, binary=False):
        write(FullDisk())

    monkeypatch.setattr(checkpoint, "atomic_write", atomic_write)
    with pytest.raises(OSError) as err:
        checkpoint.save_checkpoint(tmp_path, 2, state, keep=2)
    assert err.value.errno == errno.ENOSPC and err.value.filename == str(tmp_path / "checkpoints" / "step_000002.pt")


def test_a_dry_run_whose_plan_does_not_fit_exits_5_like_the_capacity_cli(tmp_path):
    """Issue 47: the dry run of a plan that does not fit exited 0 (``python -m runners.capacity`` exits 5)."""
    done = subprocess.run([*LAUNCH, "+experiment=qwen3_4b_sc_repro", "gpu=rtx4090_24gb", "method=pg",
                           f"results_root={tmp_path}", "backend.dry_run=true"],
                          capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=400)
    assert done.returncode == launch.DOES_NOT_FIT == 5, done.stderr[-3000:]
    capacity_md = tmp_path / "qwen3_4b_sc_repro" / "pg-seed42" / "verl" / "dry_run" / "capacity.md"
    assert done.stderr.strip().splitlines()[-1] == (
        f"does not fit: the capacity plan of pg-seed42 ({capacity_md}) (each refusal logged above); a launch would "
        "be refused before Ray starts")
    assert capacity_md.exists() and "Traceback" not in done.stderr


def test_help_says_how_to_launch_where_results_go_and_the_exits():
    done = subprocess.run([*LAUNCH, "--help"], capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=120)
    assert done.returncode == 0
    for words in ("-m runs every combination", "backend.dry_run=true", "<results_root>/<sweep>/<run_name>/",
                  "exit status: 0 done; 2 config error", "143 SIGTERM", "  method: pg, tis, sc, sc_tis, icepop"):
        assert words in done.stdout, words
    assert "base_method" not in done.stdout and "base_config" not in done.stdout


@pytest.mark.parametrize("override,wanted", [
    ("method=pg,sc", "config error: method=pg,sc: several values are a sweep, which needs -m"),
    ("method=base_method", "config error: method=base_method: base_method is the schema of the method group"),
])
def test_a_sweep_without_m_and_a_schema_base_are_one_line(tmp_path, override, wanted):
    done = subprocess.run([*LAUNCH, override, f"results_root={tmp_path / 'r'}"], capture_output=True, text=True,
                          cwd=ROOT, env=ENV, timeout=120)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith(wanted), done.stderr
    assert not (tmp_path / "r").exists()


def test_a_run_of_another_evaluation_protocol_is_refused_not_promised_apart(tmp_path):
    small = ["trainer.total_steps=2", "trainer.prompts_per_step=4", "trainer.n=2", "backend.micro_batch_size=8",
             "trainer.test_freq=2", "trainer.save_freq=2", "backend.threads=1", f"results_root={tmp_path}"]
    first = subprocess.run([*LAUNCH, *small, "eval.n=1"], capture_output=True, text=True, cwd=ROOT, env=ENV,
                           timeout=300)
    assert first.returncode == 0, first.stderr
    other = subprocess.run([*LAUNCH, *small, "eval.n=2", "method=tis"], capture_output=True, text=True, cwd=ROOT,
                           env=ENV, timeout=300)
    assert other.returncode == 2 and other.stderr.startswith("config error: eval.n=2 (theirs: 1): tis-seed42 would "
                                                             "differ"), other.stderr
    assert sorted(p.name for p in (tmp_path / "embedded_default").iterdir()) == [".pg-seed42.lock", "pg-seed42"]
