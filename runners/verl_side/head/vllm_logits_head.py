"""The head taken inside vLLM's sampler by a logits processor, written to a file per request (needs vLLM).

vLLM's own top-k log-probs (:mod:`runners.verl_side.head.vllm_head`) build ``k + 1`` Python objects per
generated token in the engine and again in the front end. :class:`HeadFileWriter` is a vLLM (v1) logits
processor (``LLM(logits_processors=[HeadFileWriter])`` or the engine argument ``logits_processors``):
argmax-invariant, so vLLM's sampler calls it on the logits after temperature and before top-k/top-p, the
rows it samples from. For every batch row whose request names a head file
(``extra_args[FILE_KEY]`` and ``extra_args[REQUEST_KEY] = k``, :mod:`runners.verl_side.head.head_file`) it writes
``log_softmax(logits / T)``'s k largest entries (ids int32, log-probs float32, descending) at row ``r``
of that file, ``r`` being the number of tokens the request has generated so far; it returns the logits
unchanged. The request itself asks vLLM for ``logprobs=0`` (the sampled token's log-prob, as a plain
rollout does) or none.

Equal to vLLM's ``processed_logprobs`` where the request has no top-k / top-p (the rehearsal's and the
reference's sampling); with them vLLM's log-probs are of the truncated distribution, these of the whole.
Greedy rows are written with T = 1 (vLLM's own convention for them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality

from runners.verl_side.head import REQUEST_KEY
from runners.verl_side.head.head_file import FILE_KEY, open_rows


@dataclass
class _Row:
    ids: np.ndarray
    log_probs: np.ndarray
    output_ids: list[int]  # vLLM's live list of the request's generated tokens
    k: int


def top_log_probs(logits: torch.Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, log_probs)``: each row's ``k`` largest entries of ``log_softmax(logits)``, descending, as
    int32 / float32 arrays, by ``torch.topk`` on a CPU as on a GPU. On one CPU thread, k = 128 of 32 rows
    (``benchmarks/head/top_log_probs.py``): 12 ms at a vocabulary of 151,936 against 51 ms for numpy's partial
    selection (``argpartition`` then a sort of the k), 1.3 against 1.2 ms at 4,096, faster from 8,192 up."""
    values, ids = torch.log_softmax(logits, dim=-1).topk(k, dim=-1)
    return ids.to(torch.int32).cpu().numpy(), values.cpu().numpy()


class HeadFileWriter(LogitsProcessor):
    """Writes the top-k of ``log_softmax(logits / T)`` of each head-requesting batch row to its request's file."""

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool) -> None:
        self.rows: dict[int, _Row] = {}

    def is_argmax_invariant(self) -> bool:
        return True  # it changes no logit: vLLM calls it after temperature, in the random-sampling path

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        for index in batch_update.removed:
            self.rows.pop(index, None)
        for index, params, _prompt, output_ids in batch_update.added:
            extra = params.extra_args or {}
            if extra.get(FILE_KEY) and extra.get(REQUEST_KEY):
                k = int(extra[REQUEST_KEY])
                ids, log_probs = open_rows(extra[FILE_KEY], k, int(params.max_tokens))
                self.rows[index] = _Row(ids, log_probs, output_ids, k)
            else:
                self.rows.pop(index, None)
        for a, b, direction in batch_update.moved:
            row_a, row_b = self.rows.pop(a, None), self.rows.pop(b, None)
            if row_a is not None:
                self.rows[b] = row_a
            if direction == MoveDirectionality.SWAP and row_b is not None:
                self.rows[a] = row_b

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.rows:
            return logits
        indices = sorted(i for i in self.rows if i < logits.shape[0])
        if not indices:
            return logits
        rows = logits if len(indices) == logits.shape[0] else logits[indices]  # every row asks: no gather
        ids, log_probs = top_log_probs(rows.float(), max(self.rows[i].k for i in indices))
        for j, index in enumerate(indices):
            row = self.rows[index]
            position = len(row.output_ids)
            if position < len(row.ids):
                row.ids[position] = ids[j, : row.k]
                row.log_probs[position] = log_probs[j, : row.k]
        return logits
