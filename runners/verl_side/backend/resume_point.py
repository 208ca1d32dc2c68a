"""The checkpoint an attempt resumes from: never one whose step's metrics were not logged.

verl's trainer (0.9.1, ``trainer_base.fit``) saves the checkpoint of step N, then validates, then
logs step N's metrics. An attempt that dies between the save and the log (a crash or SIGKILL during
a long validation) leaves ``latest_checkpointed_iteration.txt`` at N with step N in no log; verl's
``resume_mode=auto`` would continue from N and the record would lack step N for good
(``runners.verl_side.backend.ingest`` refuses a gap). The embedded backend writes its record before its
checkpoint for the same reason.

:func:`align` runs before each attempt, under the run folder's lock: when the tracker is ahead of the
last step logged without a gap (``S``), every checkpoint after ``S`` is moved, not deleted, to
``checkpoints/superseded/global_step_N-before-attempt-NNN/`` and the tracker is set to the newest
checkpoint at or before ``S`` (removed when there is none: verl then starts from scratch). verl
resumes from there as usual, with the reference launch's own ``resume_mode=auto``, and the steps
after it are trained and logged again by the new attempt (later attempts win in the record). A
tracker torn by a kill while verl wrote it (empty: verl's own lookup would raise at start-up) is
rewritten the same way.
"""

from __future__ import annotations

import logging
from pathlib import Path

from runners.run import verl_files
from runners.verl_side.backend.ingest import logged_through
from runners.verl_side.checkpoints.store import list_checkpoints

log = logging.getLogger(__name__)

SUPERSEDED = "superseded"


def align(run_dir: Path, attempt: int) -> int | None:
    """Make verl's resume point for ``attempt`` a checkpoint whose step is logged; return the step
    verl resumes from (None: from scratch or no tracker)."""
    ckpt_dir = verl_files.checkpoints_dir(run_dir)
    tracker = ckpt_dir / verl_files.TRACKER
    tracked = verl_files.resume_step(ckpt_dir)  # None: no tracker, or one torn by a kill while verl wrote it
    if tracked is None and not tracker.exists():  # a fresh run: nothing to read
        return None
    logged = logged_through(run_dir)
    if tracked is not None and tracked <= logged:
        return tracked
    checkpoints = list_checkpoints(ckpt_dir)
    aside = ckpt_dir / SUPERSEDED
    moved = []
    for step, folder in checkpoints.items():
        if step > logged:
            aside.mkdir(exist_ok=True)
            target = aside / f"{folder.name}-before-attempt-{attempt:03d}"
            folder.rename(target)
            moved.append(str(target))
    earlier = [s for s in checkpoints if s <= logged]
    if earlier:
        tracker.write_text(str(earlier[-1]))
    else:
        tracker.unlink()
    why = (f"checkpoint of step {tracked} was saved but steps {logged + 1}..{tracked} were never logged (the attempt "
           "ended between the two)" if tracked is not None else f"{tracker} is unreadable (torn by a kill)")
    log.warning("%s; resuming from %s instead; moved aside: %s", why,
                f"step {earlier[-1]}" if earlier else "scratch", ", ".join(moved) or "nothing")
    return earlier[-1] if earlier else None
