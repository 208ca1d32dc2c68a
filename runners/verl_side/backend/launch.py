"""Launch one arm as ``python -m verl.trainer.main_ppo`` and follow it.

One call of :func:`launch` is one *attempt* (``<run_dir>/verl/attempt-NNN/``): verl resumes from
the newest checkpoint under ``<run_dir>/checkpoints`` by itself (``trainer.resume_mode=auto``),
so running the same command again after a crash continues the run (from the newest checkpoint whose
step's metrics were logged: :mod:`runners.verl_side.backend.resume_point`). verl's output goes to the
attempt's ``verl.log``, a progress bar follows the ``step:N`` lines of verl's console logger
(:class:`runners.verl_side.backend.child_process.OutputFollower`), and ``runners.verl_side.backend.ingest.ingest_run``
merges verl's metric files into ``metrics.json`` every ``backend.ingest_interval_s`` seconds and
once more when verl exits.

An attempt holds the run folder's lock (``runners.run.run_lock``; re-entrant, so a launch from
``runners/launch.py``, which holds it already, just keeps it): a second launch on the same folder
fails at once naming the holder. verl inherits the locked descriptor, so the lock lasts as long as
the verl process. verl runs in a process group of its own, which a watchdog
(:class:`runners.verl_side.backend.child_process.GroupReaper`) stops if the launcher dies, even by SIGKILL: no verl
driver, Ray or rollout process outlives the launcher, and the same command then resumes (the killed
attempt is recorded as ``killed``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from runners.run import run_lock, verl_files
from runners.run.run_error import RunError
from runners.run.run_folder import write_config
from runners.verl_side.backend import overrides as ovr
from runners.verl_side.backend import resume_point
from runners.verl_side.backend.child_process import GroupReaper, OutputFollower, stop_group
from runners.verl_side.backend.launch_plan import LaunchPlan
from runners.verl_side.backend.verl_run import VerlRun

log = logging.getLogger(__name__)

VERL_MODULE = "verl.trainer.main_ppo"
#: The run.log line of the final merge of an attempt's logs (``benchmarks/rehearsal/timing.py`` reads it).
INGESTED = "merged verl's logs into metrics.json in"
_STEP = re.compile(r"(?:^|\s)step:(\d+)(?:\s|$)")


@dataclasses.dataclass(frozen=True)
class LaunchSpec:
    """Everything that defines one attempt's verl process."""

    python: str
    overrides: list[str]  # composed into verl's ppo_trainer config
    hydra_overrides: list[str]  # verl's own Hydra app (output folder)
    env: dict[str, str]  # set on top of the launcher's environment
    cwd: Path
    paths: verl_files.AttemptPaths

    @property
    def argv(self) -> list[str]:
        return [self.python, "-m", VERL_MODULE, *self.overrides, *self.hydra_overrides]

    def command_line(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return f"{env} {shlex.join(self.argv)}"

    def script(self, header: str) -> str:
        lines = ["#!/usr/bin/env bash", *(f"# {h}" for h in header.splitlines()), "set -euo pipefail"]
        lines.append(f"cd {shlex.quote(str(self.cwd))}")
        lines.append(f"mkdir -p {shlex.quote(str(self.paths.attempt_dir))}")
        lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(self.env.items())]
        args = [shlex.quote(o) for o in self.argv[3:]]
        lines.append(" \\\n  ".join([f"exec {shlex.quote(self.python)} -m {VERL_MODULE}", *args]))
        return "\n".join(lines) + "\n"


def build_spec(run: VerlRun, run_dir: Path, attempt: int | None = None) -> LaunchSpec:
    """The launch of ``attempt`` (default: the next one) of this run."""
    attempt = verl_files.next_attempt(run_dir) if attempt is None else attempt
    paths = verl_files.AttemptPaths(Path(run_dir), attempt)
    python = str(run.cfg.backend.python) if run.cfg.backend.get("python") else sys.executable
    return LaunchSpec(python=python, overrides=ovr.build_overrides(run, paths), hydra_overrides=ovr.hydra_overrides(paths),
                      env=ovr.process_env(run, paths), cwd=Path.cwd().resolve(), paths=paths)


def ingest_failure(run_dir: Path, err: Exception) -> str:
    """One line for a final ingestion that failed: the record, the file and the reason (the error's own
    message), and the command that merges again once that is fixed."""
    reason = " ".join(str(err).splitlines())
    return (f"verl's logs cannot be merged into {Path(run_dir) / 'metrics.json'}: {reason} (the record is left "
            f"as it was, verl's files are kept); fix that, then merge again: "
            f"python -m runners.verl_side.backend.ingest {shlex.quote(str(run_dir))}")


def _ingest(run_dir: Path, cfg: DictConfig, *, final: bool, status: str | None = None) -> None:
    """:func:`runners.verl_side.backend.ingest.ingest_run` (``status`` as there); while verl runs
    (``final=False``) a failure is logged and retried at the next interval. The final call raises an
    ``IngestError`` (outputs that cannot make a valid record) as :class:`~runners.run.run_error.RunError`
    (:func:`ingest_failure`) and anything else as it is."""
    from runners.verl_side.backend.ingest import ingest_run

    start = time.monotonic()
    try:
        ingest_run(run_dir, cfg, status=status)
        if final:
            log.info("%s: %s %.1f s", cfg.run_name, INGESTED, time.monotonic() - start)
    except Exception as err:
        if not final:
            log.exception("ingestion failed while verl runs; retrying at the next interval")
            return
        from runners.verl_side.backend.ingest import IngestError

        if isinstance(err, IngestError):
            raise RunError(ingest_failure(run_dir, err)) from err
        raise


def show_capacity(plan: LaunchPlan, attempt_dir: Path) -> None:
    """Print the launch's capacity plan (``capacity.md``) and keep it in the attempt's folder."""
    if plan.plan is None:
        log.warning("no capacity plan: %s", plan.error)
        return
    print(plan.write(attempt_dir).read_text(), flush=True)


def launch(run: VerlRun, run_dir: Path, plan: LaunchPlan | None = None) -> None:
    """Run one attempt of this arm under verl, holding the run folder's lock; raise
    :class:`~runners.run.run_error.RunError` (one line) if verl fails or its logs cannot be merged into the
    record, :class:`runners.run.run_lock.RunFolderBusy` (before anything is written) if another process
    holds the folder. ``plan``: the launch's capacity plan, shown and kept in the attempt's folder (None: a
    platform without GPUs to plan for)."""
    with run_lock.hold(run_dir) as lock:
        _attempt(run, run_dir, lock.fileno(), plan)


def _attempt(run: VerlRun, run_dir: Path, lock_fd: int, plan: LaunchPlan | None = None) -> None:
    cfg, platform = run.cfg, run.platform
    # an SC arm's verl support was checked by the launch's validation (runners.verl_side.backend.checks), under this lock
    spec = build_spec(run, run_dir)
    paths = spec.paths
    resume_point.align(run_dir, paths.attempt)  # never past a checkpoint whose step was not logged
    paths.attempt_dir.mkdir(parents=True, exist_ok=True)
    if plan is not None:
        show_capacity(plan, paths.attempt_dir)
    paths.launch_script.write_text(spec.script(f"verl launch of {cfg.run_name}, attempt {paths.attempt}"))
    paths.launch_script.chmod(0o755)
    log.info("verl attempt %d of %s; log: %s", paths.attempt, cfg.run_name, paths.log_file)

    env = {**os.environ, **spec.env, "PYTHONUNBUFFERED": "1"}
    write_config(run_dir, OmegaConf.to_yaml(cfg, resolve=True))  # when the attempt starts: a failure before changes nothing
    proc = subprocess.Popen(spec.argv, cwd=spec.cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, bufsize=1,
                            start_new_session=True,  # own process group: an interrupt stops verl and its Ray workers
                            pass_fds=(lock_fd,))  # verl keeps the run folder locked while it lives
    # verl's own group: stopped even if this launcher is killed, and vLLM's socket folder (and a sync's segment
    # the kill interrupted) then removed
    reaper = GroupReaper(proc.pid, leftovers=platform.leftovers(paths.cpu_state),
                         segment_prefixes=platform.leftover_segments())
    follower = OutputFollower(proc.stdout, paths.log_file, int(cfg.trainer.total_steps), cfg.run_name, _STEP)
    follower.start()
    interval = float(cfg.backend.ingest_interval_s)
    next_ingest = time.monotonic() + interval
    interrupt: BaseException | None = None
    try:
        while proc.poll() is None:
            time.sleep(1.0)
            if time.monotonic() >= next_ingest:
                _ingest(run_dir, cfg, final=False)
                next_ingest = time.monotonic() + interval
    except BaseException as err:  # interrupted (Ctrl-C, SLURM signal): stop verl, keep what it logged
        interrupt = err
        stop_group(proc)
    finally:  # verl's group has ended (or was stopped): release the watchdog, tidy, let the log follower finish
        reaper.close()  # and whatever verl's group left behind
        platform.tidy_after_attempt(paths.cpu_state)
        follower.join(timeout=30)
    if interrupt is not None:
        # Ctrl-C closes the attempt as stopped by the user; another signal leaves it open, as a kill would
        _ingest(run_dir, cfg, final=False, status="stopped" if isinstance(interrupt, KeyboardInterrupt) else None)
        raise interrupt
    if proc.returncode == 0:
        _ingest(run_dir, cfg, final=True)
        return
    failure = (f"verl exited with status {proc.returncode} in attempt {paths.attempt} of {cfg.run_name} "
               f"(last step seen: {follower.last_step}); see {paths.log_file}. Running the same command "
               "again resumes from the newest checkpoint.")
    try:
        _ingest(run_dir, cfg, final=True, status="failed")
    except RunError as err:
        raise RunError(f"{failure} Also, {err}") from err
    except Exception as err:
        log.exception("the failed attempt's logs could not be merged into %s", run_dir / "metrics.json")
        raise RunError(failure) from err
    raise RunError(failure)
