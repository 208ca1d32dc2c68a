"""Each config key declared once: the schema (``runners/config/schema.py``) is the source of every group yaml's
key names, types, allowed values and defaults; a yaml holds the values and the comments, and this test holds the
two together. A key added to a yaml and not to its schema, or to a schema and not to its yaml, fails here, as does
a yaml value that differs from the schema's default (where the schema has one).

Hydra's ConfigStore and the structured configs stay as they were: each group yaml still names its schema first in
its defaults list (``- base_verl``), so composition types every value (``tests/test_config_schema.py``).
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any

import pytest
from omegaconf import MISSING, OmegaConf

from runners.config import CONF_DIR, schema
from runners.config.config_history import RENAMED_OPTIONS

#: The keys of ``conf/config.yaml`` that are not :class:`~runners.config.schema.RunConfig`'s own: ``method.top_k``
#: (the setup's head size, in the method group's schema) and Hydra's settings.
NOT_RUN_CONFIG_KEYS = {"method", "hydra"}
#: The fields of :class:`~runners.config.schema.RunConfig` that a config group fills (``defaults:`` of config.yaml),
#: not a key of config.yaml itself.
GROUP_FIELDS = {"scenario", "model", "data"}


def yaml_schema_pairs() -> list[tuple[Path, type]]:
    """Every group yaml that holds a whole node of a schema: the backends, the GPU presets, the embedded models
    (``schema.MODELS['embedded']``) and the data of a task with a schema (``schema.DATA``)."""
    pairs: list[tuple[Path, type]] = []
    aliases = {f"{old}.yaml" for old in RENAMED_OPTIONS.get("backend", {})}  # an old name composing a current option
    for path in sorted((CONF_DIR / "backend").glob("*.yaml")):
        if path.name not in aliases:
            pairs.append((path, schema.BACKENDS[OmegaConf.load(path).name]))
    pairs += [(path, schema.GpuConfig) for path in sorted((CONF_DIR / "gpu").glob("*.yaml"))]
    pairs += [(path, schema.MODELS["embedded"]) for path in sorted((CONF_DIR / "model").glob("*.yaml"))]
    pairs += [(path, schema.DATA[OmegaConf.load(path).name]) for path in sorted((CONF_DIR / "data").glob("*.yaml"))]
    return pairs


def _dataclass_of(annotation: Any) -> type | None:
    return schema._inner_type(annotation)


def _default(f: dataclasses.Field, annotation: Any) -> Any:
    """The schema's default of a field, or MISSING (none: the yaml alone gives the value)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING and schema._list_item(annotation) is None:
        return f.default_factory()
    return MISSING


def differences(node: Any, cls: type, prefix: str, skip: frozenset[str] = frozenset()) -> list[str]:
    """How the yaml node ``node`` differs from schema ``cls``: keys in one only, values unlike the schema's default."""
    if not isinstance(node, dict):
        return [f"{prefix or '(top)'}: a {type(node).__name__} where schema {cls.__name__} wants a mapping"]
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in skip}
    types = typing.get_type_hints(cls)  # the annotations as types (a string under postponed evaluation)
    keys = {k for k in node if k != "defaults" and k not in skip}
    out = [f"{prefix}{k}: in the yaml, not in schema {cls.__name__}" for k in sorted(keys - set(fields))]
    out += [f"{prefix}{k}: in schema {cls.__name__}, not in the yaml" for k in sorted(set(fields) - keys)]
    for name in sorted(keys & set(fields)):
        f, value, key = fields[name], node[name], f"{prefix}{name}"
        if (inner := _dataclass_of(types[name])) is not None and value is not None:
            out += differences(value, inner, f"{key}.")
        elif (item := schema._list_item(types[name])) is not None:
            out += [d for i, entry in enumerate(value or []) for d in differences(entry, item, f"{key}.{i}.")]
        elif (default := _default(f, types[name])) is not MISSING and value != default:
            out.append(f"{key}: the yaml says {value!r}, schema {cls.__name__}'s default is {default!r}")
    return out


@pytest.mark.parametrize(("path", "cls"), yaml_schema_pairs(), ids=lambda p: getattr(p, "name", str(p)))
def test_a_group_yaml_and_its_schema_have_the_same_keys_and_defaults(path, cls):
    node = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    assert differences(node, cls, "") == []


def test_config_yaml_and_the_run_schema_have_the_same_keys_and_defaults():
    node = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "config.yaml"), resolve=False)
    node = {k: v for k, v in node.items() if k not in NOT_RUN_CONFIG_KEYS}
    assert differences(node, schema.RunConfig, "", skip=frozenset(GROUP_FIELDS)) == []
    assert all((CONF_DIR / group).is_dir() for group in GROUP_FIELDS)  # each filled by its config group


def test_every_schema_of_a_group_has_a_yaml_held_to_it():
    """Every stored schema with a group yaml is one this test compares (``method``'s nodes are made from the arms'
    declarations, ``base_config`` is config.yaml's)."""
    compared = {cls for _, cls in yaml_schema_pairs()}
    stored = {cls for group, _, cls in schema.STORED if group not in (None, "method")}
    assert stored <= compared


@dataclasses.dataclass
class Inner:
    rate: float = schema.positive()


@dataclasses.dataclass
class Outer:
    name: str = "x"
    depth: int = schema.at_least(1, 4)
    inner: Inner = dataclasses.field(default_factory=Inner)


def test_a_key_in_one_place_only_or_a_differing_default_is_found():
    """The controls: the comparison catches each way the two can drift apart."""
    assert differences({"name": "x", "depth": 4, "inner": {"rate": 1.0}}, Outer, "") == []
    assert differences({"name": "x", "depth": 4, "inner": {"rate": 1.0}, "new": 1}, Outer, "") == [
        "new: in the yaml, not in schema Outer"]
    assert differences({"name": "x", "inner": {"rate": 1.0}}, Outer, "") == ["depth: in schema Outer, not in the yaml"]
    assert differences({"name": "x", "depth": 5, "inner": {"rate": 1.0}}, Outer, "") == [
        "depth: the yaml says 5, schema Outer's default is 4"]
    assert differences({"name": "x", "depth": 4, "inner": {}}, Outer, "") == ["inner.rate: in schema Inner, not in the yaml"]


def test_the_capacity_time_assumptions_are_one_dataclass():
    """``backend.capacity.time``: the schema's dataclass is the one the estimate takes; its values are the yaml's."""
    from runners.capacity import timing

    assert timing.TimeAssumptions is schema.TimeAssumptions
    time = OmegaConf.load(CONF_DIR / "backend" / "verl.yaml").capacity.time
    assert set(time) == {f.name for f in dataclasses.fields(schema.TimeAssumptions)}
    assert all(f.default is MISSING for f in dataclasses.fields(schema.TimeAssumptions))  # values: the yaml's only
