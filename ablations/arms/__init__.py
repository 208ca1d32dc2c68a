"""The arms, each declared once as an :class:`~ablations.arms.arm.Arm` in a module of this package.

Every module here (and in any ``ablations/arms/`` folder of a directory on ``PYTHONPATH``: the package
path is extended with :func:`pkgutil.extend_path`) is imported by :func:`all_arms`, and every module-level
``Arm`` in it is an arm: ``method=<name>`` selects it (``runners.config.schema`` registers one method
config node per arm), verl's plug-in loader registers its loss (``ablations.registry``), and the launch
checks, the verl overrides, the capacity plan, the contract checker and the report ask it through
:class:`~ablations.arms.arm.ArmSpec`. Adding an arm: docs/arms.md.
"""

from __future__ import annotations

import importlib
import pkgutil

from ablations.arms.arm import Arm, ArmSpec, Correction, centering_rule, parse_is_threshold

__path__ = pkgutil.extend_path(__path__, __name__)

#: The project's modules, listed first in this order (the table order of the user's four arms, then the field's).
BUILTIN_MODULES = ("reference", "rollout_correction")

__all__ = ["Arm", "ArmSpec", "Correction", "all_arms", "arm_modules", "arm_named", "centering_rule", "parse_is_threshold"]


def arm_modules() -> list[str]:
    """Dotted names of the modules that declare arms: the project's, then the others by name."""
    found = sorted({m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_") and m.name != "arm"})
    rest = [m for m in found if m not in BUILTIN_MODULES]
    return [f"{__name__}.{m}" for m in (*BUILTIN_MODULES, *rest)]


def all_arms() -> dict[str, Arm]:
    """Every declared arm by name, in declaration order; two arms of one name are an error naming both modules."""
    arms: dict[str, Arm] = {}
    where: dict[str, str] = {}
    for module_name in arm_modules():
        module = importlib.import_module(module_name)
        for value in vars(module).values():
            if not isinstance(value, Arm):
                continue
            if value.name in arms and arms[value.name] is not value:
                raise ValueError(f"two arms are named {value.name!r}: in {where[value.name]} and {module_name}")
            arms[value.name], where[value.name] = value, module_name
    return arms


def arm_named(name: str) -> Arm:
    """The arm ``name``; ValueError listing the known arms otherwise."""
    arms = all_arms()
    if name not in arms:
        raise ValueError(f"method={name!r} is not a declared arm; allowed: {', '.join(arms)} "
                         "(an arm is declared in a module of ablations/arms/: docs/arms.md)")
    return arms[name]
