"""Unlinking vLLM's shared-memory segments once its processes have mapped them (no vLLM needed)."""

from __future__ import annotations

import multiprocessing as mp
import os
from multiprocessing import shared_memory

from runners.verl_side.platform.rehearsal.vllm_cpu.segments import (
    SHM_PREFIX,
    mapped_segments,
    unlink_engine_segments,
)


def _hold(name: str, ready, done) -> None:
    segment = shared_memory.SharedMemory(name=name)
    ready.set()
    done.wait(60)
    assert bytes(segment.buf[:4]) == b"head"  # still readable after its name is gone
    segment.close()


def test_a_mapped_segment_is_unlinked_and_stays_readable():
    segment = shared_memory.SharedMemory(create=True, size=4096)
    segment.buf[:4] = b"head"
    other = shared_memory.SharedMemory(create=True, size=4096)  # mapped by nobody below
    other.close()
    ctx = mp.get_context("fork")
    ready, done = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_hold, args=(segment.name, ready, done))
    child.start()
    try:
        assert ready.wait(30)
        path = SHM_PREFIX + segment.name.removeprefix("psm_")
        assert path in mapped_segments(os.getpid())
        assert path in unlink_engine_segments(os.getpid())
        assert not os.path.exists(path)
        assert os.path.exists(SHM_PREFIX + other.name.removeprefix("psm_"))  # not ours: left alone
    finally:
        done.set()
        child.join(30)
        segment.close()
        other.unlink()
    assert child.exitcode == 0
