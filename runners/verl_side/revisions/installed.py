"""Who carries an SC arm's head on the installed verl (the *head carrier*: verl itself where it has the seam
module of score-centering support, else the project through verl's slots), and whether the installed verl has
what that carrier relies on. How the head leaves vLLM is another matter: ``backend.rollout_engine.head_transport``.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from functools import lru_cache

from runners.config.config_error import ConfigError
from runners.verl_side.revisions.lookup import declares, source_file
from runners.verl_side.revisions.newer_keys import NEWER_KEYS, SEAM_MODULE, SEAM_NAMES
from runners.verl_side.revisions.project_slots import PROJECT_SLOTS
from runners.verl_side.revisions.releases import (
    INSTALL_COMMAND,
    PYPI,
    REQUIRED_COMMIT,
    REQUIRED_COMMIT_SHORT,
    SCORE_CENTERING,
)


class ScoreCenteringUnsupported(ConfigError, RuntimeError):
    """The installed verl cannot run an SC arm (a :class:`ConfigError` too: the launch's validation finds it before
    any compute, and the launcher prints it as ``config error: ...``)."""


@dataclasses.dataclass(frozen=True)
class HeadCarrier:
    """Who carries an SC arm's sampler head from the rollout to the trainer's logits: verl or the project."""

    name: str
    summary: str


VERL_CARRIES = HeadCarrier("verl", f"verl's own (verl {SCORE_CENTERING.name} or later: rollout.topk_log_probs), with "
                           "the project's correction installed in verl's slot (runners.verl_side.backend.sc_seam)")
PROJECT_CARRIES = HeadCarrier("project", "the project's, through verl's slots (runners.verl_side.head: a vLLM server class "
                              "chosen by the replica registry, the agent-loop manager chosen by config, the FSDP "
                              "engine chosen by vendor key), with the project's correction in the engine's "
                              "logits-processor slot")


def head_carrier() -> HeadCarrier:
    """The head carrier of an SC arm on the installed verl: verl itself where it has :data:`SEAM_MODULE`,
    else the project (read from the installed files, without importing verl)."""
    return VERL_CARRIES if source_file(SEAM_MODULE) is not None else PROJECT_CARRIES


@dataclasses.dataclass(frozen=True)
class Support:
    ok: bool
    verl_version: str
    carrier: str  # the name of the head carrier an SC arm uses
    missing: tuple[str, ...]  # what the installed verl lacks of it, in words

    def message(self, what: str = "an SC arm") -> str:
        lacks = "; ".join(self.missing) or "nothing"
        return (f"{what} cannot run on the installed verl {self.verl_version}: it would use the {self.carrier} "
                f"head carrier, and the installed verl lacks: {lacks}. The project as carrier needs verl "
                f"{PYPI.name}'s slots ({PYPI.install}); verl's own needs verl commit {REQUIRED_COMMIT_SHORT} "
                f"({REQUIRED_COMMIT}) or later: {INSTALL_COMMAND}")


def _verl_carrier_missing() -> list[str]:
    missing: list[str] = []
    module = importlib.import_module(SEAM_MODULE)
    missing += [f"{SEAM_MODULE}.{n}" for n in SEAM_NAMES if not hasattr(module, n)]
    for where in dict.fromkeys(e.declared_in for e in NEWER_KEYS):
        if not declares(*where):
            missing.append(f"{where[1]}.{where[2]}")
    return missing


@lru_cache(maxsize=1)
def check() -> Support:
    """Inspect the installed verl (imports it: slow the first time in a process): the head carrier an SC
    arm uses and whether the installed verl has what it relies on."""
    import verl

    chosen = head_carrier()
    missing = _verl_carrier_missing() if chosen is VERL_CARRIES else [
        f"{slot.where} ({slot.what})" for slot in PROJECT_SLOTS if not slot.holds()]
    return Support(ok=not missing, verl_version=str(getattr(verl, "__version__", "unknown")), carrier=chosen.name,
                   missing=tuple(missing))


def supported() -> bool:
    return check().ok


def require(what: str = "an SC arm") -> None:
    """Raise :class:`ScoreCenteringUnsupported`, naming what the installed verl lacks, if unsupported."""
    support = check()
    if not support.ok:
        raise ScoreCenteringUnsupported(support.message(what))
