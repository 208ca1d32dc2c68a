"""Runs are pooled only with their peers: the arm label of each run of a sweep.

Two runs of one arm are *peers* -- their scores may be pooled as seeds -- only where every pooling key
of their records agrees (:mod:`runners.run.peer_keys`: every key of ``config.yaml`` but the seed, the
arm's own method keys and a documented list of keys that cannot change a result). The grouping:

1. **Keys the sweep varies on purpose** (:func:`swept_keys`): the keys a multirun of the sweep swept
   (``<sweep>/multirun.yaml``, Hydra's record of the command; ``method`` and ``seed`` aside). Each
   combination of their values is a *cell*; a run's value is read from its own ``.hydra/overrides.yaml``,
   else from its config. Every run of a sweep with such keys is labelled with its cell, e.g.
   ``sc [trainer.lr=0.002]``: each value becomes its own row in every table, named.
2. **Runs apart**: within a cell, the reference setting is the most common one among its runs (all
   arms; ties: the first run by name). A run whose pooling keys differ from it is *apart*: its label
   names the keys that differ (``sc [trainer.lr=0.002]``), so it is never averaged with its arm's
   peers, and the report lists it with each key, its value and its peers' (``--strict`` refuses the
   sweep instead).

A sweep whose runs all agree gets the plain arm names, as before.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runners.config.config_history import as_current
from runners.run import peer_keys

MULTIRUN_FILE = "multirun.yaml"
#: Swept keys that are not a setting: the arm (the comparison's axis) and the seed (the replicates).
NOT_SETTINGS = ("method", "seed")
#: Differing keys a label names before it counts the rest.
LABEL_KEYS = 2


@dataclass
class Peers:
    """The grouping of a sweep's runs (:func:`group_runs`).

    ``labels``: run -> its arm label (the method, plus its cell and the keys that set it apart);
    ``swept``: the keys the sweep varies on purpose; ``apart``: run -> ``{key: (its value, its peers'
    value)}`` for the runs whose setting differs from their cell's reference.
    """

    labels: dict[str, str]
    swept: tuple[str, ...] = ()
    apart: dict[str, dict[str, tuple[Any, Any]]] = field(default_factory=dict)

    def apart_lines(self) -> list[str]:
        """One line per run apart: ``run: key=value (peers: value), ...; shown as 'label'``."""
        return [f"{run}: " + ", ".join(f"{k}={peer_keys.text(v)} (its peers: {peer_keys.text(p)})"
                                       for k, (v, p) in sorted(diffs.items(), key=lambda kv: peer_keys.key_order(kv[0])))
                + f"; shown as '{self.labels[run]}', not pooled with them"
                for run, diffs in self.apart.items()]


def swept_keys(sweep_dir: Path) -> tuple[str, ...]:
    """The keys a multirun of ``sweep_dir`` swept (``multirun.yaml``'s ``hydra.overrides.task``), ``method``
    and ``seed`` aside; none without the file or when it cannot be read."""
    import yaml

    path = Path(sweep_dir) / MULTIRUN_FILE
    try:
        record = yaml.safe_load(path.read_text(encoding="utf-8"))
        task = record["hydra"]["overrides"]["task"]
    except (OSError, ValueError, yaml.YAMLError, KeyError, TypeError):
        return ()
    if not isinstance(task, list):
        return ()
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        parsed = OverridesParser.create().parse_overrides([str(t) for t in task])
    except Exception:  # noqa: BLE001 - hydra's parser raises its own errors; an unparsable record names no key
        return ()
    keys = [o.key_or_group.lstrip("+~") for o in parsed if o.is_sweep_override()]
    return tuple(k for k in dict.fromkeys(keys) if k not in NOT_SETTINGS)


def _override_value(run_dir: Path, key: str) -> str | None:
    """``key``'s value in the run's ``.hydra/overrides.yaml`` (the job's command line), or None."""
    import yaml

    try:
        overrides = yaml.safe_load((Path(run_dir) / ".hydra" / "overrides.yaml").read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return None
    for item in overrides if isinstance(overrides, list) else []:
        name, eq, value = str(item).partition("=")
        if eq and name.lstrip("+~") == key:
            return value
    return None


def cell_value(run_dir: Path, config: Mapping[str, Any], key: str) -> str:
    """A run's value of a swept ``key``: its command line's, else its config's (a group: its ``name``)."""
    found = _override_value(run_dir, key)
    if found is not None:
        return found
    flat = peer_keys.flatten(as_current(config))
    for candidate in (key, f"{key}.name"):
        if candidate in flat:
            return peer_keys.text(flat[candidate])
    return "?"


def _label(method: str, parts: list[str]) -> str:
    return f"{method} [{'; '.join(parts)}]" if parts else method


def group_runs(runs: Sequence[tuple[str, str, Path, Mapping[str, Any]]], swept: Sequence[str] = ()) -> Peers:
    """Label each run (``(name, method, run folder, config)``, in folder order) by arm, cell and difference."""
    swept = tuple(swept)
    cells: dict[tuple[str, ...], list[int]] = {}
    settings = []
    for i, (_, _, run_dir, config) in enumerate(runs):
        cells.setdefault(tuple(cell_value(run_dir, config, k) for k in swept), []).append(i)
        settings.append(peer_keys.setting(config))
    keyed = [json.dumps(s, sort_keys=True, default=str) for s in settings]
    labels: dict[str, str] = {}
    apart: dict[str, dict[str, tuple[Any, Any]]] = {}
    owner: dict[str, str] = {}  # label -> the (cell, setting) it names, so two settings never share one label
    for cell, members in cells.items():
        common = Counter(keyed[i] for i in members).most_common(1)[0][0]
        reference = next(settings[i] for i in members if keyed[i] == common)
        cell_parts = [f"{k}={v}" for k, v in zip(swept, cell, strict=True)]
        for i in members:
            name, method = runs[i][0], runs[i][1]
            parts = list(cell_parts)
            if keyed[i] != common:
                diffs = peer_keys.differences(settings[i], reference)
                apart[name] = diffs
                keys = sorted(diffs, key=peer_keys.key_order)
                parts += [f"{k}={peer_keys.text(diffs[k][0])}" for k in keys[:LABEL_KEYS]]
                if len(keys) > LABEL_KEYS:
                    parts.append(f"+{len(keys) - LABEL_KEYS} keys")
            label, identity, n = _label(method, parts), f"{method}\n{cell}\n{keyed[i]}", 1
            while owner.setdefault(label, identity) != identity:
                n += 1
                label = _label(method, [*parts, f"#{n}"])
            labels[name] = label
    return Peers(labels=labels, swept=swept, apart=apart)
