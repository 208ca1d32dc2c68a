"""Hydra outside a Hydra app: Python values <-> override strings (``key=value``, exactly round-tripping),
and composing a config module's config offline."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf


@lru_cache(maxsize=1)
def _parser():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def format_value(value: Any) -> str:
    """A Python value as Hydra override syntax that parses back to exactly that value."""
    if isinstance(value, DictConfig | ListConfig):
        value = OmegaConf.to_container(value, resolve=True)
    if isinstance(value, Mapping):
        raise TypeError(f"dict values are not supported in overrides: {value!r}")
    if isinstance(value, bool):
        return "True" if value else "False"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, str):
        try:
            if _parser().parse_override(f"k={value}").value() == value:
                return value
        except Exception:  # noqa: BLE001 - any parse failure means: quote it
            pass
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, Iterable):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    raise TypeError(f"cannot format {value!r} ({type(value).__name__}) as an override value")


def override(key: str, value: Any, *, add: bool = False) -> str:
    """``key=value``; with ``add``, ``++key=value``: set whether or not the composed config has the key."""
    return f"{'++' if add else ''}{key}={format_value(value)}"


@contextlib.contextmanager
def _own_hydra(config_module: str | None = None, config_dir: Path | None = None):
    """A Hydra instance for ``config_module`` (or the folder ``config_dir``), leaving any caller's
    Hydra state as it was."""
    from hydra import initialize_config_dir, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.initialize import get_gh_backup, restore_gh_from_backup

    backup = get_gh_backup()
    GlobalHydra.instance().clear()
    try:
        if config_dir is not None:
            with initialize_config_dir(str(config_dir), version_base=None):
                yield
        else:
            with initialize_config_module(config_module, version_base=None):
                yield
    finally:
        restore_gh_from_backup(backup)


def compose_offline(config_module: str, config_name: str, overrides: list[str]) -> DictConfig:
    """``config_name`` of the package ``config_module`` composed with ``overrides``, outside any app."""
    from hydra import compose

    with _own_hydra(config_module):
        return compose(config_name, overrides=list(overrides))


def compose_dir_offline(config_dir: Path, config_name: str, overrides: list[str]) -> DictConfig:
    """``config_name`` of the folder ``config_dir`` composed with ``overrides``, outside any app."""
    from hydra import compose

    with _own_hydra(config_dir=config_dir):
        return compose(config_name, overrides=list(overrides))


def parse(entry: str) -> tuple[str, Any, str]:
    """``(key, value, prefix)`` of one override string; prefix is "", "+" or "++"."""
    parsed = _parser().parse_override(entry)
    prefix = "++" if parsed.is_force_add() else "+" if parsed.is_add() else ""
    return parsed.key_or_group, parsed.value(), prefix
