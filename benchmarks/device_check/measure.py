"""Clocks, memory meters, time budgets and part outcomes of the device check (torch and stdlib only).

* :class:`Clock` — CUDA events on a GPU (the device's own time between two marks), ``perf_counter``
  on the CPU.
* :class:`Meter` — peak bytes over a block: ``torch.cuda.max_memory_allocated`` after
  ``reset_peak_memory_stats`` on a GPU; on a Linux CPU the process's peak RSS (``VmHWM``, reset by
  writing ``5`` to ``/proc/self/clear_refs``), a coarser stand-in that lets ``--cpu-small`` run the
  same code; ``None`` where neither exists.
* :class:`Budget` — a part's wall-clock allowance; loops stop their repeats when it is spent.
* :class:`PartSkipped` — raised by a part that cannot run (no CUDA, an estimate above the memory
  limit); the runner records its reason.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Iterable

import torch

GIB = 1024**3


class PartSkipped(Exception):
    """A part (or sub-part) that could not run; the message is the reason written to the report."""


class Budget:
    """Seconds allowed from construction; ``min`` with a parent so no part outlives the whole check."""

    def __init__(self, seconds: float, parent: Budget | None = None) -> None:
        now = time.monotonic()
        self.deadline = min(now + seconds, parent.deadline) if parent is not None else now + seconds
        self.seconds = max(self.deadline - now, 0.0)  # what this budget really allows

    def left(self) -> float:
        """Seconds left (negative once spent)."""
        return self.deadline - time.monotonic()

    def spent(self) -> bool:
        return self.left() <= 0


class Clock:
    """Marks and elapsed milliseconds between marks, on the device's own timeline."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def mark(self) -> object:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def ms(self, start: object, end: object) -> float:
        """Milliseconds from ``start`` to ``end`` (synchronises the device first)."""
        if self.cuda:
            torch.cuda.synchronize()
            return float(start.elapsed_time(end))
        return (end - start) * 1e3


def _proc_status_kib(key: str) -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
        return True
    except OSError:
        return False


class Meter:
    """Peak memory over a block, absolute and above the block's start (bytes).

    ``start()`` frees cached memory and resets the peak; ``stop()`` returns ``(peak, peak - start)``.
    On CUDA also ``reserved``: the allocator's peak reserved bytes (what ``nvidia-smi`` would see).
    """

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.base = 0
        self.rss_ok = False

    def start(self) -> None:
        free_memory(self.cuda)
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
            return
        self.rss_ok = _reset_peak_rss()
        rss = _proc_status_kib("VmRSS")
        self.rss_ok = self.rss_ok and rss is not None
        self.base = (rss or 0) * 1024

    def stop(self) -> dict[str, int | None]:
        if self.cuda:
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
            return {"peak_bytes": peak, "extra_peak_bytes": peak - self.base,
                    "peak_reserved_bytes": torch.cuda.max_memory_reserved()}
        hwm = _proc_status_kib("VmHWM")
        if not self.rss_ok or hwm is None:
            return {"peak_bytes": None, "extra_peak_bytes": None}
        return {"peak_bytes": hwm * 1024, "extra_peak_bytes": max(hwm * 1024 - self.base, 0)}


def free_memory(cuda: bool) -> None:
    """Collect garbage and hand cached CUDA blocks back, so each part starts from what it holds."""
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()


def median(values: Iterable[float]) -> float | None:
    values = list(values)
    return statistics.median(values) if values else None


def ratio(value: float | None, reference: float | None) -> float | None:
    """``value / reference``, None where either is missing or the reference is not positive."""
    if value is None or reference is None or not reference > 0 or not math.isfinite(value):
        return None
    return value / reference


def is_oom(exc: BaseException) -> bool:
    """CUDA's out-of-memory error, or the CPU allocator's (a RuntimeError saying so)."""
    return isinstance(exc, torch.cuda.OutOfMemoryError | MemoryError) or (
        isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower())


def check_fits(name: str, need_bytes: int, device: torch.device, limit_bytes: int,
               resident_bytes: int = 0) -> None:
    """Raise :class:`PartSkipped` when ``need_bytes`` (an estimate of the peak, ``resident_bytes``
    already allocated included) exceeds ``limit_bytes`` or what is free on the device."""
    if need_bytes > limit_bytes:
        raise PartSkipped(f"{name}: estimated {need_bytes / GIB:.1f} GiB exceeds the "
                          f"{limit_bytes / GIB:.0f} GiB limit of a part")
    if device.type == "cuda":
        free_memory(True)
        free, _total = torch.cuda.mem_get_info()
        if need_bytes - resident_bytes > free:
            raise PartSkipped(f"{name}: estimated {(need_bytes - resident_bytes) / GIB:.1f} GiB more than "
                              f"allocated exceeds the free {free / GIB:.1f} GiB")
