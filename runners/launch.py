"""The Hydra entry point: ``python runners/launch.py [-m] method=pg,tis,sc,sc_tis seed=42 [+experiment=NAME]``.

Before any compute, every job of the sweep is composed and validated (``runners.validate``), so
a config that cannot work fails at once with a message naming the key, and nothing already in
``results/`` is touched: an unknown group option, an unknown key added with ``+``, an unwritable
``results_root`` or a run folder holding another run print ``config error: ...`` (no traceback)
and exit with status 2.

A run that starts and then stops (verl fails; its logs cannot be merged into ``metrics.json``:
:class:`runners.run.run_error.RunError`; any error of the embedded backend, whose traceback goes to the run's
``run.log``; a full disk) prints ``run failed: ...`` on one line naming the file and what to run next (no
traceback) and exits with status 4; Ctrl-C prints ``stopped by the user (Ctrl-C) ...`` and exits with 130
(:func:`run_backend`). A launch into a sweep folder whose runs were trained with other settings is warned
about (:func:`warn_unlike_siblings`): the report would not pool it with them.

A run folder locked by another launch (``runners.run.run_lock``) is reported first, right after
composition: ``run folder busy: ...`` naming the holder, exit status 3. After validation the run
folders are locked before anything is written, Hydra's own files included: when every job runs
in this process (a single run, or ``-m`` with Hydra's basic launcher) the launcher takes the
locks of all jobs of the sweep up front and holds them to the end; with another launcher (SLURM,
``hydra/launcher=parallel``) each job takes its own lock when it starts, after Hydra has written
its ``.hydra/`` files.

A task of a multi-node SLURM job other than the first (``hydra/launcher=slurm_multinode``) is a Ray worker node
and returns without touching the run folder (:mod:`runners.verl_side.cluster.slurm_ray`).

Per job, under its lock: tidy the run folder (``runners.run.run_folder.prepare``: stale temporary
files, an earlier start that completed no step) and hand the run to the backend, which writes ``config.yaml``
into it (``results/<sweep>/<method>-seed<seed>/``) when its attempt starts: a launch that fails before its
attempt starts (an extension included) leaves the folder's config as it was.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import sys
from pathlib import Path
from typing import NoReturn

import hydra
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from runners.config import CONF_DIR
from runners.config.config_checks import backend_module, check_override_keys, compose_checked
from runners.config.config_error import ConfigError
from runners.run import peer_keys, run_folder, run_lock
from runners.run.run_error import RunError
from runners.run.run_record import damaged_record_refusal
from runners.validate import run_dir_of, validate

BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"
#: Exit statuses of the launcher (README.md, "When something goes wrong"; 0: every run finished or resumed to its end).
CONFIG_ERROR = 2  # ``config error: <key> ...``: refused before anything is written or computed
FOLDER_BUSY = 3  # ``run folder busy: ...`` / ``run folder lock: ...``
DOES_NOT_FIT = 5  # a dry run whose capacity plan does not fit (as ``python -m runners.capacity``): after every job
RUN_FAILED = 4  # ``run failed: ...``: a run that started and stopped (:class:`runners.run.run_error.RunError`, any error)
INTERRUPTED = 130  # ``stopped by the user (Ctrl-C) ...``: 128 + SIGINT, as a shell reports it
TERMINATED = 143  # ``stopped by SIGTERM ...`` (a scheduler's preemption or time limit, ``timeout``, ``kill``): 128 + 15

log = logging.getLogger("runners.launch")
#: The dry runs of this process whose capacity plan does not fit, one line each (:func:`run_backend`).
MISFITS: list[str] = []


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is (:func:`on_sigterm`): a ``KeyboardInterrupt``, so that every backend
    stops as on Ctrl-C (the record ``stopped``, verl's process group stopped, its logs merged)."""


def on_sigterm(signum: int, frame: object) -> None:
    raise Terminated()


def say(line: str) -> None:
    """Print one line on stderr. A closed stderr (``2>&1 | tee log`` after Ctrl-C killed ``tee``) is no error: the
    line is dropped and both console streams go to ``/dev/null``, so the exit status stays the documented one
    (not Python's 1 from a ``BrokenPipeError``, nor 120 from flushing at exit)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (BrokenPipeError, ValueError, OSError):
        quiet_console()


def quiet_console() -> None:
    """Point stdout and stderr at ``/dev/null`` (their pipe is closed)."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):
            pass


def job_overrides(argv: list[str]) -> list[list[str]]:
    """The override list of every job the command line describes (the cartesian product of sweeps)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides = [a for a in argv if not a.startswith("-") and "=" in a and not a.lstrip("+~").startswith("hydra")]
    multirun = any(a in ("-m", "--multirun") for a in argv)
    parsed = OverridesParser.create().parse_overrides(overrides)
    axes = []
    for o in parsed:
        key = o.get_key_element()
        if multirun and o.is_sweep_override():
            axes.append([f"{key}={v}" for v in o.sweep_string_iterator()])
        elif o.is_sweep_override():
            raise ConfigError(f"{o.input_line}: several values are a sweep, which needs -m (python runners/launch.py "
                              f"-m {o.input_line} ...); without -m a launch runs one config")
        else:
            axes.append([f"{key}={o.get_value_element_as_str()}"])
    return [list(combo) for combo in itertools.product(*axes)]


def prevalidate(argv: list[str]) -> list[Path]:
    """Compose every job, then validate them all before the first one starts; return their run folders.

    Composition (cheap) comes first, so a folder busy with another launch is reported at once
    (:class:`runners.run.run_lock.RunFolderBusy`), before the slower checks; nothing is written.
    """
    from hydra import compose, initialize_config_dir

    jobs: dict[Path, tuple[int, DictConfig]] = {}
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        for job, overrides in enumerate(job_overrides(argv)):
            def checked(o: list[str]) -> DictConfig:
                return compose_checked(lambda x: compose(config_name="config", overrides=x), o)

            check_override_keys(overrides, checked)
            cfg = checked(overrides)
            run_dir = run_dir_of(cfg)
            if run_dir in jobs:
                raise ConfigError(f"jobs {jobs[run_dir][0]} and {job} of this sweep would both run in {run_dir} "
                                  f"(run_name={cfg.run_name}); give them different run_name or sweep values")
            jobs[run_dir] = (job, cfg)
    for run_dir in jobs:
        run_lock.check_free(run_dir)
    check_parallel_jobs(argv, [cfg for _, cfg in jobs.values()])
    check_protocol({run_dir: cfg for run_dir, (_, cfg) in jobs.items()})
    for _, cfg in jobs.values():
        validate(cfg, OmegaConf.to_yaml(cfg, resolve=True))
    warn_unlike_siblings({run_dir: cfg for run_dir, (_, cfg) in jobs.items()}, job_overrides(argv))
    return list(jobs)


def check_protocol(jobs: dict[Path, DictConfig]) -> None:
    """Refuse (ConfigError) a run whose evaluation protocol (``runners.run.peer_keys.PROTOCOL_KEYS``: ``eval.n``,
    ``data.eval_sets``) differs from the runs already in its sweep folder: the report compares only runs of one
    protocol, so it would refuse the whole sweep rather than show the run apart."""
    for run_dir, cfg in jobs.items():
        n, diffs = peer_keys.sibling_differences(run_dir, OmegaConf.to_container(cfg, resolve=True))
        protocol = {k: v for k, v in diffs.items() if peer_keys.under(k, peer_keys.PROTOCOL_KEYS)}
        if protocol:
            what = ", ".join(f"{k}={peer_keys.text(a)} (theirs: {peer_keys.text(b)})" for k, (a, b) in protocol.items())
            raise ConfigError(f"{what}: {run_dir.name} would differ from the {n} run(s) already in {run_dir.parent} "
                              "in the evaluation protocol, and python -m analysis compares only runs of one protocol "
                              "(it would refuse the whole sweep); use another sweep name (sweep=NAME)")


def warn_unlike_siblings(jobs: dict[Path, DictConfig], overrides: list[list[str]]) -> list[str]:
    """Warn (stderr, one line per job) when a new run differs from the runs already in its sweep folder in a
    key that can change a result (``runners.run.peer_keys``): the report then shows it apart instead of pooling
    it with them. Keys this launch varies across its own jobs (a multirun's sweep) are varied on purpose and
    left out. Returns the lines printed."""
    values = [dict(o.lstrip("+~").split("=", 1) for o in job if "=" in o) for job in overrides]
    varied = {key for job in values for key in job if len({v.get(key) for v in values}) > 1} - {"method"}
    lines = []
    for run_dir, cfg in jobs.items():
        config = OmegaConf.to_container(cfg, resolve=True)
        n, diffs = peer_keys.sibling_differences(run_dir, config, varied)
        if diffs:
            what = ", ".join(f"{k}={peer_keys.text(a)} (theirs: {peer_keys.text(b)})"
                             for k, (a, b) in sorted(diffs.items(), key=lambda kv: peer_keys.key_order(kv[0])))
            lines.append(f"warning: {run_dir.name} differs from the {n} run(s) already in {run_dir.parent} in {what}; "
                         "python -m analysis will show it apart, not pooled with them as a seed of its arm")
    for line in lines:
        say(line)
    return lines


def hydra_launcher(argv: list[str]) -> DictConfig | None:
    """The composed ``hydra.launcher`` of a multirun (``-m``), None for a single run."""
    from hydra import compose, initialize_config_dir

    if not any(a in ("-m", "--multirun") for a in argv):
        return None
    hydra_overrides = [a for a in argv if "=" in a and a.lstrip("+~").startswith("hydra")]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose(config_name="config", overrides=[*job_overrides(argv)[0], *hydra_overrides],
                      return_hydra_config=True)
    return cfg.hydra.launcher


def jobs_run_in_this_process(argv: list[str]) -> bool:
    """True for a single run and for ``-m`` with Hydra's basic launcher (jobs one after another, here)."""
    launcher = hydra_launcher(argv)
    return launcher is None or OmegaConf.select(launcher, "_target_") == BASIC_LAUNCHER


def check_parallel_jobs(argv: list[str], configs: list[DictConfig]) -> None:
    """``hydra/launcher=parallel``: ``n_jobs x backend.threads`` within the cores, for every job of the embedded
    backend, checked here before any job starts (each job checks again; a refusal inside a job is Hydra's
    "Error executing job" and a traceback)."""
    from runners.embedded.parallel import check_parallel_threads, joblib_n_jobs

    launcher = hydra_launcher(argv)
    n_jobs = None if launcher is None else joblib_n_jobs(launcher)
    if n_jobs is None:
        return
    for cfg in configs:
        if cfg.backend.name == "embedded":
            check_parallel_threads(cfg, n_jobs=n_jobs)


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    from runners.verl_side.cluster import slurm_ray

    if (task := slurm_ray.job_task(cfg)) is not None and task.rank > 0:  # a Ray worker node of a multi-node job
        slurm_ray.serve_as_worker(cfg, task)  # never touches the run folder
        return
    config_yaml = OmegaConf.to_yaml(cfg, resolve=True)
    run_dir = run_dir_of(cfg)
    with run_lock.hold(run_dir):  # already held since before Hydra wrote anything, for in-process jobs
        kind = validate(cfg, config_yaml)  # again, under the lock: the folder may have changed since
        run_dir.mkdir(parents=True, exist_ok=True)
        run_folder.prepare(run_dir, kind, config_yaml)  # config.yaml: written by the backend when its attempt starts
        log.info("run %s (%s backend) in %s", cfg.run_name, cfg.backend.name, run_dir)
        run_backend(cfg, run_dir)


def run_backend(cfg: DictConfig, run_dir: Path) -> None:
    """The backend's run; every way it can stop early is one line on stderr and an exit status, past Hydra's
    traceback printer (the run folder's lock is released on the way out; a sweep stops there):

    - a :class:`~runners.run.run_error.RunError` (verl failed, its logs cannot be merged): ``run failed: <its
      message>``, :data:`RUN_FAILED`;
    - a full disk (``ENOSPC``): ``run failed: no space left ...`` naming the folder, :data:`RUN_FAILED` (the
      record is written atomically, so ``metrics.json`` stays the valid record of the steps before);
    - any other error: ``run failed: <type>: <message>`` naming the log that holds the traceback, :data:`RUN_FAILED`;
    - Ctrl-C: ``stopped by the user (Ctrl-C) ...``, :data:`INTERRUPTED` (both backends record the attempt
      and the run as ``stopped``); SIGTERM the same (:class:`Terminated`), ``stopped by SIGTERM ...``,
      :data:`TERMINATED`;
    - a dry run whose capacity plan does not fit: the run ends normally and the plan's refusal is kept for
      :func:`cli`, which exits with :data:`DOES_NOT_FIT` after every job;
    - a :class:`~runners.config.config_error.ConfigError` only the backend can find (the verl dry run against the
      installed verl): ``config error: ...``, :data:`CONFIG_ERROR`.
    """
    try:
        misfit = backend_module(cfg).run(cfg, run_dir)
        if isinstance(misfit, str):  # a dry run's plan that does not fit: the sweep's other dry runs go on
            MISFITS.append(misfit)
    except ConfigError as err:
        say(f"config error: {_short(err)}")
        raise SystemExit(CONFIG_ERROR) from None
    except RunError as err:
        say(f"run failed: {err}")
        raise SystemExit(RUN_FAILED) from None
    except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM (Terminated)
        _stopped(stop, run_dir)
    except Exception as err:  # noqa: BLE001 - every failure ends in one line; its traceback goes to the run's log
        if (stop := _stop_behind(err)) is not None:  # raised while stopping: the stop is what happened
            if not isinstance(err, BrokenPipeError):
                _log_traceback(run_dir)
            _stopped(stop, run_dir)
        where = _log_traceback(run_dir)
        if isinstance(err, OSError) and err.errno == errno.ENOSPC:
            folder = Path(err.filename).parent if err.filename else run_dir
            say(f"run failed: no space left on the device holding {folder}; {run_dir / run_folder.METRICS_FILE} "
                "keeps the steps completed before; free space and run the same command again to resume")
        else:
            message = str(err).strip().splitlines()[0] if str(err).strip() else ""
            damaged = damaged_record_refusal(run_dir)  # the promise to resume only where the next launch keeps it
            then = (f"and {damaged[0].lower()}{damaged[1:]}" if damaged else
                    "running the same command again resumes from the newest checkpoint")
            say(f"run failed: {type(err).__name__}{': ' + message if message else ''} in {run_dir}; the traceback "
                f"is in {where}; {then}")
        raise SystemExit(RUN_FAILED) from None


def _stop_behind(err: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C or SIGTERM that ``err`` was raised while handling (its ``__context__`` chain), else None: the
    progress bar's last redraw into a pipe that the same Ctrl-C closed (``2>&1 | tee log``) raises a
    ``BrokenPipeError`` on the way out of a stopped run."""
    seen: set[int] = set()
    cause = err.__context__
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__context__
    return None


def _stopped(stop: KeyboardInterrupt, run_dir: Path) -> NoReturn:
    """The stop's one line and status: SIGTERM (:class:`Terminated`) or Ctrl-C."""
    if isinstance(stop, Terminated):
        say(f"stopped by SIGTERM (a scheduler's preemption or time limit, timeout, kill): {run_dir}; run the same "
            "command again to resume it")
        raise SystemExit(TERMINATED) from None
    say(f"stopped by the user (Ctrl-C): {run_dir}; run the same command again to resume it")
    raise SystemExit(INTERRUPTED) from None


def _log_traceback(run_dir: Path) -> Path:
    """Write the current exception's traceback to the run's log file (Hydra's file handler, ``run.log``), not to
    the console; returns the file."""
    import traceback

    files = [h for h in logging.getLogger().handlers
             if isinstance(h, logging.FileHandler) and Path(h.baseFilename).parent == Path(run_dir).resolve()]
    record = log.makeRecord(log.name, logging.ERROR, __file__, 0, "run failed", None, sys.exc_info())
    for handler in files:
        handler.handle(record)
    if files:
        return Path(files[0].baseFilename)
    path = run_dir / "run.log"
    try:
        with path.open("a") as f:
            f.write(traceback.format_exc())
    except OSError:
        return Path("<no writable log>")
    return path


def _short(err: BaseException) -> str:
    """The message of a config error on one line: without Hydra's config search path, its list of a group's
    options joined (``... Available options in 'method': pg, sc, sc_tis, tis``)."""
    text = str(err).strip().split("\nConfig search path:")[0]
    head, sep, options = text.partition("\n\nAvailable options in ")
    if sep:
        group, _, names = options.partition(":")
        text = f"{head}. Available options in {group}: " + ", ".join(n.strip() for n in names.split() if n.strip())
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def usage() -> str:
    """``--help``: how to launch, where results go, the exit statuses, and each config group's options (its yaml
    files; Hydra's own help also lists the schema bases, which are no options)."""
    from runners.config.config_checks import group_options

    groups = sorted(p.name for p in CONF_DIR.iterdir() if p.is_dir() and p.name != "hydra")
    lines = [
        "python runners/launch.py [-m] [group=option ...] [key=value ...]",
        "",
        "  python runners/launch.py -m method=pg,tis,sc,sc_tis seed=42     the embedded default, four arms",
        "  python runners/launch.py -m +experiment=rehearsal method=pg      the reference launch on a CPU",
        "  python runners/launch.py -m +experiment=qwen3_4b_sc_repro method=pg,tis backend.dry_run=true",
        "                                                                   the GPU launch's dry run and capacity plan",
        "",
        "-m runs every combination of comma-separated values (a sweep); without it a launch runs one config.",
        "Each run is written to <results_root>/<sweep>/<run_name>/ (default results/embedded_default/"
        "<method>-seed<seed>/); run the same command again to resume it, raise trainer.total_steps to extend it.",
        "Then: python -m analysis <results_root>/<sweep>   (README.md, docs/resuming.md)",
        "",
        f"exit status: 0 done; {CONFIG_ERROR} config error (nothing written); {FOLDER_BUSY} run folder busy; "
        f"{RUN_FAILED} run failed; {DOES_NOT_FIT} a dry run's plan does not fit; {INTERRUPTED} Ctrl-C; {TERMINATED} SIGTERM; 1 a defect of the project",
        "",
        "config groups (group=option; +experiment=NAME adds an experiment):",
        *[f"  {g}: {', '.join(group_options(g))}" for g in groups],
        f"  hydra/launcher (with -m): {', '.join(group_options('hydra/launcher'))}",
        "",
        "The composed config: --cfg job; Hydra's own help: --hydra-help.",
    ]
    return "\n".join(lines)


def cli(argv: list[str] | None = None) -> int:
    """Validate every job, lock their run folders, then run Hydra's ``main``; returns the exit status.
    ``argv``: the command line's arguments (None: ``sys.argv[1:]``, as the ``sca-launch`` console script calls it;
    Hydra's ``main`` reads ``sys.argv`` itself).

    2: a config error (printed as ``config error: ...``); 3: a run folder locked by another process
    (``run folder busy: ...``) or one that cannot be locked (``run folder lock: ...``); 4 (:data:`RUN_FAILED`,
    from :func:`run_backend`): a run that started and failed (``run failed: ...``); 130 (:data:`INTERRUPTED`):
    Ctrl-C (``stopped by the user ...``); 143 (:data:`TERMINATED`): SIGTERM (``stopped by SIGTERM ...``), handled
    as Ctrl-C while this call runs (:func:`on_sigterm`; a SLURM job's own process keeps submitit's signal
    handling); 5 (:data:`DOES_NOT_FIT`): a dry run whose capacity plan does not fit, after every job
    (``does not fit: ...``). A closed stderr never changes the status (:func:`say`).
    ``--help`` prints :func:`usage`; ``--cfg``-style queries go straight to Hydra.
    """
    import signal

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        return _cli(sys.argv[1:] if argv is None else argv)
    finally:
        signal.signal(signal.SIGTERM, previous)  # a caller in this process (a test) gets its own handler back


def _cli(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(usage())
        return 0
    if any(a in ("--cfg", "-c", "--info", "-i", "--hydra-help") or a.startswith("--cfg") for a in argv):
        main()
        return 0
    try:
        return _checked_main(argv)
    except Terminated:
        say("stopped by SIGTERM before any run started")
        return TERMINATED
    except KeyboardInterrupt:  # before a run started (validation, locking): nothing was written
        say("stopped by the user (Ctrl-C) before any run started")
        return INTERRUPTED


def _sweep_stopped(stop: KeyboardInterrupt) -> int:
    """A stop that reached the launch outside any run (a run records and reports its own: :func:`_stopped`):
    with ``hydra/launcher=parallel``, the wait on the job processes, whose runs record the stop themselves."""
    terminated = isinstance(stop, Terminated)
    say(f"stopped {'by SIGTERM' if terminated else 'by the user (Ctrl-C)'} during the sweep: its finished runs are "
        "kept; run the same command again to resume the others")
    return TERMINATED if terminated else INTERRUPTED


def _checked_main(argv: list[str]) -> int:
    MISFITS.clear()
    try:
        run_dirs = prevalidate(argv)
        in_process = jobs_run_in_this_process(argv)
    except run_lock.RunFolderBusy as err:
        say(f"run folder busy: {err}")
        return FOLDER_BUSY
    except (ConfigError, HydraException, OmegaConfBaseException) as err:  # a refused config; a ValueError is a defect
        say(f"config error: {_short(err)}")
        return CONFIG_ERROR
    with contextlib.ExitStack() as locks:
        if in_process:  # held from before Hydra writes anything until the last job ends
            try:
                for run_dir in run_dirs:
                    locks.enter_context(run_lock.hold(run_dir))
            except run_lock.RunFolderBusy as err:  # taken since prevalidate looked
                say(f"run folder busy: {err}")
                return FOLDER_BUSY
            except run_lock.RunLockError as err:
                say(f"run folder lock: {err}")
                return FOLDER_BUSY
        # otherwise each job locks its folder in its own process (main)
        try:
            main()
        except KeyboardInterrupt as stop:  # outside any run: the parallel launcher's wait, Hydra between jobs
            return _sweep_stopped(stop)
    if MISFITS:
        say(f"does not fit: the capacity plan of {', '.join(MISFITS)} (each refusal logged above); a launch would be "
            "refused before Ray starts")
        return DOES_NOT_FIT
    return 0


if __name__ == "__main__":
    sys.exit(cli())
