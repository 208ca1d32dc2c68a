"""Batched autoregressive sampling for the embedded backend (left padding, KV cache).

Layout: prompts are left-padded to a common length, so every row's next token sits in the last
column. Position ids come from the attention mask (`cumsum - 1`), so a row's first real token
has position 0 whatever its padding; any forward that scores these sequences later must pass
the same position ids (`position_ids_from_mask`), or its log-probs differ from the sampler's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase


def left_pad(sequences: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack token-id lists into `(input_ids, attention_mask)`, both `(B, max_len)` int64, left-padded."""
    if not sequences:
        raise ValueError("left_pad needs at least one sequence")
    width = max(len(s) for s in sequences)
    input_ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        if seq:
            input_ids[row, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
            attention_mask[row, width - len(seq) :] = 1
    return input_ids, attention_mask


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counting real tokens only: 0 at each row's first unmasked token (pads get 0)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


@dataclass
class Decoded:
    """Raw output of :func:`decode`, prompt-major rows, one column per generated position.

    ``tokens`` holds the pad id after a row finished; ``alive[r, t]`` is True where row r really
    generated token t (its eos included); ``log_probs`` is each token's log-prob under the
    sampling distribution (``softmax(logits / temperature)``; temperature 1 for greedy) and 0 at
    padding; ``head_ids``/``head_log_probs`` are that distribution's top-k (``None`` when k = 0);
    ``finished[r]`` is True when row r emitted eos.
    """

    tokens: torch.Tensor
    log_probs: torch.Tensor
    head_ids: torch.Tensor | None
    head_log_probs: torch.Tensor | None
    alive: torch.Tensor
    finished: torch.Tensor


def _draw(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One multinomial draw per row with ``generator`` (a CPU generator draws on the CPU)."""
    if probs.device != generator.device:
        return torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(-1).to(probs.device)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def decode(
    model: PreTrainedModel,
    prompts_token_ids: list[list[int]],
    n: int,
    max_new_tokens: int,
    temperature: float,
    generator: torch.Generator,
    eos_id: int,
    pad_id: int,
    top_k: int = 0,
    logits_dtype: torch.dtype | None = None,
) -> Decoded:
    """Generate ``n`` responses per prompt with a KV cache; the loop behind :func:`sample` and the sampler.

    Each prompt is prefilled once and its cache copied to its n rows. Sampling is from
    ``softmax(logits / temperature)`` over the full vocabulary with ``generator`` (the only
    randomness: a seeded generator reproduces the samples); ``temperature == 0`` is greedy argmax.
    ``logits_dtype`` (None: as computed) rounds the logits to that dtype before the softmax.
    """
    if n < 1 or max_new_tokens < 1 or temperature < 0:
        raise ValueError(
            f"need n >= 1, max_new_tokens >= 1, temperature >= 0; got {n}, {max_new_tokens}, {temperature}"
        )
    device = next(model.parameters()).device
    input_ids, attention_mask = (t.to(device) for t in left_pad([list(p) for p in prompts_token_ids], pad_id))
    position_ids = position_ids_from_mask(attention_mask)
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                use_cache=True, logits_to_keep=1)
    past = out.past_key_values
    past.batch_repeat_interleave(n)
    logits = out.logits[:, -1, :].repeat_interleave(n, dim=0)
    attention_mask = attention_mask.repeat_interleave(n, dim=0)
    next_position = position_ids[:, -1:].repeat_interleave(n, dim=0) + 1

    rows = logits.shape[0]
    k = min(top_k, logits.shape[-1])
    finished = torch.zeros(rows, dtype=torch.bool, device=device)
    tokens, token_lp, head_ids, head_lp, alive = [], [], [], [], []
    for step in range(max_new_tokens):
        if logits_dtype is not None:
            logits = logits.to(logits_dtype)
        log_q = torch.log_softmax(logits.float() / (temperature or 1.0), dim=-1)
        token = log_q.argmax(dim=-1) if temperature == 0 else _draw(log_q.exp(), generator)
        live = ~finished
        if k:
            top_lp, top_ids = log_q.topk(k, dim=-1)
            head_ids.append(torch.where(live[:, None], top_ids, 0))
            head_lp.append(torch.where(live[:, None], top_lp, float("-inf")))
        tokens.append(torch.where(live, token, pad_id))
        token_lp.append(torch.where(live, log_q.gather(-1, token[:, None]).squeeze(-1), 0.0))
        alive.append(live)
        finished = finished | (token == eos_id)
        if bool(finished.all()) or step == max_new_tokens - 1:
            break
        attention_mask = torch.cat([attention_mask, torch.ones_like(attention_mask[:, :1])], dim=1)
        out = model(input_ids=token[:, None], attention_mask=attention_mask, position_ids=next_position,
                    past_key_values=past, use_cache=True)
        past = out.past_key_values
        logits = out.logits[:, -1, :]
        next_position = next_position + 1
    return Decoded(
        tokens=torch.stack(tokens, dim=1),
        log_probs=torch.stack(token_lp, dim=1),
        head_ids=torch.stack(head_ids, dim=1) if k else None,
        head_log_probs=torch.stack(head_lp, dim=1) if k else None,
        alive=torch.stack(alive, dim=1),
        finished=finished,
    )


def sample(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts_token_ids: list[list[int]],
    n: int,
    max_new_tokens: int,
    temperature: float,
    generator: torch.Generator,
) -> list[list[int]]:
    """Sample `n` responses per prompt; return their token ids, prompt-major.

    Output: a list of `len(prompts_token_ids) * n` lists; entry `p * n + j` is the j-th
    response to prompt p. A response stops after the eos token (`<|im_end|>`, included in its
    ids) or after `max_new_tokens` tokens (truncated: no eos). No prompt tokens and no padding:
    a response is delimited by its list length (the model may itself sample the pad id).

    Sampling is from softmax(logits / temperature) with `generator` (the only randomness, so a
    seeded generator reproduces the samples on CPU); `temperature == 0` means greedy argmax.
    There is no top-p/top-k filtering. The model's train/eval mode is left as it is.
    """
    out = decode(model, prompts_token_ids, n, max_new_tokens, temperature, generator,
                 tokenizer.eos_token_id, tokenizer.pad_token_id)
    lengths = out.alive.sum(-1).tolist()
    return [row[:length] for row, length in zip(out.tokens.tolist(), lengths, strict=True)]
