"""Reading the installed verl without importing it where possible: a module's source file, a dataclass's fields.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from pathlib import Path


def source_file(module: str) -> Path | None:
    """The ``.py`` file of an installed module, found without importing its package (``None``: absent)."""
    top, *rest = module.split(".")
    spec = importlib.util.find_spec(top)
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location, *rest[:-1], f"{rest[-1]}.py") if rest else None
        if candidate is not None and candidate.is_file():
            return candidate
    return None


def declares(module: str, name: str, field: str) -> bool:
    """Does the installed verl's dataclass ``module.name`` have ``field``?"""
    cls = getattr(importlib.import_module(module), name)
    return field in {f.name for f in dataclasses.fields(cls)}
