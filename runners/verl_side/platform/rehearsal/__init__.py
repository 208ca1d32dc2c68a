"""The CPU rehearsal: verl's V1 ``separate_async`` trainer on a CPU, its GPU-only leaves swapped
(``backend.platform=cpu``).

The launcher's side, the platform of the seam
(:class:`~runners.verl_side.platform.rehearsal.cpu_platform.RehearsalPlatform`):

* :mod:`~runners.verl_side.platform.rehearsal.swaps` -- the reference launch with exactly these stand-ins swapped in,
  each named, and the difference from the reference launch key by key;
* :mod:`~runners.verl_side.platform.rehearsal.limits` -- what its tiny model, task and rollout can hold;
* :mod:`~runners.verl_side.platform.rehearsal.assets` -- what it trains on (the tiny model of :mod:`runners.tiny`,
  generated data).

The stand-ins, inside verl's processes, all through verl's own registries (no file of verl is edited):

* :mod:`~runners.verl_side.platform.rehearsal.verl_device` -- platform ``cpu`` in verl's ``PlatformRegistry`` (device
  ``cpu``, collective backend gloo, Ray resource "GPU" = logical GPUs declared to ``ray.init``),
  and the one torch-level shim: verl asks ``init_process_group`` for ``"cpu:gloo,cpu:gloo"`` on a
  CPU, which torch rejects as a duplicate, so it becomes ``"gloo"``;
* :mod:`~runners.verl_side.platform.rehearsal.weight_sync` -- checkpoint engine ``cpu_file`` in verl's
  ``CheckpointEngineRegistry`` (trainer rank 0 writes the state dict to a file, rollout workers read it);
* :mod:`~runners.verl_side.platform.rehearsal.rollout` -- rollout ``cpu_hf`` in verl's ``RolloutReplicaRegistry``: an
  HF model on the CPU, token-in/token-out, with the sampled token's log-prob after temperature and,
  where a request asks for a head (``topk_log_probs``), the top-k ids and log-probs per generated token in the
  layout verl's vLLM server returns; on the CPU platform it is registered under verl's name ``vllm`` too, the only
  rollout verl takes a head from;
* :mod:`~runners.verl_side.platform.rehearsal.vllm_cpu` -- vLLM's CPU build instead of the stand-in
  (``backend.rehearsal_rollout=vllm``), registered under ``vllm`` by the plugin.

:mod:`~runners.verl_side.platform.rehearsal.plugin` is the ``verl.plugins`` entry point: it registers them only
when ``VERL_PLATFORM=cpu`` (what the rehearsal and the worker bench set), and does nothing otherwise.
"""

import os
from pathlib import Path

from runners.verl_side.head import CPU_PLATFORM

#: The value of ``VERL_PLATFORM`` that selects this platform (named in :mod:`runners.verl_side.head`, whose plugin
#: leaves verl's rollout name ``vllm`` to this platform's rollout).
PLATFORM = CPU_PLATFORM
#: verl registers its FSDP engine for cuda/npu device names only: the engine is looked up as "cuda".
ENGINE_DEVICE = "cuda"
#: Environment that selects the CPU platform in every verl process (driver and Ray actors).
ENVIRONMENT = {"VERL_PLATFORM": PLATFORM, "VERL_ENGINE_DEVICE": ENGINE_DEVICE}
ROLLOUT_NAME = "cpu_hf"
#: verl's rollout name that the CPU rollout also answers to on the CPU platform: the score-centering verl takes the
#: sampler's head (score centering) from ``rollout.name=vllm`` only, so the rehearsal's SC arms keep it.
HEAD_ROLLOUT_NAME = "vllm"
WEIGHT_SYNC_BACKEND = "cpu_file"
#: Which engine the CPU platform registers under verl's rollout name ``vllm``: unset, the stand-in
#: (:mod:`~runners.verl_side.platform.rehearsal.rollout`); ``vllm``, vLLM's CPU build through verl's vLLM replica
#: (:mod:`runners.verl_side.platform.rehearsal.vllm_cpu.server`). The rehearsal sets it from ``backend.rehearsal_rollout``.
ROLLOUT_ENV = "SC_ABLATIONS_CPU_ROLLOUT"
VLLM_ROLLOUT = "vllm"
#: Folder of the CPU stand-ins' files in one attempt (the launcher sets it to ``<attempt>/cpu``): the
#: weight files of ``cpu_file`` and the rollout's sync log (:data:`SYNC_LOG`).
STATE_DIR_ENV = "SC_ABLATIONS_CPU_STATE_DIR"
#: One JSON line per weight load of a rollout replica: replica, global_steps, the weights' digest.
SYNC_LOG = "rollout_syncs.jsonl"


def state_dir() -> Path:
    """The attempt's folder for the CPU stand-ins' files (``$SC_ABLATIONS_CPU_STATE_DIR``)."""
    folder = os.environ.get(STATE_DIR_ENV)
    if not folder:
        raise RuntimeError(f"the CPU platform's weight sync and rollout need ${STATE_DIR_ENV} (a folder)")
    return Path(folder)
