"""The vLLM worker extension that loads verl's weight sync on vLLM's CPU build.

verl's ``vLLMColocateWorkerExtension.update_weights_from_ipc`` receives the trainer's weights bucket by
bucket (``BucketedWeightReceiver``: a ZMQ socket plus, without CUDA IPC, a shared-memory segment) and
hands each bucket to the model's ``load_weights``. On the CPU build that fails after the first load
(``'Parameter' object has no attribute 'weight_loader'``): the CPU model runner repacks weights into its
kernels' layout after loading. :class:`CpuWeightSyncExtension` keeps verl's receiver and its protocol,
collects every bucket (copies: the receiver reuses its buffer), and loads them once, at the end, through
vLLM's own in-place reload in checkpoint format (``model_runner.reload_weights``: layer-wise reload,
then vLLM's post-load processing), the path vLLM gives for new weights into a running engine.

verl's vLLM server names the extension class in ``_get_worker_extension_cls`` (its slot); the CPU
server of :mod:`runners.verl_side.head.vllm_server` returns :data:`EXTENSION` there. LoRA and quantized
models (verl's other branches) are not supported here and raise.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension

from runners.verl_side.platform.rehearsal.sync_log import weights_digest

#: The fully qualified name vLLM imports in its worker processes.
EXTENSION = f"{__name__}.CpuWeightSyncExtension"


class CpuWeightSyncExtension(vLLMColocateWorkerExtension):
    """verl's worker extension with weight loading through vLLM's in-place reload (CPU build)."""

    def update_weights_from_ipc(self, peft_config: dict | None = None, base_sync_done: bool = False,
                                use_shm: bool = False) -> int:
        """Receive one sync from verl's ``BucketedWeightSender`` and load it; returns the tensors loaded."""
        from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightReceiver

        if peft_config:
            raise NotImplementedError("LoRA weight sync is not supported on vLLM's CPU build")
        received: list[tuple[str, torch.Tensor]] = []

        def on_bucket(weights: list[tuple[str, torch.Tensor]], is_last: bool) -> None:
            received.extend((name, tensor.clone()) for name, tensor in weights)

        BucketedWeightReceiver(zmq_handle=self._get_zmq_handle(), device=torch.device("cpu"),
                               use_shm=use_shm).receive_weights(on_bucket_received=on_bucket)
        return self.reload_named_tensors(received)

    def reload_named_tensors(self, weights: Iterable[tuple[str, torch.Tensor]]) -> int:
        """Load ``(name, tensor)`` pairs in the trainer's (HF checkpoint) naming into the running model, and
        keep their digest for the sync log (:meth:`last_load_digest`)."""
        weights = list(weights)
        self.model_runner.reload_weights(weights_iterator=iter(weights), is_checkpoint_format=True)
        self.sc_last_load_digest = weights_digest(dict(weights))
        return len(weights)

    def last_load_digest(self) -> str | None:
        """:func:`~runners.verl_side.platform.rehearsal.sync_log.weights_digest` of the last weights loaded, None before any."""
        return getattr(self, "sc_last_load_digest", None)
