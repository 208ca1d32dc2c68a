"""The link between nodes in the capacity plan's time: FSDP's collectives and the weight sync across nodes.

A launch on one node never uses it. Where the trainer spans ``backend.placement.nnodes > 1`` nodes, every
FSDP2 collective crosses the nodes' network (a ring over all trainer ranks is as fast as its slowest hop); where
the trainer and the rollout cannot share one node (more than one trainer or rollout node), the trainer -> vLLM
weight sync crosses it too. Per trainer GPU the link carries :data:`INTERNODE_BYTES_PER_S_PER_GPU` of its
preset (``gpu.name``) unless ``backend.capacity.internode_bytes_per_s_per_gpu`` says otherwise.

**FSDP2's bytes per step and rank** (:func:`fsdp_internode_seconds`), per micro-batch (FSDP2 gathers again for
each micro-batch's forward and backward): the parameters all-gathered twice in the compute dtype (forward; the
backward, after resharding) and the gradients reduce-scattered once in fp32 (verl's ``reduce_dtype``), each
collective moving ``(D - 1) / D`` of the full tensor through every rank (ring, ``D`` trainer ranks):
``micro_batches x P x (2 x 2 + 4) x (D - 1) / D`` bytes over the per-GPU link. Counted on the trainer's side of a
step, not overlapped with compute (FSDP2 prefetches, so this is an upper end).

**The weight sync** (:func:`weight_sync_bytes_per_s`): the bf16 weights at the slower of the sync's own rate
(``backend.capacity.time.weight_sync_bytes_per_s``) and the link.

What the plan does not count: congestion from other jobs, the topology of the fabric (rails, oversubscription),
NCCL's choice of algorithm (tree across nodes), and a rollout replica whose tensor parallelism spans nodes.
"""

from __future__ import annotations

import dataclasses
import math

#: Bytes per second and GPU between nodes, per GPU preset (conf/gpu/<name>.yaml's ``name``): the node's
#: compute-fabric adapters over its GPUs, from the vendor's reference node.
INTERNODE_BYTES_PER_S_PER_GPU: dict[str, float] = {
    # NVIDIA DGX A100 datasheet: 8x single-port ConnectX-6 VPI, 200 Gb/s HDR InfiniBand (one per GPU)
    "a100_80gb": 200e9 / 8,
    # NVIDIA DGX H100 datasheet: 8x single-port ConnectX-7 VPI, 400 Gb/s NDR InfiniBand (one per GPU)
    "h100_80gb": 400e9 / 8,
    # NVIDIA DGX H200 datasheet: the same 8x ConnectX-7, 400 Gb/s (one per GPU)
    "h200_141gb": 400e9 / 8,
    # no reference node: a workstation on 25 Gb/s Ethernet, shared by its 8 GPUs (an assumption; set the key)
    "rtx4090_24gb": 25e9 / 8 / 8,
}
KEY = "backend.capacity.internode_bytes_per_s_per_gpu"
PARAM_GATHER_BYTES = 2  # bf16 parameters all-gathered (FSDP2's param_dtype)
GRAD_REDUCE_BYTES = 4  # fp32 gradients reduce-scattered (verl's reduce_dtype)


@dataclasses.dataclass(frozen=True)
class Nodes:
    """The launch's nodes and the link between them."""

    trainer_nodes: int
    rollout_nodes: int
    internode_bytes_per_s_per_gpu: float  # 0 where the preset has none and the key is unset: refused on >1 node

    @property
    def spans_nodes(self) -> bool:
        return self.trainer_nodes > 1 or self.rollout_nodes > 1


def link_of(gpu_name: str, configured: float | None) -> float:
    """The per-GPU inter-node rate: the configured one, else the preset's, else 0 (none known)."""
    if configured is not None:
        return float(configured)
    return INTERNODE_BYTES_PER_S_PER_GPU.get(gpu_name, 0.0)


def fsdp_internode_seconds(parameters: float, trainer_gpus: int, micro_batches: int, nodes: Nodes) -> float:
    """Seconds per step of FSDP2's collectives over the inter-node link (the module docstring); 0 on one node."""
    if nodes.trainer_nodes <= 1 or trainer_gpus <= 1:
        return 0.0
    ring = (trainer_gpus - 1) / trainer_gpus
    moved = max(micro_batches, 1) * parameters * (2 * PARAM_GATHER_BYTES + GRAD_REDUCE_BYTES) * ring
    return moved / nodes.internode_bytes_per_s_per_gpu


def micro_batches(sequences: int, tokens_per_sequence: float, trainer_gpus: int, tokens_per_micro_batch: int) -> int:
    """Micro-batches per rank and step: its share of the step's tokens in micro-batches of the given size."""
    return max(1, math.ceil(sequences * tokens_per_sequence / trainer_gpus / tokens_per_micro_batch))


def weight_sync_bytes_per_s(sync_rate: float, nodes: Nodes) -> float:
    """The weight sync's rate: its own, or the inter-node link's where that is slower and the launch spans nodes."""
    return min(sync_rate, nodes.internode_bytes_per_s_per_gpu) if nodes.spans_nodes else sync_rate
