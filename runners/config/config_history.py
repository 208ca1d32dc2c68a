"""Keys added to the config after run folders were written, what a run without them did, and values renamed since.

A run folder records its whole resolved config in ``config.yaml``. When a later version of the project
adds a key, a folder written before it lacks the key, although the run behaved in one definite way. Two
readers need that way as a value:

- the launcher's resume check (:func:`runners.run.run_folder.plan`): the same command must still resume an
  old folder, and a command that asks for the new behaviour must still be refused (it would change the
  run midway);
- the report's peer keys (:mod:`runners.run.peer_keys`): an old run is pooled only with runs that did the same.

:data:`ADDED_KEYS` maps each such key to a function of the old config that returns the value which
reproduces what that run did. A key added with a default that changes nothing for old runs needs no
entry (the absent key and the default then differ, and the folder is refused, naming the key).

:data:`RENAMED_VALUES` maps a key whose value got a new name for the same thing (``backend.name: local``,
the embedded backend's name until it was called ``embedded``) to ``{old: current}``. :func:`as_current`
gives both readers an old config in today's form: renamed values first, then the added keys.
:data:`RENAMED_OPTIONS` names the config-group options kept under an old name for commands written before the
rename (``backend=local``: ``conf/backend/local.yaml`` composes ``backend=embedded``); ``--help`` lists only
today's names.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any


def _eval_numerics(config: Mapping[str, Any]) -> str:
    """Before ``eval.numerics`` (added with the clean evaluation), the embedded backend evaluated through
    the scenario's sampler numerics (``scenario``); verl's evaluation used the rollout engine, which has no
    scenario numerics, which is what ``clean`` means there."""
    backend = config.get("backend") or {}
    return "scenario" if isinstance(backend, Mapping) and backend.get("name") == "embedded" else "clean"


#: What a value function returns for a run the key does not apply to (it stays absent).
NOT_APPLICABLE = object()


def _rehearsal_rollout(config: Mapping[str, Any]) -> Any:
    """Before ``backend.rehearsal_rollout`` (added with vLLM's CPU build), the verl backend's CPU rehearsal
    sampled with the HF stand-in; the embedded backend has no such key."""
    backend = config.get("backend") or {}
    return "standin" if isinstance(backend, Mapping) and backend.get("name") == "verl" else NOT_APPLICABLE


def _head_transport(config: Mapping[str, Any]) -> Any:
    """Before ``backend.rollout_engine.head_transport`` (added with the head's logits processor), an SC arm's
    head left vLLM as its flat top-k log-probs."""
    backend = config.get("backend") or {}
    return "flat_logprobs" if isinstance(backend, Mapping) and backend.get("name") == "verl" else NOT_APPLICABLE


def _log_prob_transport(config: Mapping[str, Any]) -> Any:
    """Before ``backend.rollout_engine.log_prob_transport`` (the sampled log-prob by the logits processor, issue
    45), every rollout asked vLLM for ``logprobs=0``."""
    backend = config.get("backend") or {}
    return "logprobs" if isinstance(backend, Mapping) and backend.get("name") == "verl" else NOT_APPLICABLE


def _rollout_correction(config: Mapping[str, Any]) -> Any:
    """Before ``method.rollout_correction`` (added with the plug-in arms), an arm's only correction was its
    ``tis_cap``: the four arms then had none."""
    return None


def _key_cache_bits(config: Mapping[str, Any]) -> Any:
    """Before ``backend.sampler.key_cache_bits`` (added for round 6's split cache), the embedded sampler stored
    keys at ``kv_cache_bits``, which null means; the verl backend has no sampler numerics."""
    backend = config.get("backend") or {}
    return None if isinstance(backend, Mapping) and backend.get("name") == "embedded" else NOT_APPLICABLE


#: ``{dotted key: value of a run written before the key existed, from its config}`` (or
#: :data:`NOT_APPLICABLE`).
ADDED_KEYS: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "eval.numerics": _eval_numerics,
    "backend.rehearsal_rollout": _rehearsal_rollout,
    "backend.rollout_engine.head_transport": _head_transport,
    "backend.rollout_engine.log_prob_transport": _log_prob_transport,
    "method.rollout_correction": _rollout_correction,
    "backend.sampler.key_cache_bits": _key_cache_bits,
}


#: ``{dotted key: {value an old run folder holds: today's name of the same value}}``.
RENAMED_VALUES: dict[str, dict[Any, Any]] = {
    "backend.name": {"local": "embedded"},
}

#: ``{config group: {old option: today's option}}``: each old option is a yaml of the group that composes today's.
RENAMED_OPTIONS: dict[str, dict[str, str]] = {
    "backend": {"local": "embedded"},
}


def _renamed(config: dict[str, Any]) -> None:
    """Replace, in place, every old value of :data:`RENAMED_VALUES` that ``config`` holds by its current name."""
    for dotted, names in RENAMED_VALUES.items():
        *parents, leaf = dotted.split(".")
        node: Any = config
        for p in parents:
            node = node.get(p) if isinstance(node, dict) else None
        if isinstance(node, dict) and isinstance(node.get(leaf), str | int) and node[leaf] in names:
            node[leaf] = names[node[leaf]]


def as_current(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a nested config (a run's ``config.yaml``) in today's form: each old value of
    :data:`RENAMED_VALUES` replaced by its current name, then every key of :data:`ADDED_KEYS` that it lacks
    set to what the run did. Keys present are left as they are."""
    out: dict[str, Any] = copy.deepcopy(dict(config))
    _renamed(out)
    renamed = copy.deepcopy(out)  # the value functions read today's names
    for dotted, value_of in ADDED_KEYS.items():
        if (value := value_of(renamed)) is NOT_APPLICABLE:  # before walking: no empty parents for such a run
            continue
        *parents, leaf = dotted.split(".")
        node: Any = out
        for p in parents:
            if not isinstance(node, dict):
                break
            node = node.setdefault(p, {})
        else:
            if isinstance(node, dict) and leaf not in node:
                node[leaf] = value
    return out

