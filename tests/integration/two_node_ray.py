"""A test helper (not a test): a Ray cluster of two nodes on this machine, each with its logical GPUs.

:func:`two_node_cluster` runs ``ray start --head`` and ``ray start --address=<head>`` (the commands of
docs/multinode.md, "Two nodes on one machine") with a temporary folder of their own (never Ray's default
``/tmp/ray``, whose address file a ``ray.init()`` elsewhere on the machine would find and join), every port
picked free on 127.0.0.1, token authentication on with a token made for this cluster and passed in the
environment (``RAY_AUTH_TOKEN``: the nodes, the launcher and every Ray worker have it; nothing is written to
``~/.ray``), and stops both nodes when the block ends, a failed test included (``ray stop`` cannot be told a
temporary folder, so each node's processes are stopped by the process ids Ray wrote into its session).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

LOOPBACK = "127.0.0.1"


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on the loopback interface now."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind((LOOPBACK, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclasses.dataclass(frozen=True)
class Cluster:
    address: str  # the head's GCS address, for backend.ray_address
    env: dict[str, str]  # what a driver (the launcher) needs to join: the token
    temp_dir: Path


def _node_ports() -> list[str]:
    ports = free_ports(7)
    low = ports[-1] % 20000 + 30000  # a worker port range of its own (Ray needs a range, not one port)
    names = ("--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
             "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port")
    return [*(f"{n}={p}" for n, p in zip(names, ports, strict=False)),
            f"--min-worker-port={low}", f"--max-worker-port={low + 200}"]


def _ray(args: list[str], env: dict[str, str]) -> None:
    out = subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "start", *args], env=env, capture_output=True,
                         text=True, timeout=180)
    if out.returncode:
        raise RuntimeError(f"ray start {' '.join(args)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")


def _session_pids(temp_dir: Path) -> set[int]:
    """Every process that has the cluster's temporary folder on its command line or in its environment."""
    pids = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            seen = (proc / "cmdline").read_bytes() + (proc / "environ").read_bytes()
        except OSError:
            continue
        if str(temp_dir).encode() in seen:
            pids.add(int(proc.name))
    return pids


def stop(temp_dir: Path, grace_s: float = 20.0) -> set[int]:
    """SIGTERM, then SIGKILL after ``grace_s``, to the cluster's processes; returns those still alive (none)."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        for pid in _session_pids(temp_dir):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while _session_pids(temp_dir) and time.monotonic() < deadline:
            time.sleep(0.5)
    return _session_pids(temp_dir)


@contextlib.contextmanager
def two_node_cluster(temp_dir: Path, head_gpus: int, worker_gpus: int, cpus: int = 8) -> Iterator[Cluster]:
    """Two Ray nodes on this machine (the module docstring); ``temp_dir`` is made and must be short (Ray puts
    Unix sockets in it)."""
    temp_dir.mkdir(parents=True, exist_ok=True)
    (port,) = free_ports(1)
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH")}
    # the node's processes carry the temporary folder in their environment, so that stop() finds them all
    env.update(auth, SC_TEST_RAY_CLUSTER=str(temp_dir))
    common = [f"--node-ip-address={LOOPBACK}", "--disable-usage-stats", f"--num-cpus={cpus}"]
    address = f"{LOOPBACK}:{port}"
    try:
        _ray(["--head", f"--port={port}", f"--temp-dir={temp_dir}", "--include-dashboard=false",
              f"--ray-client-server-port={free_ports(1)[0]}", f"--num-gpus={head_gpus}", *common, *_node_ports()], env)
        _ray([f"--address={address}", f"--num-gpus={worker_gpus}", *common, *_node_ports()], env)
        yield Cluster(address, auth, temp_dir)
    finally:
        left = stop(temp_dir)
        if left:
            raise RuntimeError(f"Ray processes of {temp_dir} outlived SIGKILL: {sorted(left)}")
