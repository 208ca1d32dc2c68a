"""Checks of a resolved run config, run before any compute; each error names the key and the allowed values."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
#: Keys that may change between attempts of one run without making it a different run.
RESUME_INSENSITIVE_KEYS = frozenset({"trainer.resume", "backend.dry_run"})
LOSS_AGG_MODES = ("token-mean",)


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


def _flatten(d: object, prefix: str = "") -> dict[str, object]:
    if isinstance(d, dict):
        out: dict[str, object] = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


def check_existing_config(run_dir: Path, config_yaml: str) -> None:
    """An existing run folder must hold the same config (apart from resume-insensitive keys)."""
    path = Path(run_dir) / "config.yaml"
    if not path.exists():
        return
    old = _flatten(OmegaConf.to_container(OmegaConf.load(path)))
    new = _flatten(OmegaConf.to_container(OmegaConf.create(config_yaml)))
    differ = sorted(k for k in old.keys() | new.keys()
                    if k not in RESUME_INSENSITIVE_KEYS and old.get(k, "<absent>") != new.get(k, "<absent>"))
    if differ:
        shown = "; ".join(f"{k}: {old.get(k, '<absent>')!r} -> {new.get(k, '<absent>')!r}" for k in differ[:8])
        raise ConfigError(
            f"{run_dir} holds a run with a different config ({shown}{'; ...' if len(differ) > 8 else ''}). "
            "Use another sweep name (sweep=NAME) or move that folder away; nothing was changed."
        )


def backend_module(cfg: DictConfig):
    """The backend package named by ``backend.name``."""
    import importlib

    modules = {"local": "runners.local.backend", "verl": "runners.verl_backend"}
    if cfg.backend.name not in modules:
        raise ConfigError(f"backend.name={cfg.backend.name!r}; allowed: {', '.join(modules)}")
    return importlib.import_module(modules[cfg.backend.name])


def run_dir_of(cfg: DictConfig) -> Path:
    return Path(cfg.results_root).resolve() / cfg.sweep / cfg.run_name


def validate(cfg: DictConfig, config_yaml: str) -> None:
    """Every check, in order; raises :class:`ConfigError` (or the backend's ValueError)."""
    check_common(cfg)
    check_method(cfg)
    backend_module(cfg).validate(cfg)
    check_existing_config(run_dir_of(cfg), config_yaml)
