"""The metric logs of a verl run's attempts (verl's file logger, ``verl/attempt-NNN/metrics.jsonl``), read and
merged by step: what ingestion (:mod:`runners.verl_side.backend.ingest`) turns into the run record and what the
capacity calibration (:mod:`runners.capacity.calibrate`) measures from a run's first steps."""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runners.run import verl_files

log = logging.getLogger(__name__)

#: The prefix of verl's evaluation metrics in a file-logger line.
VAL_PREFIX = "val-"


class IngestError(RuntimeError):
    """verl's outputs cannot be turned into a valid run record; the message says where and why."""


@dataclass
class AttemptLog:
    """One attempt's file-logger lines, split into train and evaluation parts by step."""

    number: int
    path: Path
    train: dict[int, dict[str, Any]] = field(default_factory=dict)
    val: dict[int, dict[str, Any]] = field(default_factory=dict)
    first_line_step: int | None = None
    first_line_val_only: bool = False

    @property
    def resume_step(self) -> int | None:
        """The step this attempt continues from (None when it has logged nothing yet)."""
        if self.first_line_step is None:
            return None
        if self.first_line_val_only and (not self.train or self.first_line_step < min(self.train)):
            return self.first_line_step
        return min(self.train) - 1

    @property
    def span(self) -> str:
        return f"train {min(self.train)}..{max(self.train)}" if self.train else "no train steps"


def read_attempt(number: int, path: Path) -> AttemptLog:
    attempt = AttemptLog(number=number, path=path)
    if not path.is_file():
        return attempt
    text = path.read_bytes().decode("utf-8", errors="replace")
    lines = text.split("\n")
    # the logger writes a line and its newline in one call: only an unterminated last line is torn
    torn_index = len(lines) - 1 if not text.endswith("\n") else -1
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            step, data = int(entry["step"]), entry["data"]
            if not isinstance(data, dict):
                raise TypeError("data is not an object")
        except (ValueError, KeyError, TypeError) as err:
            if i == torn_index:
                log.warning("%s:%d: ignoring an incomplete last line (being written?)", path, i + 1)
                continue
            raise IngestError(f"{path}:{i + 1}: not a file-logger line ({err})") from err
        train = {k: v for k, v in data.items() if not k.startswith(VAL_PREFIX)}
        val = {k: v for k, v in data.items() if k.startswith(VAL_PREFIX)}
        if attempt.first_line_step is None:
            attempt.first_line_step, attempt.first_line_val_only = step, not train
        if train:
            attempt.train.setdefault(step, {}).update(train)
        if val:
            attempt.val.setdefault(step, {}).update(val)
    return attempt


def read_attempts(run_dir: Path) -> list[AttemptLog]:
    """Every attempt's file-logger lines, in attempt order."""
    return [read_attempt(n, verl_files.AttemptPaths(run_dir, n).file_logger) for n in verl_files.attempts(run_dir)]


def merged_rows(attempts: list[AttemptLog]) -> tuple[dict[int, dict], dict[int, dict]]:
    """Train rows and val metrics by step, later attempts winning (an attempt drops every earlier
    row after its resume step); gaps are left as they are."""
    train: dict[int, dict] = {}
    val: dict[int, dict] = {}
    for a in attempts:
        start = a.resume_step
        if start is None:
            continue
        for rows in (train, val):
            for step in [s for s in rows if s > start]:
                del rows[step]
        train.update(a.train)
        val.update(a.val)
    return train, val


def finite_number(value: Any) -> float | int | None:
    """A finite number, or None (NaN/inf/missing); bools count as 0/1."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float) and math.isfinite(value):
        return value
    return None


def truncation_ratio(data: dict[str, Any], cap: int, step: int) -> float | None:
    """The share of a train step's responses cut at the cap ``cap``: verl's clip ratio where its longest response
    reached the cap, else 0 (verl's ratio is then batch-relative)."""
    longest, clip = finite_number(data.get("response_length/max")), finite_number(data.get("response_length/clip_ratio"))
    if longest is None or clip is None:
        return None
    if longest > cap:
        raise IngestError(f"train step {step}: response_length/max {longest} exceeds the configured cap {cap} "
                          "(rollout.max_response_length does not match verl's data.max_response_length)")
    return float(clip) if longest >= cap else 0.0
