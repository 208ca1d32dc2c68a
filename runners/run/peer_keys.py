"""Which keys of a run's resolved config can change a number in the report: the pooling keys.

Runs are *peers* (their scores may be pooled as seeds of one arm) only where every pooling key of
their ``config.yaml`` agrees. The pooling keys are every key of the record, found generically (a key
a new config group adds is one at once), minus two explicit lists:

- :data:`INERT_KEYS` -- keys that cannot change a number of a run: where the run is written (``results_root``,
  ``sweep``, ``run_name``), whether a launch resumes or only dry-runs, where live curves go (``backend.logger``,
  ``backend.project_name``), how many checkpoints are kept and how often verl's logs are merged, where
  warm-started bases are cached, the interpreter that runs verl, and the capacity plan's inputs (``gpu``,
  ``backend.capacity``: checked before a launch, nothing trains on them), and the Ray cluster a run joins
  (``backend.ray_address``: where it runs, not what). A key listed here matches itself and every key under it. It is the one list of inert keys: the launcher's resume check reads it too
  (``runners.run.run_folder.plan``: a run resumes or extends with these keys changed, so a moved or copied
  results folder, another cache folder or another checkpoint retention continues the run).
- :data:`REPLICATE_KEYS` -- the seed: it changes the numbers (a resume with another seed is refused) but is the
  replicate axis itself, so runs that differ only in it are seeds of one arm.
- :data:`ARM_KEYS` -- the keys of an arm's declaration (``ablations/arms/``: ``method.name``,
  ``method.loss_mode``, ``method.tis_cap``, ``method.score_centering``, ``method.rollout_correction``): they differ between arms by
  design, and the arm is the comparison's own axis. ``method.top_k`` (the setup's head size) is set by
  the setup, not by the arm, and so stays a pooling key.

Everything else -- trainer, rollout and evaluation keys (``eval.*``), the scenario and the sampler's
numerics, the model, the data, ``backend.extra_overrides`` -- is a pooling key.

Used by :mod:`analysis.peers` (the report groups runs by arm only among peers) and by the launcher
(:func:`sibling_differences`: a launch into an existing sweep that differs from its siblings is warned).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from runners.config.config_history import as_current
from runners.run.run_contract import CONFIG_FILE

#: Keys (and the keys under them) that cannot change a number of a run (the module doc says why each): the report
#: pools across them and a resume or an extension may change them (``runners.run.run_folder.plan``).
INERT_KEYS: frozenset[str] = frozenset({
    "results_root", "sweep", "run_name",
    "trainer.resume", "backend.dry_run",
    "backend.logger", "backend.project_name",
    "backend.keep_checkpoints", "backend.actor.max_ckpt_to_keep", "backend.actor.checkpoint_contents",
    "backend.ingest_interval_s", "backend.cache_dir", "backend.python",
    "gpu", "backend.capacity", "backend.ray_address",
})
#: The replicate axis: not pooled apart (runs differing only in it are seeds of one arm), not inert for a resume.
REPLICATE_KEYS: frozenset[str] = frozenset({"seed"})
#: Keys of the evaluation protocol: ``python -m analysis`` compares the runs of a sweep only when they share it
#: (samples per problem, evaluation sets and their problems: ``analysis.load``), so a run that differs in one is
#: not shown apart but makes the sweep unreadable; the launcher refuses it (``runners.launch.check_protocol``).
PROTOCOL_KEYS: frozenset[str] = frozenset({"eval.n", "data.eval_sets"})


def _arm_keys() -> frozenset[str]:
    """``method.<key>`` for every key an arm's declaration sets (``ablations.arms.Arm.method_node``)."""
    from ablations.arms import Arm

    return frozenset(f"method.{k}" for k in Arm(name="", loss_mode="", summary="").method_node())


#: Keys of the arm itself (they differ between arms by design): the keys of its declaration's method node.
ARM_KEYS: frozenset[str] = _arm_keys()


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """``{"trainer.lr": 0.001, "data.eval_sets.0.size": 30, ...}``: every leaf of a config mapping."""
    if isinstance(node, Mapping):
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out if out or not prefix else {prefix[:-1]: {}}
    if isinstance(node, list | tuple) and node and all(isinstance(v, Mapping) for v in node):
        out = {}
        for i, v in enumerate(node):
            out.update(flatten(v, f"{prefix}{i}."))
        return out
    return {prefix[:-1]: list(node) if isinstance(node, tuple) else node}


def under(key: str, roots: Iterable[str]) -> bool:
    """Whether dotted ``key`` is one of ``roots`` or a key under one of them."""
    return any(key == r or key.startswith(r + ".") for r in roots)


def is_pooling_key(key: str) -> bool:
    """Whether ``key`` (dotted) can change a number in the report (not inert, not the arm's own)."""
    return not under(key, INERT_KEYS | REPLICATE_KEYS) and not under(key, ARM_KEYS)


def setting(config: Mapping[str, Any], exclude: Iterable[str] = ()) -> dict[str, Any]:
    """The pooling keys of a resolved config and their values (keys under ``exclude`` left out too)."""
    exclude = tuple(exclude)
    flat = flatten(as_current(config))  # a run written before a key existed: what it did
    return {k: v for k, v in flat.items() if is_pooling_key(k) and not under(k, exclude)}


def differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{key: (value in a, value in b)}`` for every key whose values differ (a missing key: ``"<absent>"``)."""
    absent = "<absent>"
    return {k: (a.get(k, absent), b.get(k, absent)) for k in sorted(set(a) | set(b))
            if a.get(k, absent) != b.get(k, absent)}


def text(value: Any) -> str:
    """A config value as a user would type it (``0.002``, ``kv4``, ``[a, b]``, ``null``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return value
    if isinstance(value, list | dict):
        return json.dumps(value, default=str)
    return str(value)


def key_order(key: str) -> tuple[int, str]:
    """Keys a user names first (top-level and ``*.name`` keys), then the rest alphabetically."""
    return (0 if "." not in key or key.endswith(".name") else 1, key)


def read_config(run_dir: Path) -> dict[str, Any] | None:
    """A run folder's ``config.yaml`` as a mapping; None when missing, unreadable or not a mapping."""
    import yaml

    try:
        config = yaml.safe_load((Path(run_dir) / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):  # UnicodeDecodeError is a ValueError
        return None
    return config if isinstance(config, dict) else None


def sibling_differences(run_dir: Path, config: Mapping[str, Any], varied: Iterable[str] = ()
                        ) -> tuple[int, dict[str, tuple[Any, Any]]]:
    """How a new run's config differs from the runs already in its sweep folder.

    Returns ``(number of siblings with a readable config, {key: (new value, the siblings' most common
    value)})`` over the pooling keys, leaving out keys under ``varied`` (those this launch varies on
    purpose). The siblings' reference is their most common setting (ties: the first folder by name).
    """
    run_dir = Path(run_dir)
    varied = tuple(varied)
    settings = []
    if run_dir.parent.is_dir():
        for sibling in sorted(run_dir.parent.iterdir()):
            if sibling == run_dir or not sibling.is_dir() or sibling.name.startswith("."):
                continue
            other = read_config(sibling)
            if other is not None:
                settings.append(setting(other, varied))
    if not settings:
        return 0, {}
    keyed = [json.dumps(s, sort_keys=True, default=str) for s in settings]
    common = Counter(keyed).most_common(1)[0][0]
    reference = settings[keyed.index(common)]
    return len(settings), differences(setting(config, varied), reference)
