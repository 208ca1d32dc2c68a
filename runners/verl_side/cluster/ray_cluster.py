"""Launching onto an existing Ray cluster (``backend.ray_address``): the address verl's driver joins, and the
check, before anything runs, that the cluster holds the launch's placement.

``backend.ray_address`` null (the default): verl's driver starts a Ray of its own on this node, and is told so
explicitly (``ray_init.address=local``, :data:`OWN_RAY`), so that a cluster a user started on the same machine
(``ray start``, which leaves its address in Ray's temporary folder) or a ``RAY_ADDRESS`` in the environment is
never joined silently. ``backend.ray_address=HOST:PORT`` (a Ray head's GCS address, as ``ray start --head``
prints it): the driver joins that cluster (``ray_init.address``), and the cluster's nodes bring their own GPUs,
CPUs and environment (every node must run the same virtual environment, with this project importable).

verl places its pools with one placement group per node of a pool, each ``STRICT_PACK`` (all its bundles on one
Ray node; ``verl/single_controller/ray/base.py``, ``RayResourcePool.get_placement_groups``): the trainer as
``backend.placement.nnodes`` groups of ``trainer_gpus_per_node`` GPUs; each vLLM replica of the standalone
rollout as one group of ``rollout_tensor_parallel`` GPUs (a replica larger than a node: one group of
``rollout_gpus_per_node`` per node it spans; :func:`placement_groups`). verl itself checks only the cluster's total of GPUs, and a group no node can
hold waits forever in ``pg.ready()``. :func:`check` asks the cluster (:func:`probe`, a short Ray driver in a
subprocess) for its live nodes and their GPUs and refuses, in one ``config error`` line, a placement its nodes
cannot hold (:func:`unplaced`: every group on one node with that many GPUs free, first-fit, largest first).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

from omegaconf import DictConfig, OmegaConf

from runners.config.config_error import ConfigError

#: ``ray.init``'s address for "start a new local Ray, whatever RAY_ADDRESS or a running cluster says".
OWN_RAY = "local"
KEY = "backend.ray_address"
#: The ``ray.init`` arguments Ray refuses when a driver joins an existing cluster (the nodes declare them).
LOCAL_ONLY_INIT_KEYS = ("num_cpus", "num_gpus", "include_dashboard")
PROBE_TIMEOUT_S = 120


@dataclasses.dataclass(frozen=True)
class Node:
    """One live node of a Ray cluster: its address and its GPUs (total, and free now)."""

    address: str
    gpus: float
    free_gpus: float


@dataclasses.dataclass(frozen=True)
class Group:
    """GPUs that verl places on one Ray node together (one ``STRICT_PACK`` placement group)."""

    what: str
    gpus: int


def address(cfg: DictConfig) -> str | None:
    """``backend.ray_address``, or None (verl starts its own Ray)."""
    value = OmegaConf.select(cfg, KEY, default=None)
    return None if value in (None, "") else str(value)


def init_address(cfg: DictConfig) -> str:
    """The ``ray_kwargs.ray_init.address`` verl's driver gets: the cluster's, or :data:`OWN_RAY`."""
    return address(cfg) or OWN_RAY


def placement_groups(cfg: DictConfig) -> list[Group]:
    """The groups verl places (the module docstring): the trainer's nodes, then each rollout replica's."""
    p = cfg.backend.placement
    if p.shared_gpu:  # one GPU, shared: Ray is told of two on one node
        return [Group("the shared GPU (trainer + vLLM)", int(p.trainer_gpus_per_node) + int(p.rollout_gpus_per_node))]
    trainer = [Group(f"trainer node {n + 1} of {p.nnodes}", int(p.trainer_gpus_per_node)) for n in range(int(p.nnodes))]
    tp, per_node = int(p.rollout_tensor_parallel), int(p.rollout_gpus_per_node)
    # a replica spans tp GPUs: within one node where tp <= the rollout GPUs per node, else across whole nodes
    if tp <= per_node:
        replicas = int(p.rollout_nnodes) * per_node // tp
        rollout = [Group(f"vLLM replica {r + 1} of {replicas}", tp) for r in range(replicas)]
    else:
        rollout = [Group(f"rollout node {n + 1} of {p.rollout_nnodes}", per_node) for n in range(int(p.rollout_nnodes))]
    return trainer + rollout


def unplaced(groups: list[Group], nodes: list[Node]) -> list[Group]:
    """The groups that find no node (first-fit, largest group first, on the nodes' free GPUs); [] where all fit."""
    free = sorted((n.free_gpus for n in nodes), reverse=True)
    left = []
    for group in sorted(groups, key=lambda g: -g.gpus):
        for i, gpus in enumerate(free):
            if gpus >= group.gpus:
                free[i] -= group.gpus
                break
        else:
            left.append(group)
    return left


_PROBE = """
import json, sys
import ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False, configure_logging=False)
free = ray._private.state.available_resources_per_node()
nodes = [{"address": n["NodeManagerAddress"], "gpus": n["Resources"].get("GPU", 0.0),
          "free_gpus": free.get(n["NodeID"], {}).get("GPU", 0.0)} for n in ray.nodes() if n["Alive"]]
print("NODES " + json.dumps(nodes))
"""


def probe(ray_address: str, timeout_s: float = PROBE_TIMEOUT_S) -> list[Node]:
    """The live nodes of the cluster at ``ray_address``, asked by a Ray driver in a subprocess (this process never
    joins the cluster); ``ConfigError`` naming the address where no cluster answers."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    try:
        out = subprocess.run([sys.executable, "-c", _PROBE, ray_address], capture_output=True, text=True, env=env,
                             timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"{KEY}={ray_address}: no Ray cluster answered within {timeout_s:g} s; start one "
                          "(docs/multinode.md) or leave the key null to start a Ray of the launch's own") from None
    lines = [line for line in out.stdout.splitlines() if line.startswith("NODES ")]
    if out.returncode or not lines:
        why = next((line for line in reversed(out.stderr.strip().splitlines()) if line.strip()), "no answer")
        raise ConfigError(f"{KEY}={ray_address}: no Ray cluster can be joined there ({why.strip()}); start one "
                          "(docs/multinode.md) or leave the key null to start a Ray of the launch's own")
    return [Node(str(n["address"]), float(n["gpus"]), float(n["free_gpus"])) for n in json.loads(lines[-1][6:])]


def refusal(cfg: DictConfig, nodes: list[Node]) -> str | None:
    """The config error's text where ``nodes`` cannot hold the launch's placement, else None."""
    groups = placement_groups(cfg)
    left = unplaced(groups, nodes)
    if not left:
        return None
    p = cfg.backend.placement
    asked = ", ".join(f"{g.what}: {g.gpus} GPU" for g in groups)
    have = ", ".join(f"{n.address} {n.free_gpus:g} of {n.gpus:g} GPUs free" for n in nodes) or "no live node"
    return (f"{KEY}={address(cfg)}: the cluster cannot hold backend.placement (nnodes={p.nnodes} x "
            f"trainer_gpus_per_node={p.trainer_gpus_per_node}, rollout_nnodes={p.rollout_nnodes} x "
            f"rollout_gpus_per_node={p.rollout_gpus_per_node}, rollout_tensor_parallel={p.rollout_tensor_parallel}): "
            f"verl places each of [{asked}] on one node, and {', '.join(g.what for g in left)} finds no node with "
            f"that many GPUs free among its {len(nodes)} live node(s) [{have}]; add nodes (ray start "
            f"--address={address(cfg)} on each) or make the placement smaller")


def check(cfg: DictConfig) -> None:
    """Where ``backend.ray_address`` is set: the cluster answers and holds the placement (``ConfigError``)."""
    ray_address = address(cfg)
    if ray_address is None:
        return
    if (why := refusal(cfg, probe(ray_address))) is not None:
        raise ConfigError(why)
