"""A request's sampled-token log-probs in a file the logits processor writes (numpy only; the writer is
:mod:`runners.verl_side.logits_processor.writer`), so that a rollout asks vLLM for no log-probs at all.

vLLM's ``logprobs=0`` (the sampled token's log-prob, what every arm's rollout asks for) builds Python objects
per generated token in the engine and the front end. The processor sees the logits of position ``r`` before
the token is drawn and learns the drawn token ``a_r`` from the request's output list at its next step, or when
the engine removes the request from its batch (finished, aborted, preempted: vLLM takes one more, empty step
to remove a finished request, so the last token is resolved too). It writes ``log_softmax(logits_r)[a_r]``.

Layout: an int32 count ``written`` (positions ``0 .. written - 1`` are final), then ``max_tokens`` float32
log-probs; ``4 + 4 max_tokens`` bytes. The reader waits for ``written`` to reach the request's token count:
the front end may see the request's last output before the engine's removal step has written its last token.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import numpy as np

#: Where a request names its sampled log-prob file: ``SamplingParams.extra_args[SAMPLED_FILE_KEY] = path``.
SAMPLED_FILE_KEY = "sc_ablations_sampled_file"
#: ``written`` is an int32 before the log-probs.
COUNT_DTYPE, LOG_PROB_DTYPE = np.int32, np.float32
#: How long the reader waits for the engine's removal step before it calls the file incomplete.
WAIT_S = 60.0


def file_bytes(max_tokens: int) -> int:
    return np.dtype(COUNT_DTYPE).itemsize + max_tokens * np.dtype(LOG_PROB_DTYPE).itemsize


def open_sampled(path: str | os.PathLike, max_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """``(written, log_probs)``: writable views (shape ``(1,)`` and ``(max_tokens,)``) of the file at ``path``,
    created (sparse, ``written = 0``) if absent, reopened as it is if present (a preempted request resumes)."""
    if max_tokens < 1:
        raise ValueError(f"a sampled log-prob file needs max_tokens >= 1, got {max_tokens}")
    size = file_bytes(max_tokens)
    with open(path, "ab") as f:  # creates it; never truncates
        if f.tell() != size:
            f.truncate(size)
    whole = np.asarray(np.memmap(path, dtype=np.uint8, mode="r+", shape=(size,)))
    split = np.dtype(COUNT_DTYPE).itemsize
    return whole[:split].view(COUNT_DTYPE), whole[split:].view(LOG_PROB_DTYPE)


def _read(path: Path, tokens: int) -> np.ndarray | None:
    """The first ``tokens`` log-probs if all are written, else None; raises where the file is not one."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no sampled log-prob file (did the engine load the project's logits "
                                "processor?)") from None
    count = np.dtype(COUNT_DTYPE).itemsize
    rows, rest = divmod(len(raw) - count, np.dtype(LOG_PROB_DTYPE).itemsize)
    if len(raw) < count or rest or tokens > rows:
        raise ValueError(f"{path}: {len(raw)} bytes, not a sampled log-prob file with rows for {tokens} tokens")
    if int(np.frombuffer(raw, COUNT_DTYPE, count=1)[0]) < tokens:
        return None
    return np.frombuffer(raw, LOG_PROB_DTYPE, count=tokens, offset=count).copy()


async def take_sampled(path: str | os.PathLike, tokens: int, wait_s: float = WAIT_S) -> np.ndarray:
    """The sampled log-probs of a request's ``tokens`` generated tokens, once the processor has written them
    all (polled; at most ``wait_s``), read from its file, which is then removed; raises naming the file where it
    is missing, is not such a file, or stays short of ``tokens`` (the engine never removed the request)."""
    path = Path(path)
    deadline = time.monotonic() + wait_s
    while (log_probs := _read(path, tokens)) is None:
        if time.monotonic() > deadline:
            written = int(np.fromfile(path, COUNT_DTYPE, count=1)[0])
            raise RuntimeError(f"{path}: the logits processor wrote {written} of {tokens} sampled log-probs in "
                               f"{wait_s:.0f} s (vLLM never removed the request from its batch?)")
        await asyncio.sleep(0.001)
    path.unlink()
    return log_probs
