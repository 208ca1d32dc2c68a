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
import sys
from collections.abc import Iterator
from pathlib import Path

from runners.verl_side.cluster.slurm_ray import head_ports, node_port_args, ray_start, stop_node

LOOPBACK = "127.0.0.1"


@dataclasses.dataclass(frozen=True)
class Cluster:
    address: str  # the head's GCS address, for backend.ray_address
    env: dict[str, str]  # what a driver (the launcher) needs to join: the token
    temp_dir: Path


class NodesOutlived(RuntimeError):
    """Processes of the cluster still alive after SIGKILL (raised as the block ends)."""


#: Starts of the two nodes tried before the fixture fails: the ports are picked free, then released for ``ray
#: start`` to bind, so a process elsewhere on the machine (the other test worker's Ray, an outgoing connection in
#: the ephemeral range) can take one in between; a second start, on fresh ports, is reported on stderr.
START_TRIES = 2


def _start_nodes(temp_dir: Path, head_gpus: int, worker_gpus: int, common: list[str], env: dict[str, str]) -> int:
    """Start the head and the worker node (task 1's ports, as a job's: :func:`head_ports`); the head's port."""
    ports = head_ports()
    ray_start(["--head", f"--port={ports.port}", f"--temp-dir={temp_dir}", "--include-dashboard=false",
               f"--num-gpus={head_gpus}", *common, *ports.args], env)
    ray_start([f"--address={LOOPBACK}:{ports.port}", f"--num-gpus={worker_gpus}", *common,
               *node_port_args(ports.window + 1)], env)
    return ports.port


@contextlib.contextmanager
def two_node_cluster(temp_dir: Path, head_gpus: int, worker_gpus: int, cpus: int = 8) -> Iterator[Cluster]:
    """Two Ray nodes on this machine (the module docstring); ``temp_dir`` is made and must be short (Ray puts
    Unix sockets in it). A failed start raises ``RuntimeError`` naming ``ray start``'s error; processes that
    outlive the stop raise :class:`NodesOutlived`."""
    temp_dir.mkdir(parents=True, exist_ok=True)
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH")}
    # the node's processes carry the temporary folder in their environment, so that stop_node() finds them all
    env.update(auth, SC_TEST_RAY_CLUSTER=str(temp_dir))
    common = [f"--node-ip-address={LOOPBACK}", "--disable-usage-stats", f"--num-cpus={cpus}"]
    try:
        for attempt in range(1, START_TRIES + 1):
            try:
                port = _start_nodes(temp_dir, head_gpus, worker_gpus, common, env)
                break
            except RuntimeError as err:
                if left := stop_node(temp_dir):
                    raise NodesOutlived(f"Ray processes of {temp_dir} outlived SIGKILL: {sorted(left)}") from err
                if attempt == START_TRIES:
                    raise
                print(f"two_node_cluster: start {attempt} of {START_TRIES} failed, trying fresh ports: {err}",
                      file=sys.stderr)
        yield Cluster(f"{LOOPBACK}:{port}", auth, temp_dir)
    finally:
        left = stop_node(temp_dir)
        if left:
            raise NodesOutlived(f"Ray processes of {temp_dir} outlived SIGKILL: {sorted(left)}")
