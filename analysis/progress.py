"""Progress of a report: the time of each stage, and one concise line per stage for long reports.

:class:`Progress` times the stages of :func:`analysis.report.write_report` (``load``, ``tables``,
``curves``, one per figure, ``markdown``) into :attr:`Progress.times`, always; with a ``stream`` it
also writes one line per finished stage, e.g. ``analysis: load 256 runs: 38.2 s (total 38.2 s)``.
``python -m analysis`` gives it ``stderr`` when the sweep has :data:`PROGRESS_MIN_RUNS` run folders
or more (``--progress`` / ``--no-progress`` decide otherwise), so a 4-run report stays quiet and a
256-run one says where it is. The benchmark reads the times.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

#: Run folders from which ``python -m analysis`` prints a line per stage unless told otherwise.
PROGRESS_MIN_RUNS = 32


class Progress:
    """Stage timer; ``stream`` (default none: silent) receives one line per finished stage."""

    def __init__(self, stream: TextIO | None = None, prefix: str = "analysis"):
        self.stream = stream
        self.prefix = prefix
        self.times: dict[str, float] = {}
        self._start = time.perf_counter()

    def say(self, text: str) -> None:
        """Write ``prefix: text`` as one line (nothing when silent)."""
        if self.stream is not None:
            print(f"{self.prefix}: {text}", file=self.stream, flush=True)

    @contextmanager
    def stage(self, name: str, detail: str = "") -> Iterator[None]:
        """Time the block as stage ``name`` (times of a repeated name add up); ``detail`` goes in its line."""
        start = time.perf_counter()
        yield
        now = time.perf_counter()
        self.times[name] = self.times.get(name, 0.0) + now - start
        self.say(f"{name}{' ' + detail if detail else ''}: {now - start:.1f} s (total {now - self._start:.1f} s)")
