"""The launcher's checks, for the capacity CLI and for every fix the plan proposes.

:func:`compose` builds a config from command-line overrides as the launcher does (unknown keys refused,
schema type errors named); :func:`check` runs on it the launcher's checks that concern the GPUs:

1. the schema (``runners.config.config_checks.check_schema``: every key's type, allowed values and range; a GPU with
   0 or negative memory, a utilisation above 1, a negative CUDA context are refused here);
2. the arm (``check_arm``) and the rules across keys every backend shares (``check_rules``);
3. the verl backend's own checks (``runners.verl_side.backend.checks.validate``), run as for a dry run: the
   launch's shape (tensor parallelism that divides the rollout GPUs, micro-batches that hold one sequence,
   what an SC arm needs: ``calculate_entropy`` on, the in-place cross-entropy guard), ``method.top_k``
   against the vocabulary, the rehearsal's limits.

Not run, because they concern this machine and not the GPUs: the trackers (credentials), the results root
(writable) and the data files (present); the launcher runs them at launch. The capacity refusal itself is
the plan's verdict (:func:`runners.capacity.plan.refusal`), not a config error here.

Every failure is a :class:`~runners.config.config_error.ConfigError` of one line (:func:`one_line`).
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Iterator
from typing import Any

from omegaconf import DictConfig, OmegaConf

from runners.config.config_error import ConfigError

#: True while :func:`check` runs: the verl backend's checks compute the capacity plan themselves (a plan that
#: cannot be computed is a config error), and that plan must not search fixes, whose checks would plan again.
_CHECKING: contextvars.ContextVar[bool] = contextvars.ContextVar("capacity_launch_checks", default=False)


def in_checks() -> bool:
    """Is :func:`check` running (so that a plan made inside it skips the search for fixes)?"""
    return _CHECKING.get()


@contextlib.contextmanager
def _checking() -> Iterator[None]:
    token = _CHECKING.set(True)
    try:
        yield
    finally:
        _CHECKING.reset(token)


def one_line(err: BaseException) -> str:
    """An error's message on one line: Hydra's config search path dropped, its list of a group's options
    (``Could not find 'gpu/b200'`` ... ``Available options in 'gpu':``) written as ``allowed: a, b``."""
    text = str(err).strip().split("\nConfig search path:")[0]
    missing = re.search(r"Could not find '([^']+)/([^']+)'", text)
    options = re.search(r"Available options in '([^']+)':\s*\n((?:\s+\S+\n?)+)", text)
    if missing and options:
        allowed = [o.strip() for o in options.group(2).split() if o.strip() and not o.strip().startswith("base_")]
        return f"{missing.group(1)}={missing.group(2)}: no such option; allowed: {', '.join(allowed)}"
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def compose(overrides: list[str]) -> DictConfig:
    """The resolved config of ``overrides``, composed and key-checked as by the launcher; ConfigError else."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from runners.config import CONF_DIR
    from runners.config.config_checks import check_override_keys, compose_checked

    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            def checked(o: list[str]) -> DictConfig:
                return compose_checked(lambda x: hydra_compose(config_name="config", overrides=x), o)

            check_override_keys(overrides, checked)
            cfg = checked(overrides)
        OmegaConf.resolve(cfg)
    except ConfigError:
        raise
    except (HydraException, OmegaConfBaseException) as err:  # a config Hydra or OmegaConf refuses
        raise ConfigError(one_line(err)) from err
    return cfg


def check(cfg: DictConfig) -> None:
    """The launcher's checks that concern the GPUs (the module docstring); ConfigError naming the key."""
    from omegaconf.errors import OmegaConfBaseException

    from runners.config.config_checks import backend_module, check_arm, check_rules, check_schema
    from runners.config.run_names import check_names

    if OmegaConf.select(cfg, "backend.name") != "verl":
        raise ConfigError(f"backend={OmegaConf.select(cfg, 'backend.name')}: the capacity plan is of a verl launch "
                          "(+experiment=qwen3_4b_sc_repro, ...); the embedded backend runs on a CPU")
    try:
        check_names(cfg.results_root, cfg.sweep, cfg.run_name)  # names as paths, as every entry point
        check_schema(cfg)
        check_arm(cfg)
        check_rules(cfg)
        with _checking():  # the backend's checks reached as the launcher reaches them (runners.validate.validate)
            backend_module(cfg).validate(as_dry_run(cfg))
    except ConfigError:
        raise
    except OmegaConfBaseException as err:  # a key the checks read that the config lacks
        raise ConfigError(one_line(err)) from err


def as_dry_run(cfg: DictConfig) -> DictConfig:
    """A copy of ``cfg`` with ``backend.dry_run=true``: the verl backend's checks without the capacity refusal
    (the plan's own verdict) and without the data files (they concern this machine)."""
    return with_changes(cfg, {"backend.dry_run": True})


def with_changes(cfg: DictConfig, changes: dict[str, Any]) -> DictConfig:
    """A copy of ``cfg`` with each ``key: value`` of ``changes`` set (the original is not touched)."""
    out = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    for key, value in changes.items():
        OmegaConf.update(out, key, value, merge=False)
    return out


def refused(cfg: DictConfig) -> str | None:
    """Why the launcher's checks refuse ``cfg`` (one line), or None where they pass."""
    try:
        check(cfg)
    except ConfigError as err:
        return str(err)
    return None
