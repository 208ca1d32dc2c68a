"""The head taken inside vLLM's sampler by a logits processor, written to a file per request (needs vLLM).

vLLM's own top-k log-probs (:mod:`runners.verl_side.head.vllm_head`) build ``k + 1`` Python objects per
generated token in the engine and again in the front end. :class:`HeadFileWriter` is a vLLM (v1) logits
processor (``LLM(logits_processors=[HeadFileWriter])`` or the engine argument ``logits_processors``):
argmax-invariant, so vLLM's sampler calls it on the logits after temperature and before top-k/top-p, the
rows it samples from. For every batch row whose request names a head file
(``extra_args[FILE_KEY]`` and ``extra_args[K_KEY] = k``, :mod:`runners.verl_side.logits_processor.head_file`) it writes
``log_softmax(logits / T)``'s k largest entries (ids int32, log-probs float32, descending) at row ``r``
of that file, ``r`` being the number of tokens the request has generated so far; it returns the logits
unchanged. The request itself asks vLLM for ``logprobs=0`` (the sampled token's log-prob, as a plain
rollout does) or none.

Equal to vLLM's ``processed_logprobs`` where the request has no top-k / top-p (the rehearsal's and the
reference's sampling); with them vLLM's log-probs are of the truncated distribution, these of the whole.
Greedy rows are written with T = 1 (vLLM's own convention for them).

A request that names a sampled log-prob file (``extra_args[SAMPLED_FILE_KEY]``,
:mod:`runners.verl_side.logits_processor.sampled_file`; any arm, with or without a head) gets the log-prob of each token
it draws written there instead of asking vLLM for ``logprobs=0``: the processor keeps the step's
``log_softmax`` rows of such requests and, once the drawn token ``a_r`` is in the request's output list (its
next step; or its removal from the batch: finished, aborted, preempted, unscheduled), writes
``log_softmax(logits_r)[a_r]`` at ``r`` and raises the file's count. A row whose list has not grown (a
chunked prefill's discarded sample) is simply recomputed at its next step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality

from runners.verl_side.logits_processor.head_file import FILE_KEY, K_KEY, open_rows
from runners.verl_side.logits_processor.sampled_file import SAMPLED_FILE_KEY, open_sampled


@dataclass
class _Pending:
    """The log_softmax row of position ``position`` (row ``j`` of ``log_probs``), until its token is drawn."""

    log_probs: torch.Tensor
    j: int
    position: int


@dataclass
class _Row:
    output_ids: list[int]  # vLLM's live list of the request's generated tokens
    k: int = 0  # the head's size; 0: no head file
    ids: np.ndarray | None = None
    log_probs: np.ndarray | None = None
    written: np.ndarray | None = None  # the sampled file's count, shape (1,); None: no sampled file
    sampled: np.ndarray | None = None
    pending: list[_Pending] = field(default_factory=list)  # positions whose token is not in output_ids yet


def resolve(rows: list[_Row]) -> None:
    """Write the sampled log-prob of every row whose pending position's token is now in its output list (one
    gather per step's tensor: one device-to-host copy however many rows)."""
    by_tensor: dict[int, tuple[torch.Tensor, list[tuple[_Row, _Pending, int]]]] = {}
    for row in rows:
        waiting = []
        for pending in row.pending:
            token = row.output_ids[pending.position] if len(row.output_ids) > pending.position else -1
            if token < 0:  # not drawn yet, or a placeholder of vLLM's asynchronous scheduling (the id comes later)
                waiting.append(pending)
            else:
                by_tensor.setdefault(id(pending.log_probs), (pending.log_probs, []))[1].append((row, pending, token))
        row.pending = waiting
    for log_probs, hits in by_tensor.values():
        js = torch.tensor([pending.j for _, pending, _ in hits], device=log_probs.device)
        tokens = torch.tensor([token for _, _, token in hits], device=log_probs.device)
        values = log_probs[js, tokens].cpu().numpy()
        for (row, pending, _), value in zip(hits, values, strict=True):
            row.sampled[pending.position] = value
            if pending.position == int(row.written[0]):
                row.written[0] = pending.position + 1


def top_log_probs(logits: torch.Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, log_probs)``: each row's ``k`` largest entries of ``log_softmax(logits)``, descending, as
    int32 / float32 arrays, by ``torch.topk`` on a CPU as on a GPU. On one CPU thread, k = 128 of 32 rows
    (``benchmarks/head/top_log_probs.py``, 2026-12-07): 16 ms at a vocabulary of 151,936 against 24 ms for numpy's
    partial selection (``argpartition`` then a sort of the k), but 1.5 against 0.6 ms at 4,096; selecting on the
    logits and shifting the k by ``logsumexp`` is slower at every vocabulary (19 ms at 151,936: docs/rehearsal.md)."""
    return head_of(torch.log_softmax(logits, dim=-1), k)


def head_of(log_probs: torch.Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`top_log_probs` of rows that are already ``log_softmax(logits)``."""
    values, ids = log_probs.topk(k, dim=-1)
    return ids.to(torch.int32).cpu().numpy(), values.cpu().numpy()


def open_row(params, output_ids: list[int]) -> _Row | None:
    """The files a request's ``SamplingParams.extra_args`` name, opened for writing (None: it names none)."""
    extra = params.extra_args or {}
    row = _Row(output_ids)
    if extra.get(FILE_KEY) and extra.get(K_KEY):
        row.k = int(extra[K_KEY])
        row.ids, row.log_probs = open_rows(extra[FILE_KEY], row.k, int(params.max_tokens))
    if extra.get(SAMPLED_FILE_KEY):
        row.written, row.sampled = open_sampled(extra[SAMPLED_FILE_KEY], int(params.max_tokens))
    return row if row.k or row.sampled is not None else None


class HeadFileWriter(LogitsProcessor):
    """Writes the top-k of ``log_softmax(logits / T)`` of each head-requesting batch row to its request's file,
    and the drawn token's log-prob of each row that names a sampled log-prob file to that file."""

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool) -> None:
        self.rows: dict[int, _Row] = {}

    def is_argmax_invariant(self) -> bool:
        return True  # it changes no logit: vLLM calls it after temperature, in the random-sampling path

    def _drop(self, index: int) -> None:
        """A request leaves the batch (removed, or replaced by an added request: vLLM lists only the add)."""
        row = self.rows.pop(index, None)
        if row is not None:
            resolve([row])  # finished, aborted, preempted: its last drawn token is in its list by now

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        for index in batch_update.removed:
            self._drop(index)
        for index, params, _prompt, output_ids in batch_update.added:
            self._drop(index)
            if (row := open_row(params, output_ids)) is not None:
                self.rows[index] = row
        for a, b, direction in batch_update.moved:
            row_a, row_b = self.rows.pop(a, None), self.rows.pop(b, None)
            if row_a is not None:
                self.rows[b] = row_a
            if direction == MoveDirectionality.SWAP and row_b is not None:
                self.rows[a] = row_b
            elif row_b is not None:  # a move onto b replaces b's request, which has left the batch
                resolve([row_b])

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.rows:
            return logits
        resolve(list(self.rows.values()))
        indices = sorted(i for i in self.rows if i < logits.shape[0])
        if not indices:
            return logits
        rows = logits if len(indices) == logits.shape[0] else logits[indices]  # every row asks: no gather
        log_probs = torch.log_softmax(rows.float(), dim=-1)
        k = max(self.rows[i].k for i in indices)
        ids, values = head_of(log_probs, k) if k else (None, None)
        for j, index in enumerate(indices):
            row = self.rows[index]
            position = len(row.output_ids)
            if row.k and position < len(row.ids):
                row.ids[position] = ids[j, : row.k]
                row.log_probs[position] = values[j, : row.k]
            if row.sampled is not None and position < len(row.sampled):  # a recomputed position replaces its own
                row.pending = [p for p in row.pending if p.position != position] + [_Pending(log_probs, j, position)]
        return logits
