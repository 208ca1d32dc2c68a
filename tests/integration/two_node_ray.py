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
from collections.abc import Iterator
from pathlib import Path

from runners.verl_side.cluster.slurm_ray import free_ports, node_port_args, ray_start, stop_node

LOOPBACK = "127.0.0.1"


@dataclasses.dataclass(frozen=True)
class Cluster:
    address: str  # the head's GCS address, for backend.ray_address
    env: dict[str, str]  # what a driver (the launcher) needs to join: the token
    temp_dir: Path


@contextlib.contextmanager
def two_node_cluster(temp_dir: Path, head_gpus: int, worker_gpus: int, cpus: int = 8) -> Iterator[Cluster]:
    """Two Ray nodes on this machine (the module docstring); ``temp_dir`` is made and must be short (Ray puts
    Unix sockets in it)."""
    temp_dir.mkdir(parents=True, exist_ok=True)
    (port,) = free_ports(1)
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH")}
    # the node's processes carry the temporary folder in their environment, so that stop_node() finds them all
    env.update(auth, SC_TEST_RAY_CLUSTER=str(temp_dir))
    common = [f"--node-ip-address={LOOPBACK}", "--disable-usage-stats", f"--num-cpus={cpus}"]
    address = f"{LOOPBACK}:{port}"
    try:
        ray_start(["--head", f"--port={port}", f"--temp-dir={temp_dir}", "--include-dashboard=false",
              f"--ray-client-server-port={free_ports(1)[0]}", f"--num-gpus={head_gpus}", *common, *node_port_args()], env)
        ray_start([f"--address={address}", f"--num-gpus={worker_gpus}", *common, *node_port_args()], env)
        yield Cluster(address, auth, temp_dir)
    finally:
        left = stop_node(temp_dir)
        if left:
            raise RuntimeError(f"Ray processes of {temp_dir} outlived SIGKILL: {sorted(left)}")
