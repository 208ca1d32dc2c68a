"""Names as paths: where a run's folder is, from ``results_root``, ``sweep`` and ``run_name``, checked once.

A run's folder is ``<results_root>/<sweep>/<run_name>``. ``sweep`` and ``run_name`` are *names*: each is one
folder name, so that every file a launch writes stays inside ``results_root`` (the sweep's folder holds only
run folders, their locks and the report). :func:`check_names` refuses, with one :class:`ConfigError` line naming
the key, before anything is written:

- ``results_root`` empty (it would be the current folder without saying so);
- ``sweep`` or ``run_name`` empty, ``.`` or ``..``, absolute, holding a path separator (``/``, ``\\``) or a NUL,
  or any other value whose folder is not a child of the folder above it;
- ``run_name`` hidden (``.x``: the report skips hidden folders, the locks are ``.<run>.lock``) or ``report``
  (the report's own folder in the sweep).

Every entry point reaches it: the launcher (:func:`run_dir`, used by ``runners.validate.run_dir_of`` before
any job starts and again in each job, SLURM and ``hydra/launcher=parallel`` jobs included) and the capacity CLI
(``runners.capacity.launch_checks.check``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from runners.config.config_error import ConfigError

#: The keys naming a folder level under ``results_root``, outermost first.
NAME_KEYS = ("sweep", "run_name")
#: The folder ``python -m analysis`` writes into a sweep folder (``analysis.report``): no run may be named so.
REPORT_DIR = "report"
_EXAMPLES = {"sweep": "sweep=seeds", "run_name": "run_name=pg-seed1"}


def name_problem(value: Any) -> str | None:
    """Why ``value`` is not one folder name (a sentence), or None when it is one."""
    text = "" if value is None else str(value)
    if not text.strip():
        return "it is empty"
    if text in (".", ".."):
        return f"{text!r} is not a folder of its own"
    if "\0" in text:
        return "it holds a NUL character"
    if os.path.isabs(text) or "/" in text or "\\" in text or (os.altsep and os.altsep in text):
        return "it is a path, not one folder name (it holds a separator)"
    if os.path.normpath(text) != text or Path(text).name != text:
        return "it does not name one folder"
    return None


def check_names(results_root: Any, sweep: Any, run_name: Any) -> None:
    """Raise :class:`ConfigError` (one line naming the key) unless the run folder of these names is
    ``<results_root>/<sweep>/<run_name>`` with ``sweep`` and ``run_name`` one folder name each."""
    if results_root is None or not str(results_root).strip():
        raise ConfigError("results_root='': empty, which would write into the current folder without saying so; "
                          "set results_root=<a folder> (default: results)")
    for key, value in zip(NAME_KEYS, (sweep, run_name), strict=True):
        problem = name_problem(value)
        if problem is None and key == "run_name" and (str(value).startswith(".") or str(value) == REPORT_DIR):
            problem = (f"{value!s} is {'hidden' if str(value).startswith('.') else 'the report'} in the sweep folder "
                       "(python -m analysis skips hidden folders and writes its report/ there)")
        if problem is not None:
            raise ConfigError(f"{key}={'' if value is None else value!s}: {problem}; {key} is one folder name inside "
                              f"results_root ({results_root}), without '/', not '.' or '..', not empty "
                              f"(e.g. {_EXAMPLES[key]}); nothing was written")


def run_dir(cfg: Any) -> Path:
    """``<results_root>/<sweep>/<run_name>`` of a config (absolute), after :func:`check_names`."""
    check_names(cfg.results_root, cfg.sweep, cfg.run_name)
    return Path(str(cfg.results_root)).resolve() / str(cfg.sweep) / str(cfg.run_name)
