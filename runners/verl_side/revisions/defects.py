"""Defects of a verl revision that the environment of every verl process avoids, applied only where the
installed verl still has them (read from its source, without importing verl).
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

from runners.verl_side.revisions.lookup import source_file
from runners.verl_side.revisions.releases import PYPI


@dataclasses.dataclass(frozen=True)
class EnvironmentFix:
    """A defect found in a verl revision that setting ``env`` in every verl process avoids.

    Applied only where the installed verl still has the defect (:meth:`present` reads the module's
    source, without importing verl), so an upgrade that fixes it drops the setting by itself.
    """

    name: str
    found_in: str  # the revision it was found in
    module: str
    env: dict[str, str]
    why: str

    def present(self) -> bool:
        return bool(logger_calls_with_flush(self.module))


def logger_calls_with_flush(module: str) -> list[int]:
    """Lines of ``module`` (an installed module, read as source) that call ``logger.<level>(..., flush=...)``:
    ``logging.Logger`` takes no ``flush``, so each raises ``TypeError`` whenever its level is enabled."""
    import ast

    if (path := source_file(module)) is None:
        return []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "logger"
            and any(k.arg == "flush" for k in node.keywords)]


#: verl 0.9.1's separate_async trainer logs ``logger.info(..., flush=True)`` at init when
#: ``actor_rollout_ref.hybrid_engine=False`` (the reference experiment); its logger's level is
#: ``VERL_LOGGING_LEVEL``, INFO by default, so every such launch died with ``TypeError: Logger._log()
#: got an unexpected keyword argument 'flush'``. WARN keeps that call (and only INFO messages) quiet.
LOGGER_FLUSH = EnvironmentFix("logger flush", PYPI.name, "verl.trainer.ppo.v1.trainer_separate_async",
                              {"VERL_LOGGING_LEVEL": "WARN"},
                              "logger.info(..., flush=True) at separate_async trainer init raises at level INFO")
ENVIRONMENT_FIXES: tuple[EnvironmentFix, ...] = (LOGGER_FLUSH,)


@lru_cache(maxsize=1)
def environment_fixes() -> dict[str, str]:
    """The environment every verl process needs on the installed verl (the fixes whose defect is present)."""
    env: dict[str, str] = {}
    for fix in ENVIRONMENT_FIXES:
        if fix.present():
            env.update(fix.env)
    return env
