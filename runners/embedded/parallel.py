"""Sweeps side by side: the thread check for jobs started by Hydra's joblib launcher (`hydra/launcher=parallel`).

`conf/hydra/launcher/parallel.yaml` runs a multirun's jobs in `n_jobs` loky worker processes.
Each job sets its own thread count from `backend.threads` (torch.set_num_threads), which is part
of the run's config because it changes the numbers (docs/embedded_default.md); so nothing changes it behind
the config's back. Instead a job started by the joblib launcher refuses, before any compute, a
`backend.threads` with `n_jobs x backend.threads` above the machine's cores, naming the key:

    python runners/launch.py -m method=pg,tis,sc,sc_tis seed=1,2,3 hydra/launcher=parallel backend.threads=1

Outside a Hydra job (the compose API of the tests and of the launch-time validation) there is no
launcher to check, and :func:`check_parallel_threads` does nothing.
"""

from __future__ import annotations

import os

from omegaconf import DictConfig

from runners.config.config_error import ConfigError


def usable_cores() -> int:
    """Cores this process may run on (the affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def joblib_n_jobs(launcher: DictConfig | None = None) -> int | None:
    """`hydra.launcher.n_jobs` of Hydra's joblib launcher, else None: of ``launcher`` (a composed
    `hydra.launcher`, the launcher's check before any job) or, without it, of the job this process runs."""
    from hydra.core.hydra_config import HydraConfig

    if launcher is None:
        if not HydraConfig.initialized():
            return None
        launcher = HydraConfig.get().launcher
    if "joblib" not in str(launcher.get("_target_", "")).lower():
        return None
    n_jobs = int(launcher.n_jobs)
    return usable_cores() if n_jobs == -1 else n_jobs


def check_parallel_threads(cfg: DictConfig, cores: int | None = None, n_jobs: int | None = None) -> None:
    """Raise ConfigError when `n_jobs x backend.threads` exceeds the cores (a joblib-launched job only)."""
    n_jobs = joblib_n_jobs() if n_jobs is None else n_jobs
    if n_jobs is None:
        return
    cores = usable_cores() if cores is None else cores
    threads = int(cfg.backend.threads)
    if n_jobs * threads > cores:
        raise ConfigError(
            f"backend.threads={threads} x hydra.launcher.n_jobs={n_jobs} parallel jobs oversubscribes the "
            f"{cores} cores of this machine; allowed: backend.threads <= {max(cores // n_jobs, 1)} (e.g. add "
            "backend.threads=1) or a smaller hydra.launcher.n_jobs"
        )


def threads_warning(cfg: DictConfig, cores: int | None = None) -> str | None:
    """The warning for ``backend.threads`` above this machine's cores, or None when it fits.

    A warning, not an error: the thread count is part of a run's config (it changes the trajectory),
    so a run started on a larger machine must stay resumable on a smaller one, where it only runs slower.
    """
    cores = usable_cores() if cores is None else cores
    threads = int(cfg.backend.threads)
    if threads <= cores:
        return None
    return (f"backend.threads={threads} is more than the {cores} cores this process may use: the threads share "
            f"them (slower, and step times measure the contention); backend.threads <= {cores} fits this machine. "
            "Kept as set: the thread count is part of the run's config (it changes the trajectory).")
