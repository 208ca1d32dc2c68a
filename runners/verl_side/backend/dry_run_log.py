"""What a dry run's report says in the launcher's log: the verl it passed against, the head carrier, the
capacity plan (and the refusal a launch would meet), the notes and the platform's difference from the
reference launch."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from runners.verl_side.backend.verl_run import VerlRun

log = logging.getLogger("runners.verl_side.backend")


def log_report(run: VerlRun, report: dict[str, Any], run_dir: Path) -> str | None:
    """Log the dry run's ``report``; return the run's name and its ``capacity.md`` where a launch would be refused
    for not fitting its GPUs (a platform whose launch must fit them), else None."""
    name = run.cfg.run_name
    misfit = None
    newer = ", ".join(f"{r['key']} ({r['status']})" for r in report["newer_keys"]) or "none"
    log.info("dry run of %s passed against verl %s; keys of newer verl: %s; files in %s",
             name, report["verl_version"], newer, run_dir / "verl" / "dry_run")
    if carrier := report.get("score_centering_transport"):
        log.info("score centering of %s: the sampler's head is carried by %s: %s", name,
                 "verl itself" if carrier["name"] == "verl" else "the project", carrier["summary"])
    cap = report["capacity"]
    if cap["fits"] is None:
        log.warning("no capacity plan for %s: %s", name, cap["error"])
    else:
        log.info("capacity of %s on %s (an estimate): trainer GPU %.1f GB, rollout GPU %.1f GB of %.1f GB: %s; "
                 "%.0f s per step, %.0f GPU-hours per arm; see %s", name, cap["gpu"],
                 cap["trainer_total_bytes"] / 1e9, cap["rollout_total_bytes"] / 1e9, cap["gpu_bytes"] / 1e9,
                 "fits" if cap["fits"] else "DOES NOT FIT", cap["step_seconds"], cap["gpu_hours_per_arm"], cap["file"])
        if cap["refusal"] and run.platform.fits_gpus:
            log.warning("a launch would be refused: %s", cap["refusal"])
            misfit = f"{name} ({cap['file']})"
    for note in report.get("notes", []):
        log.info("note: %s", note)
    if "rehearsal" in report:
        log.info("rehearsal: %d keys differ from the reference launch, by the swaps %s; see %s",
                 len(report["rehearsal"]["difference"]), ", ".join(s["name"] for s in report["rehearsal"]["swaps"]),
                 run_dir / "verl" / "dry_run" / "rehearsal_difference.txt")
    return misfit
