"""The verl side: each arm as verl V1 ``separate_async`` (FSDP2 trainer + vLLM rollout on Ray).

The sub-packages, lowest first (each imports only those before it; docs/architecture.md):

* :mod:`~runners.verl.revisions` -- facts about each supported verl release (keys, slots, defects, the installed one);
* :mod:`~runners.verl.head` -- the sampler's top-k head carried through verl 0.9.1's slots (SC arms);
* :mod:`~runners.verl.platform` -- where the launch runs: a GPU (adds nothing) or the CPU rehearsal
  (:mod:`~runners.verl.platform.rehearsal`, with vLLM's CPU build in its ``vllm_cpu``);
* :mod:`~runners.verl.backend` -- the verl bridge: config -> overrides, dry run, launch, ingestion, checkpoints.

This module imports nothing.
"""
