"""Every check of a launch, in order, before any compute (:func:`validate`); each error names the key and the
allowed values:

1. the config by itself (:mod:`runners.config.config_checks`): the schema, the arm, cross-field rules;
2. the trackers of ``backend.logger`` (:func:`runners.embedded.trackers.check_loggers`: both backends log through
   verl's ``Tracking``);
3. the run folder (writable, not holding another run) and the backend's checks that need its own
   computation (the embedded task's prompt lengths; verl's composed config).

It reads every room (the config, the run folder, the embedded backend's trackers, the backend a config names),
so it sits beside the launcher, at the top of docs/architecture.md's package order.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from omegaconf import DictConfig

from runners.config.config_checks import (
    backend_module,
    check_arm,
    check_rules,
    check_schema,
)
from runners.config.config_error import ConfigError
from runners.config.run_names import run_dir
from runners.embedded.trackers import check_loggers
from runners.run.run_folder import plan


def check_results_root(run_dir: Path) -> None:
    """The run folder and its lock file (``runners.run.run_lock``, in the folder's parent) can be created:
    for each, the nearest existing ancestor is a folder in which a folder can be made.

    Permission bits alone do not tell (root passes ``os.access`` on ``/proc`` or a read-only mount), so
    the check makes an empty probe folder there and removes it at once; nothing stays behind.
    """
    for target in (Path(run_dir).parent, Path(run_dir)):
        ancestor = target
        while not ancestor.exists():
            ancestor = ancestor.parent
        if not ancestor.is_dir():
            reason = f"{ancestor} is not a folder"
        elif not os.access(ancestor, os.W_OK | os.X_OK):
            reason = f"{ancestor} is not writable"
        else:
            reason = _cannot_make_folder_in(ancestor)
            if reason is None:
                continue
        raise ConfigError(f"results_root: cannot create the run folder {run_dir}: {reason}; "
                          "set results_root=<a writable folder>")


def _cannot_make_folder_in(folder: Path) -> str | None:
    """Why no folder can be made in ``folder`` (an empty probe folder, removed at once), or None."""
    try:
        probe = tempfile.mkdtemp(prefix=".results-root-probe-", dir=folder)
    except OSError as err:
        return f"no folder can be made in {folder} ({err.strerror})"
    os.rmdir(probe)
    return None


def run_dir_of(cfg: DictConfig) -> Path:
    """The run's folder, its names checked as paths first (:func:`runners.config.run_names.run_dir`)."""
    return run_dir(cfg)


def validate(cfg: DictConfig, config_yaml: str) -> str:
    """Every check, in order; raises :class:`ConfigError` naming the key.

    Returns what the launch may do with the run folder (:func:`runners.run.run_folder.plan`): ``new``,
    ``resume``, ``extend`` or ``reuse_empty``; a folder holding completed steps of another config raises.
    """
    check_schema(cfg)
    check_arm(cfg)
    check_rules(cfg)
    check_loggers(list(cfg.backend.logger))  # one of verl's trackers, installed, able to start here
    check_results_root(run_dir_of(cfg))
    backend_module(cfg).validate(cfg)
    return plan(run_dir_of(cfg), config_yaml)
