"""The checks of a config by itself, before any compute; each error names the key and the allowed values.

1. the schema (``runners.config.schema``): types (already enforced by composition, see :func:`compose_checked`),
   allowed values and ranges of every key, declared once as field metadata;
2. the arm (:func:`check_arm`): a declared arm (``ablations/arms/``) whose method node keeps its declaration's
   shape, with thresholds verl's own parsers accept;
3. cross-field rules (:func:`check_rules`): score centering needs the full distribution, a non-default
   ``scenario`` only for the embedded backend, the embedded sampler's limits, micro-batches that divide the batch;
4. the command line's keys (:func:`check_override_keys`) and the backend a config names (:func:`backend_module`).

The checks of a whole launch (these, the trackers, the run folder, the backend's own) are ``runners/validate.py``.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable

from omegaconf import DictConfig, OmegaConf

from ablations.arms import ArmSpec
from runners.config import CONF_DIR, schema
from runners.config.config_error import ConfigError
from runners.config.config_history import RENAMED_OPTIONS

#: Keys no config file sets but the code reads with a default, so adding them with ``+`` has an effect.
OPTIONAL_KEYS = frozenset({"model.initializer_range", "model.rms_norm_eps", "model.enable_thinking"})
#: Backends whose sampler the scenarios (``conf/scenario/*.yaml``: ``backend.sampler.*``) configure.
SCENARIO_BACKENDS = ("embedded",)


def group_options(group: str) -> list[str]:
    """The options of a config group: its ``conf/<group>/*.yaml`` files (not the schema bases Hydra also lists,
    nor an old name kept for old commands: ``config_history.RENAMED_OPTIONS``); for ``method``, the declared arms
    (:func:`known_methods`)."""
    if group == "method":
        return known_methods()
    old_names = RENAMED_OPTIONS.get(group, {})
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml") if p.stem not in old_names)


def known_methods() -> list[str]:
    """The declared arms' names (``ablations/arms/``), in declaration order."""
    from ablations.arms import all_arms

    return list(all_arms())


def compose_checked(compose: Callable[[list[str]], DictConfig], overrides: list[str]) -> DictConfig:
    """``compose(overrides)``, with a schema type error (``trainer.n=abc``) or a rejected rule raised as ConfigError.

    A scenario merged into a backend without a sampler fails to compose (the backend's schema has no
    ``backend.sampler``); that is reported as the scenario rule of :func:`check_scenario`.
    """
    from hydra.errors import ConfigCompositionException
    from omegaconf.errors import ValidationError

    def key(override: str) -> str:
        return override.split("=", 1)[0].lstrip("+~")

    try:
        return compose(overrides)
    except ConfigCompositionException as err:
        scenario = next((o.split("=", 1)[1] for o in overrides if key(o) == "scenario"), "default")
        if scenario != "default":  # the backend the other group selections give
            groups = [o for o in overrides if key(o) != "scenario" and (CONF_DIR / key(o)).is_dir()]
            check_scenario(scenario, OmegaConf.select(compose(groups), "backend.name"))
        if isinstance(err.__cause__, ValidationError):
            raise ConfigError(schema.type_message(err.__cause__)) from err
        raise


def check_scenario(scenario: str, backend: str) -> None:
    """A non-default scenario sets the embedded sampler's knobs: only the embedded backend has them."""
    if scenario != "default" and backend not in SCENARIO_BACKENDS:
        raise ConfigError(f"scenario={scenario} sets backend.sampler.* (the embedded sampler's mismatch), which "
                          f"backend={backend} does not have; allowed with backend={backend}: scenario=default")


def check_schema(cfg: DictConfig) -> None:
    """Types, allowed values and ranges of every key (``runners.config.schema``)."""
    try:
        schema.check(cfg)
    except schema.SchemaError as err:
        raise ConfigError(str(err)) from err


def check_arm(cfg: DictConfig) -> None:
    """The arm: a declared arm (``ablations/arms/``) whose ``method`` node reads what its declaration reads
    (an override may move a cap or a threshold, not add or drop a correction), with thresholds verl's own
    parsers accept and, for an SC arm, a token-level IS rule the centering term can compose with."""
    from ablations.arms import ArmSpec, all_arms

    m = cfg.method
    arms = all_arms()
    if m.name not in arms:
        raise ConfigError(f"method.name={m.name!r} is unknown; allowed: {', '.join(arms)} "
                          "(an arm is declared in a module of ablations/arms/: docs/arms.md)")
    spec, declared = ArmSpec.of(m), ArmSpec.of(arms[m.name].method_node())
    if spec.loss_mode != declared.loss_mode:
        raise ConfigError(f"method.loss_mode={spec.loss_mode!r} is not arm {m.name}'s loss; allowed: "
                          f"method.loss_mode={declared.loss_mode}")
    if spec.tis != declared.tis:
        applies = "applies TIS; allowed: a number > 0" if declared.tis else "applies no TIS; allowed: null"
        state = " is null" if m.tis_cap is None else f"={m.tis_cap}"
        raise ConfigError(f"method.tis_cap{state} but method.loss_mode={m.loss_mode} {applies}")
    if spec.sc != declared.sc:
        raise ConfigError(f"method.score_centering={m.score_centering} does not fit arm {m.name}, which "
                          f"{'takes' if declared.sc else 'does not take'} the centering term; allowed: "
                          f"method.score_centering={str(declared.sc).lower()}")
    ours, theirs = spec.verl_rollout_correction(), declared.verl_rollout_correction()
    for key in ("rollout_is", "rollout_rs"):
        if (ours[key] is None) != (theirs[key] is None):
            raise ConfigError(f"method.rollout_correction.{key}={ours[key]!r}: arm {m.name} "
                              f"{'has' if theirs[key] is not None else 'has no'} {key}; allowed: "
                              f"{'token or sequence' if key == 'rollout_is' and theirs[key] else theirs[key] or 'null'}")
    if spec.rollout_correction is not None:
        _check_verl_correction(ours)
    if spec.sc:
        try:
            spec.centering_weight()
        except ValueError as err:
            raise ConfigError(str(err)) from err


def _check_verl_correction(block: dict) -> None:
    """The rollout-correction block through verl's own parsers (``rollout_corr_helper``), each error one line."""
    from verl.trainer.ppo import rollout_corr_helper as rch

    prefix = "method.rollout_correction"
    if block["rollout_is"] is not None:
        try:
            rch._parse_rollout_is_threshold(block["rollout_is_threshold"])
        except (TypeError, ValueError) as err:
            raise ConfigError(f"{prefix}.rollout_is_threshold={block['rollout_is_threshold']!r}: {err} (a number "
                              "> 0 truncates, 'lower_upper' is IcePop's band)") from err
    if block["rollout_rs"] is not None:
        options = [o.strip() for o in str(block["rollout_rs"]).split(",") if o.strip()]
        unknown = [o for o in options if o not in rch.SUPPORTED_ROLLOUT_RS_OPTIONS]
        if unknown or not options:
            raise ConfigError(f"{prefix}.rollout_rs={block['rollout_rs']!r}; allowed: comma-separated of "
                              f"{', '.join(sorted(rch.SUPPORTED_ROLLOUT_RS_OPTIONS))}")
        try:
            rch._parse_rollout_rs_thresholds(options, block["rollout_rs_threshold"])
        except (TypeError, ValueError) as err:
            raise ConfigError(f"{prefix}.rollout_rs_threshold={block['rollout_rs_threshold']!r}: {err}") from err


def check_rules(cfg: DictConfig) -> None:
    """Rules across keys (the schema has checked each key on its own)."""
    r = cfg.rollout
    check_scenario(cfg.scenario, cfg.backend.name)
    if ArmSpec.of(cfg.method).sc and (r.top_p != 1.0 or r.top_k != -1):
        raise ConfigError(
            f"score centering needs the sampler's full distribution: rollout.top_p={r.top_p}, "
            f"rollout.top_k={r.top_k}; allowed: rollout.top_p=1.0 and rollout.top_k=-1"
        )
    if cfg.backend.name != "embedded":
        return
    b = cfg.backend
    if r.top_p != 1.0 or r.top_k != -1:
        raise ConfigError(f"rollout.top_p={r.top_p}, rollout.top_k={r.top_k}: the embedded sampler draws from the "
                          "full vocabulary; allowed: rollout.top_p=1.0 and rollout.top_k=-1")
    if cfg.eval.top_p != 1.0:
        raise ConfigError(f"eval.top_p={cfg.eval.top_p}: the embedded sampler supports only eval.top_p=1.0")
    responses = cfg.trainer.prompts_per_step * cfg.trainer.n
    if responses % b.micro_batch_size:
        raise ConfigError(f"backend.micro_batch_size={b.micro_batch_size} must divide trainer.prompts_per_step x "
                          f"trainer.n = {responses}")


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
        if group and not o.is_delete() and (key, o.value()) in {(g, n) for g, n, _ in schema.STORED}:
            raise ConfigError(f"{text}: {o.value()} is the schema of the {key} group (runners/config/schema.py), "
                              f"not an option; allowed: {', '.join(group_options(key))}")
        if group or o.is_delete() or key in known or key in OPTIONAL_KEYS:
            continue
        close = difflib.get_close_matches(key, sorted(known | OPTIONAL_KEYS), n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(close)}?" if close else "."
        ignored = ", so it would be ignored" if o.is_add() or o.is_force_add() else ""
        raise ConfigError(f"{text}: {key} is not a key of this config (no config file defines it and no code "
                          f"reads it){ignored}{hint}")


def backend_module(cfg: DictConfig):
    """The backend package named by ``backend.name``."""
    import importlib

    modules = {"embedded": "runners.embedded.backend", "verl": "runners.verl_side.backend"}
    if cfg.backend.name not in modules:
        raise ConfigError(f"backend.name={cfg.backend.name!r}; allowed: {', '.join(modules)}")
    return importlib.import_module(modules[cfg.backend.name])
