"""Run folders under concurrent launches, faults and partial starts; extending a run; short CLI errors.

One test per point of issue 14 (runner side): the folder lock (two real processes), stale temporary
files and the killed attempt's end time, a folder left before its first step, file modes, extending
``trainer.total_steps`` bit for bit, and errors without tracebacks.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from runners import validate
from runners.config import config_checks, config_error
from runners.embedded.backend import EmbeddedRun
from runners.run import run_lock, run_record
from runners.run.contract_check import check_run_dir
from runners.run.provenance import config_sha256
from runners.run.run_record import RunRecord, atomic_write_text
from runners.verl_side.backend.verl_run import VerlRun

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = [sys.executable, str(ROOT / "runners" / "launch.py")]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("warmstart_cache")


def small(results: Path, cache: Path, steps: int) -> list[str]:
    """Overrides for a seconds-long run (as in test_embedded_backend), at one thread."""
    return [
        f"results_root={results}", f"backend.cache_dir={cache}", f"trainer.total_steps={steps}",
        "trainer.prompts_per_step=8", "trainer.n=4", "backend.micro_batch_size=16", "trainer.test_freq=2",
        "trainer.save_freq=2", "eval.n=2", "model.warmstart.steps=30", "backend.sampler.run_ahead_batches=2",
        "backend.threads=1",
    ]


def composed(overrides: list[str]):
    with initialize_config_dir(config_dir=str(config_checks.CONF_DIR), version_base=None):
        return compose(config_name="config", overrides=overrides)


def launch(args: list[str], timeout: int = 400) -> subprocess.CompletedProcess:
    return subprocess.run([*LAUNCH, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=ENV)


def start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([*LAUNCH, *args], cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def wait_for(predicate, proc: subprocess.Popen, what: str, limit_s: float = 300) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            pytest.fail(f"the launch exited (status {proc.returncode}) before {what}")
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def last_step(run_dir: Path) -> int:
    try:
        return json.loads((run_dir / "metrics.json").read_text())["run"]["last_step"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return -1


def kill(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def read_train(run_dir: Path) -> list[dict]:
    rows = json.loads((run_dir / "metrics.json").read_text())["train"]
    return [{k: v for k, v in r.items() if not k.startswith("timing_s/")} for r in rows]


HOLDER = textwrap.dedent("""
    import sys, time
    from runners.run import run_lock
    with run_lock.hold(sys.argv[1]):
        print("locked", flush=True)
        time.sleep(600)
""")


# -- 1. one process per run folder --------------------------------------------------------------
def test_second_launch_on_a_busy_run_folder_fails_at_once_naming_the_holder(tmp_path, cache_dir):
    args = ["method=pg", *small(tmp_path, cache_dir, steps=400)]
    run_dir = tmp_path / "embedded_default" / "pg-seed42"
    first = start(args)
    try:
        wait_for(lambda: last_step(run_dir) >= 1, first, "the first launch's first step")
        hydra_files = {p: p.stat().st_mtime_ns for p in (run_dir / ".hydra").iterdir()}
        second = launch(args)
        record = json.loads((run_dir / "metrics.json").read_text())
        assert first.poll() is None  # the first launch still runs
    finally:
        kill(first)
    assert second.returncode == 3, second.stderr[-2000:]
    assert "run folder busy" in second.stderr and str(run_dir) in second.stderr
    assert f"pid {first.pid} on host {socket.gethostname()} since 20" in second.stderr
    assert "Traceback" not in second.stderr
    # the second launch wrote nothing: no attempt of its own, Hydra's files of the first untouched
    assert [a["status"] for a in record["run"]["attempts"]] == ["running"]
    assert {p: p.stat().st_mtime_ns for p in (run_dir / ".hydra").iterdir()} == hydra_files
    # the kernel released the killed holder's lock: the folder is free again, no stale lock
    assert run_lock.holder(run_dir) is None
    with run_lock.hold(run_dir) as lock, run_lock.hold(run_dir) as again:  # re-entrant in one process
        assert lock.fileno() == again.fileno()


def test_two_launches_of_one_sweep_started_together_run_it_once(tmp_path, cache_dir):
    args = ["-m", "method=pg,tis", *small(tmp_path, cache_dir, steps=20), "trainer.test_freq=10",
            "trainer.save_freq=10"]
    procs = [subprocess.Popen([*LAUNCH, *args], cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600)[1] for p in procs]
    codes = [p.returncode for p in procs]
    assert sorted(codes) == [0, 3], outs
    assert "run folder busy" in outs[codes.index(3)] and "Traceback" not in outs[codes.index(3)]
    for arm in ("pg", "tis"):
        run_dir = tmp_path / "embedded_default" / f"{arm}-seed42"
        attempts = json.loads((run_dir / "metrics.json").read_text())["run"]["attempts"]
        assert [(a["start_step"], a["end_step"], a["status"]) for a in attempts] == [(0, 20, "finished")]
        assert check_run_dir(run_dir) == []


def test_verl_attempt_takes_the_same_lock(tmp_path):
    from runners.verl_side.backend import launch as verl_launch

    cfg = composed([f"results_root={tmp_path}", "backend=verl", "method=pg"])
    run_dir = validate.run_dir_of(cfg)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir)], cwd=ROOT, env=ENV,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(run_lock.RunFolderBusy, match=rf"in use by pid {holder.pid} on host"):
            verl_launch.launch(VerlRun.of(cfg), run_dir)
    finally:
        holder.kill()
        holder.wait()
    assert not run_dir.exists()  # refused before anything was written


SLEEPING_VERL = """\
#!{python}
import os, pathlib, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as a driver busy in its grace period: only SIGKILL ends it
pathlib.Path(os.environ["FAKE_VERL_PID_FILE"] + ".tmp").write_text(str(os.getpid()))
os.replace(os.environ["FAKE_VERL_PID_FILE"] + ".tmp", os.environ["FAKE_VERL_PID_FILE"])
time.sleep(300)
"""
VERL_LAUNCHER = textwrap.dedent("""
    import sys
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from runners.config import CONF_DIR
    from runners.validate import run_dir_of
    from runners.verl_side.backend.launch import launch
    from runners.verl_side.backend.verl_run import VerlRun
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("config", overrides=sys.argv[1:])
    OmegaConf.resolve(cfg)
    launch(VerlRun.of(cfg), run_dir_of(cfg))
""")


def test_verl_keeps_the_lock_while_it_runs_even_if_its_launcher_is_killed(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from runners.verl_side.backend import overrides as ovr

    fake = tmp_path / "fake_python"  # a stand-in for verl that only sleeps
    fake.write_text(SLEEPING_VERL.format(python=sys.executable))
    fake.chmod(0o755)
    overrides = ["+experiment=qwen3_4b_sc_repro", "method=pg", f"results_root={tmp_path / 'results'}",
                 f"data.dir={tmp_path / 'data'}", f"backend.python={fake}"]
    cfg = composed(overrides)
    train, evals = ovr.data_files(cfg)
    for path in (train, *evals):
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist([{"data_source": "x", "prompt": "x"}]), path)
    run_dir = validate.run_dir_of(cfg)
    pid_file = tmp_path / "verl.pid"
    launcher = subprocess.Popen([sys.executable, "-c", VERL_LAUNCHER, *overrides], cwd=ROOT,
                                env={**ENV, "FAKE_VERL_PID_FILE": str(pid_file)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    verl_pid = None
    try:
        wait_for(pid_file.exists, launcher, "verl's start", limit_s=120)
        verl_pid = int(pid_file.read_text())
        assert f"pid {launcher.pid} on host" in (run_lock.holder(run_dir) or "")
        launcher.kill()
        launcher.wait()
        held = run_lock.holder(run_dir)  # verl inherited the locked descriptor
        assert held is not None and f"pid {launcher.pid} on host" in held and "has exited; a child" in held
        # the launcher's watchdog SIGKILLs verl's group after its grace period (10 s): the lock goes with verl
        deadline = time.monotonic() + 30
        while run_lock.holder(run_dir) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert run_lock.holder(run_dir) is None
    finally:
        launcher.kill()
        if verl_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(verl_pid, signal.SIGKILL)


# -- 2. fault hygiene ---------------------------------------------------------------------------
def test_killed_attempt_ends_at_its_last_completed_step(tmp_path, monkeypatch):
    clock = iter(f"2026-01-01T00:00:0{i}+00:00" for i in range(10))
    monkeypatch.setattr(run_record, "utc_now", lambda: next(clock))
    record = RunRecord.open(tmp_path, name="pg-seed1", method="pg", seed=1, backend="embedded", total_steps=5,
                            config_sha256="ab", versions={})
    record.start_attempt(0)  # started at :00
    record.add_train({"step": 1})  # :01
    record.add_train({"step": 2})  # :02, then the process is killed
    record.start_attempt(0)  # the next attempt starts at :03 (no checkpoint: from step 0)
    killed, new = record.data["run"]["attempts"]
    assert killed == {"started": "2026-01-01T00:00:00+00:00", "ended": "2026-01-01T00:00:02+00:00",
                      "start_step": 0, "end_step": 2, "status": "killed",
                      "last_step_at": "2026-01-01T00:00:02+00:00"}
    assert new["started"] == "2026-01-01T00:00:03+00:00" and new["ended"] is None
    record.start_attempt(0)  # killed again before completing a step: it ends when it started
    assert record.data["run"]["attempts"][1]["ended"] == "2026-01-01T00:00:03+00:00"


def test_resume_removes_stale_temp_files_and_dates_the_killed_attempt(tmp_path, cache_dir):
    args = ["method=tis", *small(tmp_path, cache_dir, steps=8)]
    run_dir = tmp_path / "embedded_default" / "tis-seed42"
    proc = start(args)
    try:
        wait_for(lambda: last_step(run_dir) >= 3, proc, "step 3")
    finally:
        kill(proc)
    killed = json.loads((run_dir / "metrics.json").read_text())["run"]
    # what a SIGKILL during atomic writes leaves (the 0-byte checkpoint temp file among them)
    stale = [run_dir / "checkpoints" / ".step_000004.pt.k3x_9q2a.tmp", run_dir / ".metrics.json.a1b2c3d4.tmp",
             run_dir / "val" / ".step_000004.jsonl.zz00yy11.tmp"]
    for p in stale:
        p.write_bytes(b"")
    unrelated = run_dir / "checkpoints" / "notes.tmp"  # not an atomic-write temp file: kept
    unrelated.write_text("mine")

    resumed = launch(args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [p for p in stale if p.exists()] == []
    assert unrelated.read_text() == "mine"
    log = (run_dir / "run.log").read_text()
    assert all(f"removed {p}" in log for p in stale)
    attempts = json.loads((run_dir / "metrics.json").read_text())["run"]["attempts"]
    assert [a["status"] for a in attempts] == ["killed", "finished"]
    assert attempts[0]["ended"] == killed["attempts"][0]["last_step_at"]  # its last step, not the resume
    assert attempts[0]["end_step"] == killed["last_step"]
    assert attempts[0]["ended"] <= attempts[1]["started"]
    unrelated.unlink()
    assert check_run_dir(run_dir) == []


def test_prepare_removes_atomic_write_temp_files_wherever_run_files_are_written(tmp_path):
    from runners.run import run_folder

    run_dir = tmp_path / "run"
    stale = [run_dir / ".config.yaml.abcd1234.tmp", run_dir / "val" / ".step_000002.jsonl.x_y_z_12.tmp",
             run_dir / "val" / "repeat_01" / ".step_000002.jsonl.00000000.tmp",
             run_dir / "checkpoints" / ".retention.json.qwertyui.tmp",
             run_dir / "export" / "model" / ".verification.json.asdfghjk.tmp"]
    kept = [run_dir / "checkpoints" / "global_step_5" / ".shard.pt.abcd1234.tmp",  # verl's own folder
            run_dir / "val" / ".step_000002.jsonl.tmp", run_dir / "val" / "step_000002.jsonl"]
    for p in stale + kept:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("")
    run_folder.prepare(run_dir, "resume", "")
    assert [p for p in stale if p.exists()] == []
    assert all(p.exists() for p in kept)


# -- 3. a folder left before the first step -----------------------------------------------------
def test_folder_left_before_the_first_step_is_reused(tmp_path, cache_dir):
    run_dir = tmp_path / "embedded_default" / "pg-seed42"
    # a start with another config, killed in its (long) warm start
    early = start([f"results_root={tmp_path}", f"backend.cache_dir={tmp_path / 'fresh_cache'}",
                   "model.warmstart.steps=100000", "trainer.lr=1e-3", "backend.threads=1"])
    try:
        wait_for(lambda: "warm start: training base model" in ((run_dir / "run.log").read_text() if (run_dir / "run.log").exists()
                                          else ""), early, "the warm start")
    finally:
        kill(early)
    assert not (run_dir / "metrics.json").exists()
    # config.yaml is written when the attempt starts (after the warm start): the killed start left none, so any
    # config launches there as new (issue 47)
    assert not (run_dir / "config.yaml").exists()
    default = composed([f"results_root={tmp_path}"])
    assert validate.validate(default, OmegaConf.to_yaml(default, resolve=True)) == "new"
    # an attempt killed in its step-0 evaluation leaves its config.yaml and no completed step
    early_cfg = composed([f"results_root={tmp_path}", f"backend.cache_dir={tmp_path / 'fresh_cache'}",
                          "model.warmstart.steps=100000", "trainer.lr=1e-3", "backend.threads=1"])
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(early_cfg, resolve=True))

    # the default config is no longer blocked
    assert validate.validate(default, OmegaConf.to_yaml(default, resolve=True)) == "reuse_empty"

    later = launch(["method=pg", *small(tmp_path, cache_dir, steps=2)])
    assert later.returncode == 0, later.stderr[-3000:]
    assert "completed no step; reusing the folder" in (run_dir / "run.log").read_text()
    assert OmegaConf.load(run_dir / "config.yaml").trainer.lr == 2e-4
    (abandoned,) = (run_dir / ".abandoned").iterdir()  # the earlier start's files, kept aside
    assert OmegaConf.load(abandoned / "config.yaml").trainer.lr == 1e-3
    record = json.loads((run_dir / "metrics.json").read_text())["run"]
    assert record["status"] == "finished" and [a["status"] for a in record["attempts"]] == ["finished"]
    assert check_run_dir(run_dir) == []

    # a folder with completed steps is still refused under another config
    other = composed([*small(tmp_path, cache_dir, steps=2), "trainer.lr=1e-3"])
    with pytest.raises(config_error.ConfigError, match=r"trainer\.lr: 0\.0002 -> 0\.001.*has completed steps"):
        validate.validate(other, OmegaConf.to_yaml(other, resolve=True))


# -- 4. readable results ------------------------------------------------------------------------
@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_atomic_writes_follow_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "metrics.json", "{}\n")
        run_record.atomic_write(tmp_path / "step.pt", lambda f: f.write(b"x"), binary=True)
    finally:
        os.umask(old)
    assert (tmp_path / "metrics.json").stat().st_mode & 0o777 == mode
    assert (tmp_path / "step.pt").stat().st_mode & 0o777 == mode


# -- 5. extending a run -------------------------------------------------------------------------
def test_extending_a_run_equals_the_longer_run_bit_for_bit(tmp_path, cache_dir):
    base = ["method=sc_tis", "trainer.save_freq=3", "sweep=extended"]
    first = launch([*base, *small(tmp_path, cache_dir, steps=4)])
    assert first.returncode == 0, first.stderr[-3000:]
    extended = launch([*base, *small(tmp_path, cache_dir, steps=6)])
    assert extended.returncode == 0, extended.stderr[-3000:]
    run_dir = tmp_path / "extended" / "sc_tis-seed42"

    straight_cfg = composed([*small(tmp_path, cache_dir, steps=6), "method=sc_tis", "trainer.save_freq=3",
                             "sweep=straight"])
    straight = validate.run_dir_of(straight_cfg)
    straight.mkdir(parents=True)
    EmbeddedRun(straight_cfg, straight, config_sha256("x")).run()

    assert read_train(run_dir) == read_train(straight)
    record = json.loads((run_dir / "metrics.json").read_text())
    assert record["val"] == json.loads((straight / "metrics.json").read_text())["val"]
    a = torch.load(run_dir / "checkpoints" / "step_000006.pt", weights_only=False)
    b = torch.load(straight / "checkpoints" / "step_000006.pt", weights_only=False)
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in b["model"])
    assert a["generators"]["data_gen"].equal(b["generators"]["data_gen"])
    attempts = record["run"]["attempts"]
    assert [(x["start_step"], x["end_step"], x["status"]) for x in attempts] == [(0, 4, "finished"),
                                                                                 (4, 6, "finished")]
    assert record["run"]["total_steps"] == 6 and OmegaConf.load(run_dir / "config.yaml").trainer.total_steps == 6
    assert record["run"]["config_sha256"] == config_sha256((run_dir / "config.yaml").read_text())
    assert "trainer.total_steps 4 -> 6" in (run_dir / "run.log").read_text()
    assert check_run_dir(run_dir) == []
    # readable results (point 4) in a real run folder
    want = 0o666 & ~run_record.current_umask()
    for p in [run_dir / "config.yaml", run_dir / "metrics.json", *(run_dir / "val").iterdir(),
              *(run_dir / "checkpoints").iterdir()]:
        assert p.stat().st_mode & 0o777 == want, p

    # every other change is still refused, and so is shortening
    for change, message in ((["trainer.lr=1e-3"], r"trainer\.lr: 0\.0002 -> 0\.001"),
                            (["trainer.total_steps=5"], r"would shorten it")):
        cfg = composed([*base, *small(tmp_path, cache_dir, steps=6), *change])
        with pytest.raises(config_error.ConfigError, match=message):
            validate.validate(cfg, OmegaConf.to_yaml(cfg, resolve=True))


# -- 6. errors without tracebacks ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("override", "wanted"),
    [
        ("method=pgg", ["Could not find 'method/pgg'", "Available options in 'method'", " sc_tis"]),
        ("scenario=nonexistent", ["Could not find 'scenario/nonexistent'", ", on_policy, "]),
        ("+trainer.total_step=60", ["trainer.total_step is not a key", "would be ignored",
                                    "did you mean trainer.total_steps"]),
        ("results_root={file}/results", ["results_root: cannot create the run folder", "is not a folder"]),
    ],
)
def test_cli_errors_are_short_and_name_the_problem(tmp_path, override, wanted):
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    out = launch([f"results_root={tmp_path / 'results'}", override.format(file=a_file)], timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.startswith("config error: ") and "Traceback" not in out.stderr
    assert len(out.stderr.splitlines()) <= 20 and '  File "' not in out.stderr, out.stderr  # not ~50 lines
    for text in wanted:
        assert text in out.stderr
    assert not (tmp_path / "results").exists()


def test_group_additions_and_keys_code_reads_may_still_be_added(tmp_path):
    def compose_with(overrides):
        with initialize_config_dir(config_dir=str(config_checks.CONF_DIR), version_base=None):
            return compose(config_name="config", overrides=overrides)

    config_checks.check_override_keys(["+experiment=qwen3_4b_sc_repro", "method=sc", "seed=3"], compose_with)
    config_checks.check_override_keys(["+model.initializer_range=0.2", "++trainer.lr=1e-3"], compose_with)
    with pytest.raises(config_error.ConfigError, match=r"\+\+trainer\.lrr=1: trainer\.lrr is not a key"):
        config_checks.check_override_keys(["++trainer.lrr=1"], compose_with)
