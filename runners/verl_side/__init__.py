"""The verl side: each arm as verl V1 ``separate_async`` (FSDP2 trainer + vLLM rollout on Ray).

The sub-packages, lowest first (each imports only those before it; docs/architecture.md):

* :mod:`~runners.verl_side.revisions` -- facts about each supported verl release (keys, slots, defects, the installed one);
* :mod:`~runners.verl_side.head` -- the sampler's top-k head carried through verl 0.9.1's slots (SC arms);
* :mod:`~runners.verl_side.platform` -- where the launch runs: a GPU (adds nothing) or the CPU rehearsal
  (:mod:`~runners.verl_side.platform.rehearsal`, with vLLM's CPU build in its ``vllm_cpu``);
* :mod:`~runners.verl_side.backend` -- the verl bridge: config -> overrides, dry run, launch, ingestion, checkpoints.

This module imports nothing.
"""
