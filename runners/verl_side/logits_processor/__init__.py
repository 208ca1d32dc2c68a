"""The project's vLLM logits processor and the files it writes per request (numpy and torch; the writer needs vLLM).

vLLM's per-request log-prob path builds Python objects for every generated token in the engine and again in
the front end. The processor (:mod:`~runners.verl_side.logits_processor.writer`, loaded through vLLM's public
``logits_processors`` engine argument, which verl passes from ``rollout.engine_kwargs.vllm``) sees each
request's logits before the sampler draws from them and writes what a rollout needs into files the request
names, read as arrays by the project's vLLM server (:mod:`runners.verl_side.head.vllm_head`):

==============  =============================================================================================
head file       :mod:`~runners.verl_side.logits_processor.head_file` -- an SC arm's top-k head, a row per token
                (``backend.rollout_engine.head_transport=logits_processor``)
sampled file    :mod:`~runners.verl_side.logits_processor.sampled_file` -- every arm's sampled-token
                log-probs, so the request asks vLLM for none (``backend.rollout_engine.log_prob_transport=
                logits_processor``, opt-in)
==============  =============================================================================================

This package imports nothing of the project's: the head package and the launcher import it.
"""

#: vLLM's ``logits_processors`` entry (``module:class``): where either transport above is chosen.
PROCESSOR = f"{__name__}.writer:HeadFileWriter"
#: Where the launcher switches a vLLM server to the sampled log-probs by the processor (``RolloutConfig.custom``,
#: verl's extension point; ``backend.rollout_engine.log_prob_transport``): this key, the value
#: :data:`LOG_PROBS_BY_PROCESSOR`.
LOG_PROB_CUSTOM_KEY = "sc_ablations_log_prob_transport"
LOG_PROBS_BY_PROCESSOR = "logits_processor"
#: The folder for the files of a server's requests, where set; else a new folder in ``/dev/shm``.
FILES_ENV = "SC_HEAD_FILES"
