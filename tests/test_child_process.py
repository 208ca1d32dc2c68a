"""The watchdog of a verl attempt (runners.verl_side.backend.child_process.GroupReaper): once its launcher lets go
(or dies: the kernel closes the same pipe), it stops the child's process group and removes the leftovers."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from runners.verl_side.backend.child_process import GroupReaper


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_watchdog_stops_the_group_and_removes_the_leftovers(tmp_path):
    sockets = tmp_path / "sc-vllm-rpc-test"
    sockets.mkdir()
    (sockets / "engine.sock").write_text("")
    child = subprocess.Popen(["sleep", "120"], start_new_session=True)
    reaper = GroupReaper(child.pid, grace_s=5.0, leftovers=(sockets,))
    time.sleep(0.5)
    assert _alive(child.pid) and sockets.exists()  # nothing happens while the launcher holds on
    reaper.close()  # what the kernel does when the launcher dies
    child.wait(timeout=30)
    reaper.watchdog.wait(timeout=30)
    assert not _alive(child.pid)
    assert not sockets.exists()


def test_the_watchdog_unlinks_the_groups_unmapped_segments_and_no_other(tmp_path):
    """verl's weight sync makes a shared-memory segment per sync; a group killed mid-sync leaves it. The watchdog
    unlinks those under its prefixes made since it started that no live process maps, and nothing else."""
    prefix = str(tmp_path / "verl_weights_")
    old = tmp_path / "verl_weights_before"  # another run's, older than this attempt
    old.write_bytes(b"\0" * 4096)
    os.utime(old, (time.time() - 600, time.time() - 600))
    child = subprocess.Popen(["sleep", "120"], start_new_session=True)
    reaper = GroupReaper(child.pid, grace_s=5.0, segment_prefixes=(prefix,))
    time.sleep(0.5)
    orphan, in_use = tmp_path / "verl_weights_killed", tmp_path / "verl_weights_in_use"
    for segment in (orphan, in_use):
        segment.write_bytes(b"\0" * 4096)
    holder = subprocess.Popen([sys.executable, "-c", "import mmap, sys, time; f = open(sys.argv[1], 'r+b'); "
                               "m = mmap.mmap(f.fileno(), 0); print('mapped', flush=True); time.sleep(120)", str(in_use)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "mapped"
        reaper.close()
        child.wait(timeout=30)
        reaper.watchdog.wait(timeout=30)
        assert not orphan.exists()
        assert in_use.exists() and old.exists()
    finally:
        holder.kill()
        holder.wait()
