"""verl plug-in entry point (``verl.plugins`` group): registers the four arms on ``import verl``.

verl swallows plug-in import errors at DEBUG level, so this module checks that the names really
landed in the registry and raises otherwise.
"""

from __future__ import annotations

from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

from ablations import losses

missing = [name for name in losses.ARM_NAMES if name not in POLICY_LOSS_REGISTRY]
if missing:
    raise RuntimeError(f"ablation losses not registered in verl: {missing}")

ARM_NAMES = tuple(losses.ARM_NAMES)
