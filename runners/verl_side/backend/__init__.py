"""The verl backend: each arm as verl V1 ``separate_async`` (FSDP2 trainer + vLLM rollout on Ray).

Two entry points, called by ``runners/launch.py``:

* :func:`validate` (:func:`runners.verl_side.backend.checks.validate`) -- reject a config that cannot work, before any
  compute (:class:`~runners.config.config_error.ConfigError` naming the key and the allowed values; a score-centering arm on a verl without
  score-centering support fails here, naming what it lacks and the install command).
* :func:`run` -- ``backend.dry_run=true``: write the exact command, the override list and a launch
  script into the run directory and validate them against the installed verl, starting nothing;
  otherwise launch ``python -m verl.trainer.main_ppo`` and follow it (progress, log file, metrics
  ingestion).

Each entry resolves the run once (``verl_run``: :class:`~runners.verl_side.backend.verl_run.VerlRun`, the arm,
the platform, the head carrier and transport, the placement) and passes it down. Modules: ``overrides``
(the run -> verl overrides, pure), ``sc_requirements`` (what an SC arm needs of
verl's config), ``sc_seam``/``sc_hook`` (the project's correction in verl's slot), ``dry_run``,
``dry_run_log`` (the report in the log), ``launch`` (with ``child_process``: following verl into its log, stopping its process group),
``runners.run.verl_files`` (where a verl run keeps its files), ``checks`` (validate), ``ingest`` (verl's logs -> the
run record), ``resume_point``, ``checkpoints`` (retention and export, with ``export_check``). The facts
about each verl revision are :mod:`runners.verl_side.revisions`; what the platform adds (a GPU: nothing; the
rehearsal, ``backend.platform=cpu``: the CPU swaps, the assets and the stand-ins) is :mod:`runners.verl_side.platform`. Importing this package does not import verl.
"""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig

from runners.run.run_record import finished
from runners.verl_side.backend.checks import validate
from runners.verl_side.backend.launch_plan import LaunchPlan
from runners.verl_side.backend.verl_run import VerlRun

log = logging.getLogger(__name__)


def run(cfg: DictConfig, run_dir: Path) -> str | None:
    """Dry-run or launch one arm into ``run_dir`` (``results/<sweep>/<run>``). The record's ``config_sha256`` is
    the hash of the ``config.yaml`` written into ``run_dir`` when the dry run or the attempt starts (ingestion
    reads it; ``runners.run.run_folder.write_config``; a launch that fails before changes nothing).

    Returns, for a dry run whose capacity plan does not fit (a GPU launch; the launch itself would be refused),
    the run's name and its ``capacity.md`` (the refusal is logged); None otherwise. The launcher exits with status 5 then, as
    ``python -m runners.capacity`` does.
    """
    verl_run = VerlRun.of(cfg)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    verl_run.platform.prepare_assets()
    if cfg.backend.dry_run:
        from omegaconf import OmegaConf

        from runners.run.run_folder import write_config
        from runners.verl_side.backend.dry_run import dry_run
        from runners.verl_side.backend.dry_run_log import log_report

        write_config(run_dir, OmegaConf.to_yaml(cfg, resolve=True))  # the dry run starts
        return log_report(verl_run, dry_run(verl_run, run_dir, LaunchPlan.of(cfg)), run_dir)
    if finished(run_dir, int(cfg.trainer.total_steps)):  # same config (the launcher checked): no attempt, docs/resuming.md
        log.info("%s finished all %d steps in an earlier attempt; left as it is (raise trainer.total_steps to "
                 "extend it)", cfg.run_name, int(cfg.trainer.total_steps))
        return None
    from runners.verl_side.backend.launch import launch
    from runners.verl_side.cluster import slurm_ray

    if (task := slurm_ray.job_task(cfg)) is not None:  # task 0 of a multi-node SLURM job: the Ray head (docs/multinode.md)
        from omegaconf import OmegaConf

        from runners.config.config_error import ConfigError
        from runners.verl_side.cluster import ray_cluster

        if ray_cluster.address(cfg):
            raise ConfigError(f"{ray_cluster.KEY}={ray_cluster.address(cfg)} is not allowed in a job of several "
                              "tasks (hydra/launcher=slurm_multinode): the job brings up a Ray cluster over its own "
                              f"nodes; leave {ray_cluster.KEY} null, or launch onto the cluster without the launcher")
        with slurm_ray.head_of_job(cfg, task) as address:
            joined = VerlRun.of(OmegaConf.merge(cfg, {"backend": {"ray_address": address}}))
            ray_cluster.check(joined.cfg)
            launch(joined, run_dir, _launch_plan(joined))
        return None
    launch(verl_run, run_dir, _launch_plan(verl_run))
    return None


def _launch_plan(verl_run: VerlRun) -> LaunchPlan | None:
    """The capacity plan a launch shows: where its platform must fit GPUs (the rehearsal has none to plan for)."""
    return LaunchPlan.of(verl_run.cfg) if verl_run.platform.fits_gpus else None


__all__ = ["run", "validate"]
