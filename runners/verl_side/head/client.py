"""The separate_async trainer's rollout client, with the head of every resumed segment kept.

verl 0.9.1's ``FullyAsyncLLMServerClient.generate`` resumes a request aborted by a weight sync
(prompt + tokens so far) until it completes, and rebuilds the response from the segments' tokens,
log-probs and routing only: every other extra field of the server is dropped. Its segments come
from ``super().generate`` (verl's plain ``LLMServerClient``), so :class:`HeadLLMServerClient` puts
:class:`_SegmentHeads` between the two in the method resolution order: each segment's head is
collected there, and joined onto the rebuilt response (:func:`runners.verl_side.head.head_layout.concatenate`).
Nothing of verl's is copied; the collection is a per-call context variable, so concurrent requests
on one client (one asyncio task each) never mix.
"""

from __future__ import annotations

import contextvars
from typing import Any

from verl.workers.rollout.llm_server import FullyAsyncLLMServerClient, LLMServerClient
from verl.workers.rollout.replica import TokenOutput

from runners.verl_side.head import REQUEST_KEY, TOKEN_IDS, TOKEN_LOG_PROBS
from runners.verl_side.head.head_layout import concatenate

#: The segments of the request being generated in this task: ``[(ids, log_probs, tokens), ...]``.
_SEGMENTS: contextvars.ContextVar[list | None] = contextvars.ContextVar("sc_ablations_head_segments", default=None)


def requested_k(sampling_params: dict[str, Any]) -> int:
    """The head size a request asks for (0: none)."""
    return int((sampling_params.get("extra_args") or {}).get(REQUEST_KEY) or 0)


class _SegmentHeads(LLMServerClient):
    """One server call (one segment of a partial rollout): its head is recorded, not returned."""

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs: Any) -> TokenOutput:
        output = await super().generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params, **kwargs)
        segments = _SEGMENTS.get()
        if segments is not None:
            fields = output.extra_fields
            if TOKEN_IDS not in fields:
                raise RuntimeError(f"the rollout server returned no sampler head ({TOKEN_IDS}) for a request that "
                                   f"asked for one (extra_args.{REQUEST_KEY}); is it the project's head server?")
            segments.append((fields.pop(TOKEN_IDS), fields.pop(TOKEN_LOG_PROBS), len(output.token_ids)))
        return output


class HeadLLMServerClient(FullyAsyncLLMServerClient, _SegmentHeads):
    """``FullyAsyncLLMServerClient`` whose responses carry the head of all their segments (where asked)."""

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs: Any) -> TokenOutput:
        k = requested_k(sampling_params)
        if not k:
            return await super().generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params, **kwargs)
        segments: list = []
        token = _SEGMENTS.set(segments)
        try:
            output = await super().generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params,
                                            **kwargs)
        finally:
            _SEGMENTS.reset(token)
        ids, log_probs = concatenate(segments, k)
        if len(ids) != len(output.token_ids):
            raise RuntimeError(f"request {request_id}: {len(ids)} head rows for {len(output.token_ids)} tokens")
        output.extra_fields[TOKEN_IDS], output.extra_fields[TOKEN_LOG_PROBS] = ids, log_probs
        return output

    @classmethod
    def of(cls, client: FullyAsyncLLMServerClient) -> HeadLLMServerClient:
        """The same client (its load balancer, its config) with the head kept: this class adds no state."""
        if type(client) is not FullyAsyncLLMServerClient:
            raise TypeError(f"the project as head carrier wraps verl's FullyAsyncLLMServerClient, got "
                            f"{type(client).__qualname__}: the separate_async trainer's client changed")
        head = cls.__new__(cls)
        head.__dict__.update(vars(client))
        return head
