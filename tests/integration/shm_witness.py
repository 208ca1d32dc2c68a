"""A test helper (not a test): which of vLLM's shared-memory segments the processes of a test's own launches mapped.

vLLM's engine makes its ``SharedMemory`` message queues (``/dev/shm/psm_<random>``) at start-up and maps them
while it runs; the rehearsal's server unlinks them once the engine is up (``vllm_cpu.segments``). A segment left
in /dev/shm that no live process maps is a leak, but only the leak of the engine that made it: with two xdist
workers, another test's engine, on the other worker, makes segments of the same prefix at any time. The names
are random, so a segment is attributed by the processes seen mapping it: :class:`SegmentWitness` samples, every
``interval_s`` from a thread, the ``psm_`` segments mapped by the live processes whose environment holds one of
the given results roots (the mark :func:`test_rehearsal.is_survivor` reads: every process of a launch inherits
it, Ray's workers on another node included). An engine maps its queues for its whole start-up (about 20 s
measured on the rehearsal's engine, longer under load), far beyond a sample's interval.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from runners.verl_side.platform.rehearsal.vllm_cpu.segments import SHM_PREFIX, live_pids, mapped_files


def marked_pids(roots: Iterable[Path]) -> list[int]:
    """The live processes whose environment holds one of ``roots`` (unreadable or gone ones passed over)."""
    marks = [str(root).encode() for root in roots]
    pids = []
    for pid in live_pids():
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                if any(mark in environ.read() for mark in marks):
                    pids.append(pid)
        except OSError:
            continue
    return pids


class SegmentWitness:
    """The ``psm_`` segments the marked processes (``roots()``, read at each sample) have been seen mapping,
    sampled every ``interval_s`` seconds from :meth:`start` to :meth:`stop` (a context manager does both)."""

    def __init__(self, roots: Callable[[], Iterable[Path]], interval_s: float = 1.0) -> None:
        self._roots, self._interval_s = roots, interval_s
        self._seen: set[str] = set()
        self._lock, self._stopped = threading.Lock(), threading.Event()
        self._thread = threading.Thread(target=self._sample_until_stopped, name="segment-witness", daemon=True)

    def sample(self) -> None:
        mapped = mapped_files(marked_pids(self._roots()), SHM_PREFIX)
        with self._lock:
            self._seen |= mapped

    def seen(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._seen)

    def _sample_until_stopped(self) -> None:
        while not self._stopped.wait(self._interval_s):
            self.sample()

    def start(self) -> SegmentWitness:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()
        self.sample()

    def __enter__(self) -> SegmentWitness:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

