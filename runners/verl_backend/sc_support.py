"""Does the installed verl support score centering (SC, SC+TIS arms)?

verl 0.9.1 (the PyPI pin) has no way to get the sampler's top-k head from vLLM into the trainer's
loss. verl commit 8718ca30 (PR #8010) does: vLLM returns the head (``rollout.topk_log_probs``), it is
carried through partial rollouts and TransferQueue, and the FSDP engine hands the trainer logits to
a logits-processor slot, ``verl.trainer.ppo.score_centering``. The project plugs its own correction
into that slot (:mod:`runners.verl_backend.sc_seam`).

This module only *detects*; importing it is cheap and never imports verl at module level.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from functools import lru_cache

#: The verl commit the reference runs pinned: the first with score-centering support.
REQUIRED_COMMIT = "8718ca30a3f002f93b7c4fd99b9b2506718681bc"
REQUIRED_COMMIT_SHORT = REQUIRED_COMMIT[:8]

#: How a GPU user gets that verl (see docs/verl_reference.md): the project's gpu extra first, then
#: verl from git at the pinned commit over the PyPI wheel, without touching the other pins.
INSTALL_COMMAND = (
    'pip install -e ".[gpu]" && '
    f'pip install --no-deps "verl @ git+https://github.com/verl-project/verl.git@{REQUIRED_COMMIT}"'
)

#: The seam's module and the names in it the project relies on (read from PR #8010's files).
SEAM_MODULE = "verl.trainer.ppo.score_centering"
SEAM_NAMES = ("score_centering_ppo_loss", "score_centering_logits_processor")


class ScoreCenteringUnsupported(ValueError, RuntimeError):
    """The installed verl cannot run an SC arm (a ValueError too: it is found before any compute)."""


@dataclasses.dataclass(frozen=True)
class Support:
    ok: bool
    verl_version: str
    missing: tuple[str, ...]  # what the installed verl lacks, in words

    def message(self, what: str = "an SC arm") -> str:
        lacks = "; ".join(self.missing) or "nothing"
        return (
            f"{what} needs verl with score-centering support (verl commit {REQUIRED_COMMIT_SHORT}, "
            f"{REQUIRED_COMMIT}, or later); the installed verl {self.verl_version} lacks: {lacks}. "
            f"Install it with: {INSTALL_COMMAND}"
        )


def _dataclass_fields(module: str, name: str) -> set[str]:
    cls = getattr(importlib.import_module(module), name)
    return {f.name for f in dataclasses.fields(cls)}


@lru_cache(maxsize=1)
def check() -> Support:
    """Inspect the installed verl (imports it: slow the first time in a process)."""
    import verl

    missing: list[str] = []
    if importlib.util.find_spec(SEAM_MODULE) is None:
        missing.append(f"module {SEAM_MODULE}")
    else:
        module = importlib.import_module(SEAM_MODULE)
        missing += [f"{SEAM_MODULE}.{n}" for n in SEAM_NAMES if not hasattr(module, n)]
    if "topk_log_probs" not in _dataclass_fields("verl.workers.config.rollout", "RolloutConfig"):
        missing.append("RolloutConfig.topk_log_probs (vLLM top-k head capture)")
    if "score_centering" not in _dataclass_fields("verl.trainer.config.algorithm", "RolloutCorrectionConfig"):
        missing.append("RolloutCorrectionConfig.score_centering")
    return Support(
        ok=not missing, verl_version=str(getattr(verl, "__version__", "unknown")), missing=tuple(missing)
    )


def supported() -> bool:
    return check().ok


def require(what: str = "an SC arm") -> None:
    """Raise :class:`ScoreCenteringUnsupported` naming the commit and install command if unsupported."""
    support = check()
    if not support.ok:
        raise ScoreCenteringUnsupported(support.message(what))
