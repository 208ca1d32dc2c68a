"""A request's head in a file the sampler writes row by row (numpy only; the writer is
:mod:`runners.verl_side.logits_processor.writer`).

The file holds ``max_tokens`` rows of ``k`` ids (int32) and then ``max_tokens`` rows of their ``k``
log-probs (float32): row ``r`` is the head of generated token ``r``, written when the sampler draws it.
``8 k max_tokens`` bytes, allocated sparse: on tmpfs only the rows written take memory. The reader
takes the first ``n`` rows (the tokens the request generated) and removes the file.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

#: The head's ids and log-probs, in a file as in transit to the trainer (:mod:`runners.verl_side.head.head_layout`).
ID_DTYPE, LOG_PROB_DTYPE = np.int32, np.float32
#: Where a request names its head file and its size: ``SamplingParams.extra_args[FILE_KEY] = path`` and
#: ``extra_args[K_KEY] = k``.
FILE_KEY, K_KEY = "sc_ablations_head_file", "sc_ablations_head_file_k"


def file_bytes(k: int, max_tokens: int) -> int:
    """The size of a head file: ids then log-probs, ``max_tokens`` rows each."""
    return max_tokens * k * (np.dtype(ID_DTYPE).itemsize + np.dtype(LOG_PROB_DTYPE).itemsize)


def open_rows(path: str | os.PathLike, k: int, max_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, log_probs)``: writable ``(max_tokens, k)`` views of the file at ``path``, created (sparse) if
    absent, reopened as it is if present (a request the engine preempted and resumes keeps its rows)."""
    if k < 1 or max_tokens < 1:
        raise ValueError(f"a head file needs k >= 1 and max_tokens >= 1, got k={k}, max_tokens={max_tokens}")
    size = file_bytes(k, max_tokens)
    with open(path, "ab") as f:  # creates it; never truncates
        if f.tell() != size:
            f.truncate(size)
    whole = np.asarray(np.memmap(path, dtype=np.uint8, mode="r+", shape=(size,)))  # a plain ndarray: cheap to index
    split = max_tokens * k * np.dtype(ID_DTYPE).itemsize
    return whole[:split].view(ID_DTYPE).reshape(max_tokens, k), whole[split:].view(LOG_PROB_DTYPE).reshape(max_tokens, k)


def take(path: str | os.PathLike, tokens: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The head of a request's ``tokens`` generated tokens as ``(tokens, k)`` arrays, read from its file
    (its rows from its size: the engine's ``max_tokens``), which is then removed; raises naming the file
    where it is missing or is not a head file of k with that many rows."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no head file (did the engine load the head's logits processor?)") from None
    rows, rest = divmod(len(raw), file_bytes(k, 1))
    if rest or not 0 <= tokens <= rows:
        raise ValueError(f"{path}: {len(raw)} bytes, not a head file of k={k} with rows for {tokens} tokens "
                         f"({file_bytes(k, 1)} bytes a row)")
    path.unlink()
    split = rows * k * np.dtype(ID_DTYPE).itemsize
    ids = np.frombuffer(raw, ID_DTYPE, count=rows * k).reshape(rows, k)[:tokens]
    log_probs = np.frombuffer(raw, LOG_PROB_DTYPE, offset=split).reshape(rows, k)[:tokens]
    return ids.copy(), log_probs.copy()


def check_aligned(ids: np.ndarray, log_probs: np.ndarray, token_ids: list[int], sampled: list[float],
                  tolerance: float = 1e-3) -> None:
    """Raise unless, wherever the sampled token ``r`` is among row ``r``'s ids, its log-prob there equals the one
    vLLM returned for it (``sampled``, the request's ``logprobs=0``) within ``tolerance``: a head a row off its
    tokens fails where the token is in both rows. (A token outside its row's k ids says nothing: a flat
    distribution, as of an untrained model, rarely puts it there.)"""
    for r, (token, value) in enumerate(zip(token_ids, sampled, strict=True)):
        hit = np.flatnonzero(ids[r] == token)
        if hit.size and abs(float(log_probs[r, hit[0]]) - value) > tolerance:
            raise RuntimeError(f"head row {r} is not the distribution token {r} was sampled from: its log-prob "
                               f"{float(log_probs[r, hit[0]]):.6f} there, {value:.6f} from vLLM")


def discard(path: str | os.PathLike) -> None:
    """Remove a head file if it is still there (a request that failed before its head was taken)."""
    Path(path).unlink(missing_ok=True)


def new_folder() -> str:
    """The folder for a server's request files: ``$SC_HEAD_FILES`` (:data:`runners.verl_side.logits_processor.FILES_ENV`,
    created if absent; whoever set it removes it) where set, else a new folder in ``/dev/shm`` (memory; the
    temporary folder where there is none) that the process removes when it exits normally."""
    import atexit
    import shutil
    import tempfile

    from runners.verl_side.logits_processor import FILES_ENV

    if folder := os.environ.get(FILES_ENV):
        Path(folder).mkdir(parents=True, exist_ok=True)
        return folder
    folder = tempfile.mkdtemp(prefix="sc-vllm-heads-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    atexit.register(shutil.rmtree, folder, True)
    return folder
