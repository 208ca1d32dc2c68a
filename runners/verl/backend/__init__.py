"""The verl backend: each arm as verl V1 ``separate_async`` (FSDP2 trainer + vLLM rollout on Ray).

Two entry points, called by ``runners/launch.py``:

* :func:`validate` -- reject a config that cannot work, before any compute (``ValueError`` naming
  the key and the allowed values; a score-centering arm on a verl without score-centering support
  fails here, naming the verl commit and the install command).
* :func:`run` -- ``backend.dry_run=true``: write the exact command, the override list and a launch
  script into the run directory and validate them against the installed verl, starting nothing;
  otherwise launch ``python -m verl.trainer.main_ppo`` and follow it (progress, log file, metrics
  ingestion).

Modules: ``overrides`` (config -> verl overrides, pure), ``sc_requirements`` (what an SC arm needs of
verl's config), ``sc_seam``/``sc_hook`` (the project's correction in verl's slot), ``dry_run``,
``launch`` (with ``child_process``: following verl into its log, stopping its process group),
``run_files`` (where a verl run keeps its files), ``checks`` (validate), ``ingest`` (verl's logs -> the
run record), ``resume_point``, ``checkpoints`` (retention and export, with ``export_check``). The facts
about each verl revision are :mod:`runners.verl.revisions`; the rehearsal (``backend.platform=cpu``: the
CPU swaps, the assets and the stand-ins) is :mod:`runners.verl.platform.rehearsal`. Importing this package does not import verl.
"""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig

from runners.config import is_rehearsal
from runners.run.run_record import finished

log = logging.getLogger(__name__)


def validate(cfg: DictConfig) -> None:
    """Raise ``ValueError`` if this config cannot run on the verl backend."""
    from runners.verl.backend.checks import validate as _validate

    _validate(cfg)


def run(cfg: DictConfig, run_dir: Path, config_sha256: str | None = None) -> str | None:
    """Dry-run or launch one arm into ``run_dir`` (``results/<sweep>/<run>``).

    ``config_sha256`` (passed by ``runners/launch.py``) is not needed here: ingestion hashes the
    ``config.yaml`` written into ``run_dir`` when the dry run or the attempt starts
    (``runners.run.run_folder.write_config``; a launch that fails before changes nothing).

    Returns, for a dry run whose capacity plan does not fit (a GPU launch; the launch itself would be refused),
    the run's name and its ``capacity.md`` (the refusal is logged); None otherwise. The launcher exits with status 5 then, as
    ``python -m runners.capacity`` does.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    from runners.verl.platform.rehearsal import swaps as rehearsal

    if is_rehearsal(cfg):
        rehearsal.prepare_assets(cfg)
    if cfg.backend.dry_run:
        from omegaconf import OmegaConf

        from runners.run.run_folder import write_config
        from runners.verl.backend.dry_run import dry_run

        write_config(run_dir, OmegaConf.to_yaml(cfg, resolve=True))  # the dry run starts
        report = dry_run(cfg, run_dir)
        misfit = None
        newer = ", ".join(f"{r['key']} ({r['status']})" for r in report["newer_keys"]) or "none"
        log.info("dry run of %s passed against verl %s; keys of newer verl: %s; files in %s",
                 cfg.run_name, report["verl_version"], newer, run_dir / "verl" / "dry_run")
        if transport := report.get("score_centering_transport"):
            log.info("score centering of %s: the sampler's head travels by %s transport: %s", cfg.run_name,
                     "verl's own" if transport["name"] == "verl" else "the project's", transport["summary"])
        cap = report["capacity"]
        if cap["fits"] is None:
            log.warning("no capacity plan for %s: %s", cfg.run_name, cap["error"])
        else:
            log.info("capacity of %s on %s (an estimate): trainer GPU %.1f GB, rollout GPU %.1f GB of %.1f GB: %s; "
                     "%.0f s per step, %.0f GPU-hours per arm; see %s", cfg.run_name, cap["gpu"],
                     cap["trainer_total_bytes"] / 1e9, cap["rollout_total_bytes"] / 1e9, cap["gpu_bytes"] / 1e9,
                     "fits" if cap["fits"] else "DOES NOT FIT", cap["step_seconds"], cap["gpu_hours_per_arm"], cap["file"])
            if cap["refusal"] and not is_rehearsal(cfg):
                log.warning("a launch would be refused: %s", cap["refusal"])
                misfit = f"{cfg.run_name} ({cap['file']})"
        for note in report.get("notes", []):
            log.info("note: %s", note)
        if "rehearsal" in report:
            log.info("rehearsal: %d keys differ from the reference launch, by the swaps %s; see %s",
                     len(report["rehearsal"]["difference"]), ", ".join(s["name"] for s in report["rehearsal"]["swaps"]),
                     run_dir / "verl" / "dry_run" / "rehearsal_difference.txt")
        return misfit
    if finished(run_dir, int(cfg.trainer.total_steps)):  # same config (the launcher checked): no attempt, docs/resuming.md
        log.info("%s finished all %d steps in an earlier attempt; left as it is (raise trainer.total_steps to "
                 "extend it)", cfg.run_name, int(cfg.trainer.total_steps))
        return None
    from runners.verl.backend import slurm_ray
    from runners.verl.backend.launch import launch

    if (task := slurm_ray.job_task(cfg)) is not None:  # task 0 of a multi-node SLURM job: the Ray head (docs/multinode.md)
        from omegaconf import OmegaConf

        from runners.config.config_error import ConfigError
        from runners.verl.backend import ray_cluster

        if ray_cluster.address(cfg):
            raise ConfigError(f"{ray_cluster.KEY}={ray_cluster.address(cfg)} is not allowed in a job of several "
                              "tasks (hydra/launcher=slurm_multinode): the job brings up a Ray cluster over its own "
                              f"nodes; leave {ray_cluster.KEY} null, or launch onto the cluster without the launcher")
        with slurm_ray.head_of_job(cfg, task) as address:
            cfg = OmegaConf.merge(cfg, {"backend": {"ray_address": address}})
            ray_cluster.check(cfg)
            launch(cfg, run_dir)
        return None
    launch(cfg, run_dir)
    return None


__all__ = ["run", "validate"]
