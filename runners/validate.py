"""Checks of a resolved run config, run before any compute; each error names the key and the allowed values."""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
#: Keys that may change between attempts of one run without making it a different run.
RESUME_INSENSITIVE_KEYS = frozenset({"trainer.resume", "backend.dry_run"})
LOSS_AGG_MODES = ("token-mean",)
#: Keys no config file sets but the code reads with a default, so adding them with ``+`` has an effect.
OPTIONAL_KEYS = frozenset({"model.initializer_range", "model.rms_norm_eps", "model.enable_thinking"})


class ConfigError(ValueError):
    """A config that cannot work."""


def known_methods() -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / "method").glob("*.yaml"))


def _int_at_least(cfg: DictConfig, key: str, minimum: int) -> int:
    value = OmegaConf.select(cfg, key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{key}={value!r}: must be an integer >= {minimum}")
    return value


def _positive(cfg: DictConfig, key: str) -> float:
    value = OmegaConf.select(cfg, key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(f"{key}={value!r}: must be a number > 0")
    return float(value)


def check_method(cfg: DictConfig) -> None:
    """The arm: a known method file, a registered verl loss, a valid cap and head size."""
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

    m = cfg.method
    methods = known_methods()
    if m.name not in methods:
        raise ConfigError(f"method.name={m.name!r} is unknown; allowed: {', '.join(methods)}")
    ours = sorted(k for k in POLICY_LOSS_REGISTRY if k.startswith("ablation_"))
    if m.loss_mode not in POLICY_LOSS_REGISTRY:
        raise ConfigError(f"method.loss_mode={m.loss_mode!r} is not a registered verl policy loss; allowed: "
                          f"{', '.join(ours)}")
    if m.tis_cap is not None and (isinstance(m.tis_cap, bool) or not m.tis_cap > 0):
        raise ConfigError(f"method.tis_cap={m.tis_cap!r}: must be null (no TIS) or a number > 0")
    if "tis" in m.loss_mode and m.tis_cap is None:
        raise ConfigError(f"method.tis_cap is null but method.loss_mode={m.loss_mode} applies TIS; set a cap > 0")
    _int_at_least(cfg, "method.top_k", 1)
    if not isinstance(m.score_centering, bool):
        raise ConfigError(f"method.score_centering={m.score_centering!r}: must be true or false")
    if m.score_centering and (cfg.rollout.top_p != 1.0 or cfg.rollout.top_k != -1):
        raise ConfigError(
            f"score centering needs the sampler's full distribution: rollout.top_p={cfg.rollout.top_p}, "
            f"rollout.top_k={cfg.rollout.top_k}; allowed: rollout.top_p=1.0 and rollout.top_k=-1"
        )


def check_common(cfg: DictConfig) -> None:
    """Keys every backend reads."""
    if not isinstance(cfg.seed, int) or isinstance(cfg.seed, bool):
        raise ConfigError(f"seed={cfg.seed!r}: must be an integer")
    for key in ("trainer.total_steps", "trainer.prompts_per_step", "trainer.test_freq", "trainer.save_freq",
                "rollout.parameter_sync_step", "rollout.max_prompt_length", "rollout.max_response_length",
                "eval.n"):
        _int_at_least(cfg, key, 1)
    _int_at_least(cfg, "trainer.n", 2)  # GRPO: a group of one has zero advantage
    _int_at_least(cfg, "rollout.max_staleness", 1)
    for key in ("trainer.lr", "rollout.temperature", "eval.temperature", "trainer.grad_clip"):
        _positive(cfg, key)
    if cfg.trainer.weight_decay < 0:
        raise ConfigError(f"trainer.weight_decay={cfg.trainer.weight_decay}: must be >= 0")
    if cfg.trainer.resume not in ("auto", "disable"):
        raise ConfigError(f"trainer.resume={cfg.trainer.resume!r}; allowed: auto, disable")
    if cfg.trainer.loss_agg_mode not in LOSS_AGG_MODES:
        raise ConfigError(f"trainer.loss_agg_mode={cfg.trainer.loss_agg_mode!r}; allowed: {', '.join(LOSS_AGG_MODES)}"
                          " (identical for all four arms)")
    if not 0 < cfg.rollout.top_p <= 1:
        raise ConfigError(f"rollout.top_p={cfg.rollout.top_p}: must be in (0, 1]")


def _leaf_keys(node: object, prefix: str = "") -> list[str]:
    """Every key path of a container (``trainer``, ``trainer.lr``, ``data.eval_sets.0.size``, ...)."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else None
    if items is None:
        return [prefix[:-1]]
    return [*([prefix[:-1]] if prefix else []), *(k for key, v in items for k in _leaf_keys(v, f"{prefix}{key}."))]


def check_override_keys(overrides: list[str], compose: Callable[[list[str]], DictConfig]) -> None:
    """Reject a command-line value key that is not a key of the config, naming it and the closest keys.

    ``compose(overrides)`` composes the config. Group selections (``method=sc``, ``+experiment=NAME``:
    a folder under ``conf/``) are options, checked by Hydra. The keys of the config composed with only
    those selections (the base, experiments included) are the known keys. A value key passes when it
    is known (``++`` then overrides it) or is one of ``OPTIONAL_KEYS``; a key added with ``+``/``++``
    that is neither would be silently ignored, so it is an error, as is a plain override of an unknown
    key (Hydra's own message for that suggests adding it with ``+``).
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = list(zip(OverridesParser.create().parse_overrides(overrides), overrides, strict=True))
    is_group = [(CONF_DIR / o.key_or_group).is_dir() for o, _ in parsed]
    known = set(_leaf_keys(OmegaConf.to_container(compose([t for (_, t), g in zip(parsed, is_group, strict=True)
                                                            if g]))))
    for (o, text), group in zip(parsed, is_group, strict=True):
        key = o.key_or_group
        if group or o.is_delete() or key in known or key in OPTIONAL_KEYS:
            continue
        close = difflib.get_close_matches(key, sorted(known | OPTIONAL_KEYS), n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(close)}?" if close else "."
        ignored = ", so it would be ignored" if o.is_add() or o.is_force_add() else ""
        raise ConfigError(f"{text}: {key} is not a key of this config (no config file defines it and no code "
                          f"reads it){ignored}{hint}")


def check_existing_config(run_dir: Path, config_yaml: str) -> str:
    """What a launch may do with ``run_dir`` (``runners.run_folder.plan``): ``new``, ``resume``,
    ``extend`` or ``reuse_empty``; a folder holding completed steps of another config raises."""
    from runners.run_folder import plan

    return plan(run_dir, config_yaml, RESUME_INSENSITIVE_KEYS)


def check_results_root(run_dir: Path) -> None:
    """The run folder and its lock file (``runners.run_lock``, in the folder's parent) can be
    written: for each, the nearest existing ancestor is a writable folder."""
    for target in (Path(run_dir).parent, Path(run_dir)):
        ancestor = target
        while not ancestor.exists():
            ancestor = ancestor.parent
        if not ancestor.is_dir():
            reason = f"{ancestor} is not a folder"
        elif not os.access(ancestor, os.W_OK | os.X_OK):
            reason = f"{ancestor} is not writable"
        else:
            continue
        raise ConfigError(f"results_root: cannot create the run folder {run_dir}: {reason}; "
                          "set results_root=<a writable folder>")


def backend_module(cfg: DictConfig):
    """The backend package named by ``backend.name``."""
    import importlib

    modules = {"local": "runners.local.backend", "verl": "runners.verl_backend"}
    if cfg.backend.name not in modules:
        raise ConfigError(f"backend.name={cfg.backend.name!r}; allowed: {', '.join(modules)}")
    return importlib.import_module(modules[cfg.backend.name])


def run_dir_of(cfg: DictConfig) -> Path:
    return Path(cfg.results_root).resolve() / cfg.sweep / cfg.run_name


def validate(cfg: DictConfig, config_yaml: str) -> str:
    """Every check, in order; raises :class:`ConfigError` (or the backend's ValueError).

    Returns what the launch may do with the run folder (:func:`check_existing_config`).
    """
    check_common(cfg)
    check_results_root(run_dir_of(cfg))
    check_method(cfg)
    backend_module(cfg).validate(cfg)
    return check_existing_config(run_dir_of(cfg), config_yaml)
