"""Python values <-> Hydra command-line override strings (``key=value``), exactly round-tripping."""

from __future__ import annotations

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


def parse(entry: str) -> tuple[str, Any, str]:
    """``(key, value, prefix)`` of one override string; prefix is "", "+" or "++"."""
    parsed = _parser().parse_override(entry)
    prefix = "++" if parsed.is_force_add() else "+" if parsed.is_add() else ""
    return parsed.key_or_group, parsed.value(), prefix
