"""The witness of a test's own shared-memory segments (tests/integration/shm_witness.py): a segment is this
test's only where a process carrying its results root was seen mapping it (no vLLM needed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the helpers beside this file (pytest runs in importlib mode)
from shm_witness import SegmentWitness  # noqa: E402

from runners.verl_side.platform.rehearsal.vllm_cpu.segments import SHM_PREFIX  # noqa: E402

#: A process that makes a SharedMemory segment, prints its path, holds it mapped until stdin closes, then
#: closes it and leaves it in /dev/shm (as a killed engine does) for the test to judge and unlink.
_HOLDER = """
import sys
from multiprocessing import resource_tracker, shared_memory
segment = shared_memory.SharedMemory(create=True, size=4096)
resource_tracker.unregister(segment._name, "shared_memory")
print("/dev/shm" + segment._name, flush=True)
sys.stdin.read()
segment.close()
"""


def _holder(env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    return proc, proc.stdout.readline().strip()


def test_only_the_segments_of_processes_carrying_the_results_root_are_seen(tmp_path):
    results = tmp_path / "results"
    ours, ours_path = _holder({**os.environ, "VERL_FILE_LOGGER_PATH": f"{results}/rehearsal/pg-seed42/metrics.jsonl"})
    other, other_path = _holder({**os.environ, "VERL_FILE_LOGGER_PATH": f"{tmp_path}/elsewhere/metrics.jsonl"})
    try:
        assert ours_path.startswith(SHM_PREFIX) and other_path.startswith(SHM_PREFIX)
        with SegmentWitness(lambda: (results,), interval_s=0.1) as witness:
            witness.sample()
            for proc in (ours, other):  # both let go: the segments stay, mapped by nobody
                proc.stdin.close()
                assert proc.wait(timeout=30) == 0
        assert os.path.exists(ours_path) and os.path.exists(other_path)
        assert ours_path in witness.seen()
        assert other_path not in witness.seen()
    finally:
        for proc in (ours, other):
            proc.kill()
            proc.wait()
        for path in (ours_path, other_path):
            if path and os.path.exists(path):
                os.unlink(path)
