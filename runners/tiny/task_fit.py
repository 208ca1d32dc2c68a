"""Whether the rollout's lengths fit a tiny task: every prompt and every correct response (one check, for the
embedded backend and the rehearsal)."""

from __future__ import annotations

from typing import Any

from runners.config.config_error import ConfigError


def check_lengths_fit(task: Any, tokenizer: Any, max_prompt_length: int, max_response_length: int,
                      where: str = "") -> None:
    """Raise :class:`ConfigError` naming ``rollout.max_prompt_length`` when it is shorter than the task's longest
    prompt (``task.max_prompt_tokens(tokenizer)``: overlong prompts are dropped, and none may be), or
    ``rollout.max_response_length`` when it is shorter than the task's longest correct response
    (``task.max_response_tokens()``). ``where`` names the path in the message (e.g. ``" on the CPU rehearsal"``)."""
    if max_prompt_length < (longest := task.max_prompt_tokens(tokenizer)):
        raise ConfigError(f"rollout.max_prompt_length={max_prompt_length} is shorter than the longest prompt of the "
                          f"task{where} ({longest} tokens; overlong prompts are dropped, and none may be); allowed: "
                          f">= {longest}")
    if max_response_length < (need := task.max_response_tokens()):
        raise ConfigError(f"rollout.max_response_length={max_response_length} is shorter than the longest correct "
                          f"response of the task{where} ({need} tokens); allowed: >= {need}")
