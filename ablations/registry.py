"""verl plug-in entry point (``verl.plugins`` group): registers every arm's loss on ``import verl``.

Each arm (``ablations.arms``) that names a project ``loss`` gets it registered in verl's
``POLICY_LOSS_REGISTRY`` under its ``loss_mode``; an arm whose ``loss_mode`` is verl's own (``bypass_mode``)
registers nothing. verl swallows plug-in import errors at DEBUG level, so this module checks that every
arm's ``loss_mode`` is in the registry afterwards and raises otherwise.
"""

from __future__ import annotations

import importlib

from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, register_policy_loss

from ablations.arms import all_arms


def load_loss(spec: str):
    """The function ``"module:function"`` names."""
    module, _, function = spec.partition(":")
    return getattr(importlib.import_module(module), function)


ARMS = all_arms()
for _arm in ARMS.values():
    if _arm.loss is not None:
        register_policy_loss(_arm.loss_mode)(load_loss(_arm.loss))

missing = sorted({a.loss_mode for a in ARMS.values() if a.loss_mode not in POLICY_LOSS_REGISTRY})
if missing:
    raise RuntimeError(f"arm losses not registered in verl: {missing}")

#: The registered loss names of the arms, in declaration order.
ARM_NAMES = tuple(dict.fromkeys(a.loss_mode for a in ARMS.values()))
