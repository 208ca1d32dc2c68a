"""The user message of every prompt, and its length as the policy's tokenizer sees it.

All sets use DAPO-Math-17k's own instruction (the wording its prompts were published with): the
problem between a request for step-by-step work ending in a line ``Answer: $Answer`` and a
reminder of that line. ``math_dapo`` extracts exactly that line (with a ``\\boxed{}`` fallback),
so train and eval share one answer format.

Length: the chat-template rendering with ``add_generation_prompt=True`` and
``enable_thinking=True`` (Qwen3's thinking mode), tokenised without adding special tokens —
the same number verl's ``RLHFDataset`` compares to ``data.max_prompt_length``.
"""

from __future__ import annotations

from typing import Any

INSTRUCTION_HEAD = (
    "Solve the following math problem step by step. The last line of your response should be of the "
    "form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
INSTRUCTION_TAIL = '\n\nRemember to put your answer on its own line after "Answer:".'

#: Keyword arguments of ``apply_chat_template`` for rendering (verl: ``data.apply_chat_template_kwargs``).
CHAT_TEMPLATE_KWARGS: dict[str, Any] = {"enable_thinking": True}


def wrap_problem(problem: str) -> str:
    """The DAPO user message for a bare problem statement."""
    return f"{INSTRUCTION_HEAD}{problem.strip()}{INSTRUCTION_TAIL}"


def has_instruction(text: str) -> bool:
    return text.lstrip().startswith(INSTRUCTION_HEAD.strip()) or text.rstrip().endswith(
        INSTRUCTION_TAIL.strip()
    )


def strip_instruction(text: str) -> str:
    """The bare problem inside a DAPO user message (``text`` unchanged when it has no instruction)."""
    out = text.strip()
    head, tail = INSTRUCTION_HEAD.strip(), INSTRUCTION_TAIL.strip()
    if out.startswith(head):
        out = out[len(head) :]
    if out.endswith(tail):
        out = out[: -len(tail)]
    return out.strip()


def user_messages(content: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": content}]


def load_tokenizer(name_or_path: str):
    """The model's tokenizer (a hub id or a local folder) through ``transformers.AutoTokenizer``."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name_or_path)


def prompt_token_count(tokenizer: Any, messages: list[dict[str, str]]) -> int:
    """Tokens of the chat-template-rendered prompt (generation prompt on, thinking mode)."""
    text = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False, **CHAT_TEMPLATE_KWARGS
    )
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])
