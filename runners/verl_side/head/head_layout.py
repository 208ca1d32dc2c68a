"""The head's layout from the rollout server to the trainer's logits (numpy and torch only).

Per generated token the server returns ``k`` ids (int32) and their log-probs (float32), the k largest
log-probs after temperature in descending order: :data:`BYTES_PER_TOKEN_PER_ID` bytes per id, ``8 k``
per token. A partial rollout arrives in segments (one per weight version); :func:`concatenate` joins
them. :func:`sequence_head` lays a response's head over its whole sequence for the training batch:
the head of response token ``r`` is the distribution the sampler drew it from, predicted at sequence
position ``prompt_length - 1 + r``, which is where the trainer's logits for that token are; every
other row is :func:`dummy_head` (finite, mass 1, masked out by the response mask).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from runners.verl_side.logits_processor.head_file import ID_DTYPE, LOG_PROB_DTYPE  # one definition

BYTES_PER_TOKEN_PER_ID = np.dtype(ID_DTYPE).itemsize + np.dtype(LOG_PROB_DTYPE).itemsize


def bytes_per_token(k: int) -> int:
    """Bytes one generated token's head occupies in transit (ids and log-probs)."""
    return k * BYTES_PER_TOKEN_PER_ID


def empty(k: int) -> tuple[np.ndarray, np.ndarray]:
    """The head of zero tokens."""
    return np.zeros((0, k), ID_DTYPE), np.zeros((0, k), LOG_PROB_DTYPE)


def as_head(ids, log_probs, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, log_probs)`` as ``(n, k)`` arrays of the transit dtypes; raises naming what does not fit."""
    ids, log_probs = np.asarray(ids, ID_DTYPE), np.asarray(log_probs, LOG_PROB_DTYPE)
    if ids.ndim != 2 or ids.shape != log_probs.shape or ids.shape[1] != k:
        raise ValueError(f"a head of k={k} needs (tokens, {k}) ids and log-probs, got {ids.shape} and {log_probs.shape}")
    return ids, log_probs


def concatenate(segments: Sequence[tuple[np.ndarray, np.ndarray, int]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The head of a response generated in segments ``(ids, log_probs, tokens)``, each with one row per
    token of its segment; raises if a segment's rows and tokens differ."""
    for number, (ids, _, tokens) in enumerate(segments):
        if len(ids) != tokens:
            raise ValueError(f"segment {number} of a partial rollout has {len(ids)} head rows for {tokens} tokens")
    if not segments:
        return empty(k)
    return (np.concatenate([as_head(i, lp, k)[0] for i, lp, _ in segments]),
            np.concatenate([as_head(i, lp, k)[1] for i, lp, _ in segments]))


def dummy_head(rows: int, k: int, ids_dtype: torch.dtype = torch.int32, device=None
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """``rows`` uniform heads over ids ``0..k-1``: finite log-probs, head mass 1 (no tail)."""
    ids = torch.arange(k, dtype=ids_dtype, device=device).expand(rows, k).contiguous()
    return ids, torch.full((rows, k), -math.log(k), dtype=torch.float32, device=device)


def sequence_head(ids: np.ndarray, log_probs: np.ndarray, prompt_length: int, response_length: int
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(prompt_length + response_length, k)`` ids and log-probs of one sample for the training batch.

    ``ids``/``log_probs`` hold one row per generated token; the first ``response_length`` rows are
    the response's (a longer head is cut as verl cuts the response to ``rollout.response_length``).
    """
    if prompt_length < 1:
        raise ValueError(f"a sequence head needs a prompt of at least one token, got {prompt_length}")
    if len(ids) < response_length:
        raise ValueError(f"the sampler returned a head for {len(ids)} tokens but the response has {response_length}")
    k = ids.shape[1]
    out_ids, out_lp = dummy_head(prompt_length + response_length, k)
    rows = slice(prompt_length - 1, prompt_length - 1 + response_length)
    out_ids[rows] = torch.from_numpy(np.ascontiguousarray(ids[:response_length], ID_DTYPE))
    out_lp[rows] = torch.from_numpy(np.ascontiguousarray(log_probs[:response_length], LOG_PROB_DTYPE))
    return out_ids, out_lp


def packed_head(head_ids: torch.Tensor, head_log_probs: torch.Tensor, input_ids: torch.Tensor,
                response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The micro-batch's heads packed as the trainer's logits are, ``(total tokens, k)``.

    All four arguments are verl's jagged nested tensors (one sample per row). A sample whose head is
    not as long as its sequence is allowed only if it trains on nothing (verl's padding samples for
    data-parallel balance copy every unknown field from a real sample): it gets the dummy head.
    """
    seq_lengths = input_ids.offsets().diff()
    head_lengths = head_ids.offsets().diff()
    if torch.equal(seq_lengths, head_lengths):
        return head_ids.values(), head_log_probs.values()
    k = head_ids.values().shape[-1]
    ids_parts, lp_parts = [], []
    for sample, (ids, lp, mask) in enumerate(zip(head_ids.unbind(), head_log_probs.unbind(), response_mask.unbind(),
                                                 strict=True)):
        length = int(seq_lengths[sample])
        if len(ids) == length:
            ids_parts.append(ids)
            lp_parts.append(lp)
        elif int(mask.sum()) == 0:
            dummy_ids, dummy_lp = dummy_head(length, k, ids.dtype, ids.device)
            ids_parts.append(dummy_ids)
            lp_parts.append(dummy_lp.to(lp.dtype))
        else:
            raise ValueError(f"sample {sample} of the micro-batch has a sampler head of {len(ids)} rows for a "
                             f"sequence of {length} tokens: the head does not line up with the tokens it was sampled with")
    return torch.cat(ids_parts), torch.cat(lp_parts)
