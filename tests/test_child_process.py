"""The watchdog of a verl attempt (runners.verl_backend.child_process.GroupReaper): once its launcher lets go
(or dies: the kernel closes the same pipe), it stops the child's process group and removes the leftovers."""

from __future__ import annotations

import os
import subprocess
import time

from runners.verl_backend.child_process import GroupReaper


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
