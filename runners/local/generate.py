"""Batched autoregressive sampling for the embedded backend (left padding, KV cache).

Layout: prompts are left-padded to a common length, so every row's next token sits in the last
column. Position ids come from the attention mask (`cumsum - 1`), so a row's first real token
has position 0 whatever its padding; any forward that scores these sequences later must pass
the same position ids (`position_ids_from_mask`), or its log-probs differ from the sampler's.
"""

from __future__ import annotations

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


@torch.no_grad()
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
    if n < 1 or max_new_tokens < 1 or temperature < 0:
        raise ValueError(
            f"need n >= 1, max_new_tokens >= 1, temperature >= 0; got {n}, {max_new_tokens}, {temperature}"
        )
    eos_id, pad_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    device = next(model.parameters()).device
    input_ids, attention_mask = (t.to(device) for t in left_pad([list(p) for p in prompts_token_ids], pad_id))
    position_ids = position_ids_from_mask(attention_mask)

    # Prefill each prompt once, then copy its KV cache, mask and positions to its n rows
    # (rows are prompt-major: prompt p owns rows p*n .. p*n+n-1).
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        use_cache=True,
        logits_to_keep=1,
    )
    past = out.past_key_values
    logits = out.logits[:, -1, :].repeat_interleave(n, dim=0)
    past.batch_repeat_interleave(n)
    attention_mask = attention_mask.repeat_interleave(n, dim=0)
    next_position = position_ids[:, -1:].repeat_interleave(n, dim=0) + 1

    finished = torch.zeros(attention_mask.shape[0], dtype=torch.bool, device=device)
    steps: list[torch.Tensor] = []
    for step in range(max_new_tokens):
        logits = logits.float()  # (rows, vocab): next-token logits of every row
        if temperature == 0:
            token = logits.argmax(dim=-1)
        else:
            probs = torch.softmax(logits / temperature, dim=-1)
            token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        token = torch.where(finished, torch.full_like(token, pad_id), token)
        steps.append(token)
        finished |= token == eos_id
        if bool(finished.all()) or step == max_new_tokens - 1:
            break
        attention_mask = torch.cat([attention_mask, torch.ones_like(attention_mask[:, :1])], dim=1)
        out = model(
            input_ids=token[:, None],
            attention_mask=attention_mask,
            position_ids=next_position,
            past_key_values=past,
            use_cache=True,
        )
        past = out.past_key_values
        logits = out.logits[:, -1, :]
        next_position = next_position + 1

    generated = torch.stack(steps, dim=1).tolist()
    responses: list[list[int]] = []
    for row in generated:
        ids: list[int] = []
        for token_id in row:
            ids.append(token_id)
            if token_id == eos_id:
                break
        responses.append(ids)
    return responses
