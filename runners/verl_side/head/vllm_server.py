"""verl 0.9.1's vLLM server and replica with the head captured (needs vLLM, hence a GPU machine).

:class:`HeadVLLMReplica` is verl's ``vLLMReplica`` whose server class (``server_class``, verl's slot)
is :class:`HeadVLLMServer`: verl's ``vLLMHttpServer`` whose engine is wrapped in
:class:`~runners.verl_side.head.vllm_head.HeadCapturingEngine` once verl has built it, and whose
``generate`` attaches the captured head to the ``TokenOutput`` of requests that asked for one.
:mod:`runners.verl_side.head.plugin` registers the replica under verl's rollout name ``vllm``, lazily
(this module is imported only when verl builds a vLLM replica). Not yet run on a GPU.
"""

from __future__ import annotations

from typing import Any

import ray
from verl.workers.rollout.replica import TokenOutput
from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer, vLLMReplica
from vllm.logprobs import Logprob

from runners.verl_side.head import TOKEN_IDS, TOKEN_LOG_PROBS
from runners.verl_side.head.vllm_head import HeadCapturingEngine, requested_k
from runners.verl_side.logits_processor import LOG_PROB_CUSTOM_KEY, LOG_PROBS_BY_PROCESSOR, PROCESSOR
from runners.verl_side.logits_processor.head_file import new_folder


class HeadVLLMServer(vLLMHttpServer):
    """verl's vLLM server; requests that carry the head request return the head in ``extra_fields``."""

    async def run_server(self, args: Any) -> None:
        await super().run_server(args)
        # with the head's logits processor loaded (backend.rollout_engine.head_transport=logits_processor) the
        # head travels in files, else as vLLM's flat top-k log-probs
        files = new_folder() if PROCESSOR in (getattr(args, "logits_processors", None) or []) else None
        # backend.rollout_engine.log_prob_transport=logits_processor: the sampled token's log-prob by the same
        # processor, for every request that asks for it (verl's logprobs=0), none from vLLM
        sampled = (self.config.custom or {}).get(LOG_PROB_CUSTOM_KEY) == LOG_PROBS_BY_PROCESSOR
        if sampled and files is None:
            raise RuntimeError(f"rollout.custom.{LOG_PROB_CUSTOM_KEY}={LOG_PROBS_BY_PROCESSOR} needs the engine "
                               f"argument logits_processors={PROCESSOR}, which verl did not pass to vLLM")
        self.engine = HeadCapturingEngine(self.engine, Logprob, files, sampled)  # node rank 0 owns the engine

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str, *args: Any,
                       **kwargs: Any) -> TokenOutput:
        k = requested_k(sampling_params)
        output = await super().generate(prompt_ids, sampling_params, request_id, *args, **kwargs)
        if k:
            ids, log_probs = self.engine.pop_head(request_id, len(output.token_ids), k)
            output.extra_fields[TOKEN_IDS], output.extra_fields[TOKEN_LOG_PROBS] = ids, log_probs
        return output


class HeadVLLMReplica(vLLMReplica):
    """verl's vLLM replica with :class:`HeadVLLMServer` as its server class."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.server_class = ray.remote(HeadVLLMServer)
