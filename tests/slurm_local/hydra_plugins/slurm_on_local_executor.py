"""A test helper (not a test): the SLURM launcher of ``conf/hydra/launcher/slurm_8gpu.yaml`` on submitit's local executor.

``SlurmLauncherOnLocalExecutor`` is hydra-submitit-launcher's ``SlurmLauncher`` with one change: its jobs
go to submitit's ``LocalExecutor`` (a real subprocess per job, on this machine) instead of ``sbatch``.
It takes the composed SLURM launcher config whole and passes on what the local executor understands
(the queue parameters shared by every executor, ``max_num_timeout``, ``setup``); the rest
(partition, account, qos, constraint, exclusive, array_parallelism, signal_delay_s) only means something to SLURM
and is dropped, after the config was composed and validated as the cluster run composes it. Select it
with ``hydra.launcher._target_=hydra_plugins.slurm_on_local_executor.SlurmLauncherOnLocalExecutor`` and
``tests/slurm_local`` on ``PYTHONPATH`` (Hydra takes launchers only from the ``hydra_plugins`` namespace
package; the job subprocesses unpickle the launcher, so they import this module too).
"""

from __future__ import annotations

from typing import Any

from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
from omegaconf import OmegaConf

#: What submitit's local executor takes of the SLURM launcher's parameters.
LOCAL_EXECUTOR_KEYS = frozenset(OmegaConf.structured(BaseQueueConf).keys()) | {"max_num_timeout", "setup"}


class SlurmLauncherOnLocalExecutor(SlurmLauncher):
    """hydra-submitit's SLURM launcher, submitting to submitit's local executor."""

    _EXECUTOR = "local"

    def __init__(self, **params: Any) -> None:
        super().__init__(**{k: v for k, v in params.items() if k in LOCAL_EXECUTOR_KEYS})
        self.slurm_only = sorted(set(params) - LOCAL_EXECUTOR_KEYS)
