"""What the project's vLLM server piece does with vLLM's objects, without importing vLLM (tested on a CPU).

On a request whose ``SamplingParams.extra_args`` carry :data:`~runners.verl_side.head.REQUEST_KEY` = k,
:func:`ask_for_head` asks vLLM (0.29-0.33; written against the pinned 0.31.0) for ``logprobs=k`` in
its flat form (``flat_logprobs=True``: plain lists, exactly ``k + 1`` entries per position, the
sampled token first, then the top k in rank order, vLLM PR #28914) and, where the request has no
stop strings, without detokenising the k ids of every position (``detokenize=False``). The log-probs
are what verl's ``logprobs_mode=processed_logprobs`` makes them: after temperature.

:class:`HeadCapturingEngine` wraps vLLM's ``AsyncLLM``: on the last output of such a request it
takes the head out as arrays (:func:`split_flat`) and leaves, for verl's server code, a container
with only the sampled token per position (:func:`sampled_only`), so verl never builds k + 1 Python
objects per token. The server (:mod:`runners.verl_side.head.vllm_server`) then attaches the head to the
request's ``TokenOutput.extra_fields``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import numpy as np

from runners.verl_side.head import REQUEST_KEY
from runners.verl_side.head.head_layout import ID_DTYPE, LOG_PROB_DTYPE, as_head, empty
from runners.verl_side.logits_processor import head_file, sampled_file


def requested_k(sampling_params: Any) -> int:
    """k of a vLLM ``SamplingParams`` (or a verl sampling-params dict) that asks for the head, else 0."""
    extra = sampling_params.get("extra_args") if isinstance(sampling_params, dict) else sampling_params.extra_args
    return int((extra or {}).get(REQUEST_KEY) or 0)


def ask_for_head(sampling_params: Any, k: int) -> Any:
    """A copy of vLLM ``SamplingParams`` that returns the top-``k`` log-probs of every generated token, flat."""
    params = sampling_params.clone()
    params.logprobs = k
    params.flat_logprobs = True
    if not params.stop:  # vLLM refuses stop strings without detokenisation
        params.detokenize = False
    return params


def split_flat(logprobs: Any, token_ids: list[int], k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(sampled log-probs (n,), head ids (n, k), head log-probs (n, k))`` of vLLM ``FlatLogprobs``.

    Raises if a position does not hold exactly ``k + 1`` entries or its first entry is not the
    sampled token (the layout this relies on).
    """
    n = len(token_ids)
    if n == 0:
        ids, lps = empty(k)
        return np.zeros(0, LOG_PROB_DTYPE), ids, lps
    starts, ends = np.asarray(logprobs.start_indices), np.asarray(logprobs.end_indices)
    if len(starts) != n or not np.all(ends - starts == k + 1) or not np.all(starts == np.arange(n) * (k + 1)):
        raise ValueError(f"vLLM's flat log-probs do not hold k + 1 = {k + 1} entries for each of the {n} tokens "
                         f"(entries per position: {sorted(set((ends - starts).tolist()))})")
    ids = np.asarray(logprobs.token_ids, np.int64).reshape(n, k + 1)
    values = np.asarray(logprobs.logprobs, LOG_PROB_DTYPE).reshape(n, k + 1)
    if not np.array_equal(ids[:, 0], np.asarray(token_ids, np.int64)):
        raise ValueError("vLLM's flat log-probs do not start each position with the sampled token")
    head_ids, head_lps = as_head(ids[:, 1:].astype(ID_DTYPE), values[:, 1:], k)
    return values[:, 0].copy(), head_ids, head_lps


def sampled_only(token_ids: list[int], sampled: np.ndarray, logprob_cls: type) -> list[dict[int, Any]]:
    """vLLM's dict form with only the sampled token per position: what verl's server reads."""
    return [{int(t): logprob_cls(logprob=float(lp))} for t, lp in zip(token_ids, sampled, strict=True)]


class HeadCapturingEngine:
    """vLLM's ``AsyncLLM`` (``engine``), capturing the head of requests that ask for it (everything else
    is the engine's own). ``logprob_cls`` is vLLM's ``Logprob``.

    Two transports of the head: without ``head_files`` the request asks vLLM for its flat top-k log-probs
    (:func:`ask_for_head`); with ``head_files`` (a folder; the engine runs the project's logits processor,
    :mod:`runners.verl_side.logits_processor.writer`) the request names a file there and the head is read from the
    file. With ``sampled_by_processor`` (head files needed) every request that asks for the sampled token's
    log-prob (``logprobs=0``, verl's ask), with or without a head, asks vLLM for none and names a sampled
    log-prob file (:mod:`runners.verl_side.logits_processor.sampled_file`); its last output then carries those log-probs in
    vLLM's dict form (:func:`sampled_only`), where verl's server reads them. Without it the request keeps
    ``logprobs=0`` and the head's rows are checked against vLLM's sampled log-probs."""

    def __init__(self, engine: Any, logprob_cls: type, head_files: str | None = None,
                 sampled_by_processor: bool = False) -> None:
        if sampled_by_processor and head_files is None:
            raise ValueError("the sampled log-probs by the logits processor need its files (head_files)")
        self._engine = engine
        self._logprob_cls = logprob_cls
        self._head_files = head_files
        self._sampled_by_processor = sampled_by_processor
        self._heads: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def _capture(self, output: Any, request_id: str, k: int) -> None:
        if request_id in self._heads or not output.outputs:
            return
        completion = output.outputs[0]
        token_ids = list(completion.token_ids)
        sampled, ids, lps = split_flat(completion.logprobs, token_ids, k)
        self._heads[request_id] = (ids, lps)
        completion.logprobs = sampled_only(token_ids, sampled, self._logprob_cls)

    async def _take_files(self, output: Any, request_id: str, k: int, path: str, sampled_path: str | None) -> None:
        if request_id in self._heads:
            return
        completion = output.outputs[0] if output is not None and output.outputs else None
        token_ids = list(completion.token_ids) if completion is not None else []
        if not token_ids:
            self._heads[request_id] = empty(k)
            return
        sampled = None
        if sampled_path is not None:
            values = await sampled_file.take_sampled(sampled_path, len(token_ids))
            completion.logprobs = sampled_only(token_ids, values, self._logprob_cls)
            sampled = values.tolist()
        elif completion.logprobs:  # verl's logprobs=0: the sampled token's log-prob, to check the rows' alignment
            sampled = [position[t].logprob for t, position in zip(token_ids, completion.logprobs, strict=True)]
        ids, lps = head_file.take(path, len(token_ids), k) if k else empty(0)
        if k and sampled is not None:
            head_file.check_aligned(ids, lps, token_ids, sampled)
        self._heads[request_id] = (ids, lps)  # a request without a head: a mark that its files are taken

    def _by_file(self, sampling_params: Any, request_id: str, k: int, by_processor: bool) -> tuple[Any, str, str | None]:
        """The request's params naming its files, the head file's path and the sampled file's (None unless
        ``by_processor``)."""
        params = sampling_params.clone()
        path = f"{self._head_files}/{request_id}.head"
        extra = dict(params.extra_args or {})
        if k:
            extra[head_file.FILE_KEY], extra[head_file.K_KEY] = path, k
        sampled_path = None
        if by_processor:
            sampled_path = f"{self._head_files}/{request_id}.sampled"
            extra[sampled_file.SAMPLED_FILE_KEY] = sampled_path
            params.logprobs = None
        params.extra_args = extra
        return params, path, sampled_path

    async def generate(self, prompt: Any, sampling_params: Any, request_id: str, **kwargs: Any) -> AsyncIterator[Any]:
        k = requested_k(sampling_params)
        by_processor = self._sampled_by_processor and sampling_params.logprobs == 0
        if not k and not by_processor:
            async for output in self._engine.generate(prompt, sampling_params, request_id, **kwargs):
                yield output
            return
        if self._head_files is not None:
            params, path, sampled_path = self._by_file(sampling_params, request_id, k, by_processor)
            last = None
            try:
                async for output in self._engine.generate(prompt, params, request_id, **kwargs):
                    last = output
                    if output.finished:
                        await self._take_files(output, request_id, k, path, sampled_path)
                    yield output
                await self._take_files(last, request_id, k, path, sampled_path)  # an abort: its tokens so far
            finally:
                head_file.discard(path)
                if sampled_path is not None:
                    head_file.discard(sampled_path)
                if not k:  # no head for the server to pop
                    self._heads.pop(request_id, None)
            return
        last = None
        async for output in self._engine.generate(prompt, ask_for_head(sampling_params, k), request_id, **kwargs):
            last = output
            if output.finished:
                self._capture(output, request_id, k)
            yield output
        if last is not None:  # a stream that ended without a finished output (an abort): its tokens so far
            self._capture(last, request_id, k)

    def pop_head(self, request_id: str, tokens: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The head of a finished request (``tokens`` rows); a request that generated nothing has an empty one."""
        head = self._heads.pop(request_id, None)
        if head is None:
            if tokens:
                raise RuntimeError(f"vLLM request {request_id} generated {tokens} tokens but no head was captured")
            return empty(k)
        if len(head[0]) != tokens:
            raise RuntimeError(f"vLLM request {request_id}: head of {len(head[0])} rows for {tokens} tokens")
        return head
