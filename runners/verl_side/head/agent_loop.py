"""The agent-loop manager of an SC arm on verl 0.9.1 (``rollout.agent.agent_loop_manager_class``).

:class:`HeadAgentLoopManager` is verl's TransferQueue manager (``AgentLoopManagerTQ``) with two changes:

* its rollout client keeps the head across resumed segments (:class:`~runners.verl_side.head.client.HeadLLMServerClient`,
  made from the trainer's own client);
* its workers (:class:`HeadAgentLoopWorker`) ask for the head on training rollouts only (never on
  validation) and, after the agent loop, store it beside the tokens: the output's ``as_dict`` (what
  verl writes into TransferQueue) gains the two per-sequence fields of
  :func:`runners.verl_side.head.head_layout.sequence_head`, which TransferQueue, verl's micro-batching and its
  data-parallel split carry as jagged ``(B, j, k)`` tensors to the trainer.

Only single-turn agent loops are carried (every response token sampled in one request); a response
with tool tokens is refused, naming why.
"""

from __future__ import annotations

from typing import Any

import ray
from verl.experimental.agent_loop import AgentLoopOutput
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ, AgentLoopWorkerTQ

from runners.verl_side.head import (
    CUSTOM_KEY,
    REQUEST_KEY,
    SEQUENCE_IDS,
    SEQUENCE_LOG_PROBS,
    TOKEN_IDS,
    TOKEN_LOG_PROBS,
)
from runners.verl_side.head.client import HeadLLMServerClient
from runners.verl_side.head.head_layout import sequence_head


def head_size(config: Any) -> int:
    """k from verl's config (``actor_rollout_ref.rollout.custom.<CUSTOM_KEY>``, written by the launcher)."""
    custom = config.actor_rollout_ref.rollout.get("custom") or {}
    k = int(custom.get(CUSTOM_KEY) or 0)
    if k < 1:
        raise ValueError(f"the head transport needs actor_rollout_ref.rollout.custom.{CUSTOM_KEY} >= 1 (the SC arm's "
                         "method.top_k); the launcher writes it for SC arms")
    return k


def with_head_request(sampling_params: dict[str, Any], k: int) -> dict[str, Any]:
    """A copy of ``sampling_params`` that asks the rollout server for the top-``k`` head."""
    extra = dict(sampling_params.get("extra_args") or {})
    extra[REQUEST_KEY] = k
    return {**sampling_params, "extra_args": extra}


class HeadAgentLoopOutput(AgentLoopOutput):
    """An agent-loop output whose ``as_dict`` lays the sampler's head over the sequence."""

    @classmethod
    def lift(cls, output: AgentLoopOutput) -> HeadAgentLoopOutput:
        """The same output, this class (the fields verl set stay the only ones set)."""
        if type(output) is not AgentLoopOutput:
            raise TypeError(f"the head transport carries verl's AgentLoopOutput, got {type(output).__qualname__}")
        return cls.model_construct(_fields_set=set(output.model_fields_set),
                                   **{name: getattr(output, name) for name in type(output).model_fields})

    def as_dict(self) -> dict[str, Any]:
        out = super().as_dict()
        extra = out["extra_fields"]
        if TOKEN_IDS not in extra:
            raise RuntimeError(f"a training rollout of an SC arm came back without the sampler's head ({TOKEN_IDS})")
        ids, log_probs = extra.pop(TOKEN_IDS), extra.pop(TOKEN_LOG_PROBS)
        mask = out["response_mask"]
        if int(mask.sum()) != len(mask):
            raise ValueError("the head transport carries single-turn rollouts only: this response has tokens the "
                             "sampler did not generate (response_mask 0), e.g. tool output")
        out[SEQUENCE_IDS], out[SEQUENCE_LOG_PROBS] = sequence_head(ids, log_probs, len(out["prompts"]), len(mask))
        return out


class HeadAgentLoopWorker(AgentLoopWorkerTQ.__ray_actor_class__):
    """verl's TransferQueue agent-loop worker that asks for, and stores, the head on training rollouts."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.head_k = head_size(self.config)

    async def _run_prompt(self, prompt: dict, sampling_params: dict, trajectory: dict, trace: bool = False) -> None:
        if not trajectory["validate"]:
            sampling_params = with_head_request(sampling_params, self.head_k)
        await super()._run_prompt(prompt, sampling_params, trajectory, trace)

    async def _agent_loop_postprocess(self, output, validate, **kwargs) -> None:
        if not validate:
            output = [HeadAgentLoopOutput.lift(o) for o in output] if isinstance(output, list) \
                else HeadAgentLoopOutput.lift(output)
        return await super()._agent_loop_postprocess(output, validate, **kwargs)


class HeadAgentLoopManager(AgentLoopManagerTQ):
    """verl's TransferQueue agent-loop manager with the head-carrying client and workers."""

    def __init__(self, config, llm_client, *args: Any, **kwargs: Any) -> None:
        head_size(config)  # fail in the driver, before any worker starts
        super().__init__(config, HeadLLMServerClient.of(llm_client), *args, **kwargs)
        self.agent_loop_workers_class = ray.remote(HeadAgentLoopWorker)
