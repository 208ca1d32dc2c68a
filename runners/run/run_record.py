"""The run record: ``metrics.json`` of ``docs/run_contract.md`` (schema_version 1).

Both backends write through :class:`RunRecord`, so the file has one shape whoever ran; the shape
itself (version, skeleton, names) is :mod:`runners.run.run_contract`'s. The file
is replaced atomically (temporary file in the same folder, then ``os.replace``); a non-finite
number is written as ``null`` and reported through the ``runners.run.run_record`` logger.

Every file written through :func:`atomic_write` gets the mode a plain ``open()`` would give it
(``0o666`` less the process umask: 0644 by default), not the temporary file's 0600. A process killed
mid-write leaves its temporary file (``.<name>.<8 random chars>.tmp``) behind;
:func:`remove_stale_temp_files` removes such files, and must only be called by the run folder's
lock holder (``runners.run.run_lock``), since a live writer's temporary file looks the same.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from runners.run.provenance import config_sha256
from runners.run.run_contract import CONFIG_FILE, METRICS_FILE, SCHEMA_VERSION, new_record

log = logging.getLogger(__name__)


def utc_now() -> str:
    """Current time as ISO-8601 with timezone."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


#: The temporary files of :func:`atomic_write`: ``tempfile.mkstemp``'s 8 random characters.
_TEMP_NAME = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")


def current_umask() -> int:
    """The process umask, read without changing it where Linux allows (``/proc/self/status``)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: Path, write: Callable[[IO], Any], binary: bool = False) -> None:
    """Call ``write(file)`` on a temporary file in ``path``'s folder, then rename it to ``path``.

    A process killed at any moment leaves either the old file or the new one, never a part. The
    file's mode is ``0o666 & ~umask``, as for a file created with ``open()``.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_write`)."""
    atomic_write(path, lambda f: f.write(text))


def write_text_if_changed(path: Path, text: str) -> None:
    """:func:`atomic_write_text` unless ``path`` already holds exactly ``text``."""
    if not (path.is_file() and path.read_text() == text):
        atomic_write_text(path, text)


def remove_stale_temp_files(folder: Path) -> list[Path]:
    """Delete the temporary files interrupted :func:`atomic_write` calls left in ``folder``; return them.

    Only the folder itself is searched (not its subfolders). Call it only while holding the run
    folder's lock: a live writer's temporary file has the same form.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    stale = sorted(p for p in folder.iterdir() if p.is_file() and _TEMP_NAME.match(p.name))
    for p in stale:
        p.unlink()
    return stale


def clean_metrics(row: dict[str, Any], *, context: str) -> dict[str, Any]:
    """Numbers as JSON numbers; non-finite values become ``None`` and are logged."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if hasattr(value, "item"):
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, int | float):
            out[key] = value
            continue
        if isinstance(value, float) and not math.isfinite(value):
            log.warning("non-finite value %r for %s at %s; written as null", value, key, context)
            out[key] = None
        else:
            out[key] = value
    return out


class RunRecord:
    """In-memory ``metrics.json`` with the contract's invariants enforced on every change."""

    def __init__(self, path: Path, data: dict[str, Any]):
        self.path = Path(path)
        self.data = data

    # -- creation ---------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        run_dir: Path,
        *,
        name: str,
        method: str,
        seed: int,
        backend: str,
        total_steps: int,
        config_sha256: str,
        versions: dict[str, str],
        seed_fixes: dict[str, Any] | None = None,
    ) -> RunRecord:
        """Load the run's ``metrics.json`` if present (a resume), else start a new record.

        ``seed_fixes`` (``runners.run.run_contract.seed_fixes_record``): what the run's seed fixes, written
        as ``run.seed_fixes`` (also into a resumed record, which may predate it).
        """
        path = Path(run_dir) / METRICS_FILE
        if path.exists():
            data = json.loads(path.read_text())
            if data.get("schema_version") != SCHEMA_VERSION:
                raise ValueError(f"{path}: schema_version {data.get('schema_version')!r}, expected {SCHEMA_VERSION}")
            data["run"]["total_steps"] = total_steps  # raised when the run is extended
            data["run"]["config_sha256"] = config_sha256  # the config.yaml the run now has
            data["run"]["versions"] = versions
            if seed_fixes is not None:
                data["run"]["seed_fixes"] = seed_fixes
            return cls(path, data)
        return cls(path, new_record(name=name, method=method, seed=seed, backend=backend, total_steps=total_steps,
                                    config_sha256=config_sha256, versions=versions, seed_fixes=seed_fixes))

    # -- attempts ---------------------------------------------------------------------------
    def start_attempt(self, start_step: int) -> None:
        """Record a new attempt starting after ``start_step``; rows past it are dropped.

        Rows after the checkpoint the attempt resumes from were produced by a killed attempt
        whose model state is lost; the new attempt recomputes them, so each step appears once.
        An earlier attempt still open died without closing itself: it is closed as ``killed``,
        ``ended`` = the time of its last completed step (``last_step_at``; its start when it
        completed none) and ``end_step`` = that step.
        """
        last_recorded = self.last_step
        self.truncate_after(start_step)
        for attempt in self.data["run"]["attempts"]:
            if attempt["ended"] is None:
                attempt["ended"] = attempt.get("last_step_at") or attempt["started"]
                attempt["end_step"] = max(last_recorded, attempt["start_step"])
                attempt["status"] = "killed"
        self.data["run"]["attempts"].append(
            {"started": utc_now(), "ended": None, "start_step": start_step, "end_step": None, "status": "running"}
        )
        self.data["run"]["status"] = "running"
        self.save()

    def end_attempt(self, status: str) -> None:
        """Close the current attempt with ``status`` ("finished", "failed" or "stopped": by the user)."""
        attempt = self.data["run"]["attempts"][-1]
        attempt["ended"] = utc_now()
        attempt["end_step"] = self.last_step
        attempt["status"] = status
        self.data["run"]["status"] = status
        self.save()

    # -- rows -------------------------------------------------------------------------------
    @property
    def last_step(self) -> int:
        train = self.data["train"]
        return train[-1]["step"] if train else 0

    def truncate_after(self, step: int) -> None:
        self.data["train"] = [r for r in self.data["train"] if r["step"] <= step]
        self.data["val"] = [r for r in self.data["val"] if r["step"] <= step]
        self.data["run"]["last_step"] = self.last_step

    def add_train(self, row: dict[str, Any]) -> None:
        step = int(row["step"])
        if step != self.last_step + 1:
            raise ValueError(f"train step {step} does not follow step {self.last_step}")
        self.data["train"].append(clean_metrics(row, context=f"train step {step}"))
        self.data["run"]["last_step"] = step
        attempts = self.data["run"]["attempts"]
        if attempts and attempts[-1]["ended"] is None:
            attempts[-1]["last_step_at"] = utc_now()  # what a killed attempt's `ended` becomes

    def add_val(self, row: dict[str, Any]) -> None:
        """Add an evaluation; a step evaluated again (a later attempt) replaces the earlier row."""
        step = int(row["step"])
        val = [r for r in self.data["val"] if r["step"] != step]
        val.append(clean_metrics(row, context=f"val step {step}"))
        self.data["val"] = sorted(val, key=lambda r: r["step"])

    def save(self) -> None:
        atomic_write_text(self.path, json.dumps(self.data, indent=1, allow_nan=False) + "\n")


# -- a damaged record ---------------------------------------------------------------------------
def record_damage(run_dir: Path) -> str | None:
    """Why ``run_dir``'s ``metrics.json`` cannot be continued (a phrase), or None when it is absent or readable as
    a record: not JSON, not an object, another ``schema_version``, without its ``run`` object, or ``train`` / ``val``
    rows that are not lists."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}".rstrip(": ")
    if not isinstance(data, dict):
        return f"not a JSON object but {type(data).__name__}"
    if data.get("schema_version") != SCHEMA_VERSION:
        return f"schema_version {data.get('schema_version')!r}, expected {SCHEMA_VERSION}"
    if not isinstance(data.get("run"), dict):
        return "without its run object"
    if not all(isinstance(data.get(key, []), list) for key in ("train", "val")):
        return "its train or val rows are not a list"
    return None


def damaged_record_refusal(run_dir: Path) -> str | None:
    """The one line that refuses a launch on a folder whose record is damaged (:func:`record_damage`), with the
    one command that moves the record aside, after which the same launch continues; None when undamaged."""
    damage = record_damage(run_dir)
    if damage is None:
        return None
    path = Path(run_dir) / METRICS_FILE
    return (f"{path} is damaged ({damage}): the record of the run's steps cannot be read, so no launch continues "
            f"it. Move it aside (mv {path} {path}.damaged); the same command then trains the run again from step "
            "0 (the checkpoints no record covers are moved to checkpoints/superseded/, nothing is deleted). "
            "Nothing was changed.")


# -- config.yaml against the record -----------------------------------------------------------
def recorded_run(run_dir: Path) -> dict[str, Any] | None:
    """The ``run`` section of ``run_dir``'s ``metrics.json``; None when the file or the section is absent or
    unreadable (the contract checker reports those)."""
    try:
        run = json.loads((Path(run_dir) / METRICS_FILE).read_text()).get("run")
    except (OSError, ValueError, AttributeError):
        return None
    return run if isinstance(run, dict) else None


def finished(run_dir: Path, total_steps: int) -> bool:
    """Whether ``run_dir``'s record is of a run that finished ``total_steps`` steps (``run.status`` finished,
    ``run.last_step >= total_steps``)."""
    run = recorded_run(run_dir) or {}
    last = run.get("last_step")
    return run.get("status") == "finished" and isinstance(last, int) and last >= total_steps


def recorded_config_sha256(run_dir: Path) -> str | None:
    """``run.config_sha256`` of ``run_dir``'s ``metrics.json``; None when the file, or that field, is absent
    or unreadable."""
    sha = (recorded_run(run_dir) or {}).get("config_sha256")
    return sha if isinstance(sha, str) and sha else None


def config_edited(run_dir: Path) -> str | None:
    """What shows that ``config.yaml`` was changed after the run wrote it (a sentence, without the
    file's path), or None.

    ``metrics.json`` records the sha256 of the ``config.yaml`` text the run ran with
    (``run.config_sha256``); a ``config.yaml`` whose sha256 differs was edited afterwards (by hand, or by
    anything but a launch), so it no longer says what ran. None when either file or the field is absent.
    """
    run_dir = Path(run_dir)
    recorded = recorded_config_sha256(run_dir)
    config = run_dir / CONFIG_FILE
    if recorded is None or not config.is_file():
        return None
    actual = config_sha256(config.read_text())
    if actual == recorded:
        return None
    return (f"config.yaml edited after the run wrote it: its sha256 is {actual[:16]}..., "
            f"{run_dir / METRICS_FILE} records config_sha256 {recorded[:16]}... (the config the run ran with)")


def record_config_sha256(run_dir: Path, sha: str) -> None:
    """Set ``run.config_sha256`` of an existing ``metrics.json`` to ``sha`` (atomically; nothing when it
    already holds it or there is no readable record). The launcher calls it, under the folder's lock,
    just before it writes a changed ``config.yaml`` (an extended run), so the two stay in step even if
    the backend never starts."""
    path = Path(run_dir) / METRICS_FILE
    if recorded_config_sha256(run_dir) in (None, sha):
        return
    data = json.loads(path.read_text())
    data["run"]["config_sha256"] = sha
    atomic_write_text(path, json.dumps(data, indent=1, allow_nan=False) + "\n")
