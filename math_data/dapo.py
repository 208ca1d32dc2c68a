"""DAPO-Math-17k (``open-r1/DAPO-Math-17k-Processed``, config ``all``) to verl train parquet.

Source schema (open-r1's processed release): ``prompt`` (the problem, str), ``solution`` (the
answer, str), ``data_source``, ``source_prompt`` (DAPO's original chat messages, instruction
included), ``ability``, ``reward_model`` ``{"ground_truth", "style"}``, ``extra_info``
``{"index"}``. The user message is ``source_prompt``'s user turn when present (DAPO's published
prompt), else ``prompt`` wrapped in the same instruction; the answer is
``reward_model.ground_truth``, else ``solution``. Prompts whose rendered length exceeds
``max_prompt_length`` are dropped and counted (reference: 17,398 rows -> 17,390 at 1,024 tokens).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from math_data.overlap import normalise
from math_data.prompting import (
    has_instruction,
    prompt_token_count,
    strip_instruction,
    user_messages,
    wrap_problem,
)
from math_data.sources import DataPrepError

TRAIN_DATA_SOURCE = "math_dapo"
#: How many skipped/dropped rows a report lists individually (all are counted).
REPORT_LIST_LIMIT = 100


def _user_turn(messages: Any) -> str | None:
    if not isinstance(messages, list):
        return None
    for m in messages:
        if isinstance(m, dict) and m.get("role") == "user" and isinstance(m.get("content"), str):
            return m["content"] if m["content"].strip() else None
    return None


def parse_train_row(row: dict[str, Any]) -> tuple[str, str, str] | str:
    """``(user message, bare problem, answer)`` of one source row, or the reason it is unusable."""
    content = _user_turn(row.get("source_prompt"))
    prompt = row.get("prompt")
    if content is None:
        if isinstance(prompt, list):  # upstream DAPO layout: ``prompt`` holds the messages
            content = _user_turn(prompt)
        elif isinstance(prompt, str) and prompt.strip():
            content = prompt.strip() if has_instruction(prompt) else wrap_problem(prompt)
    if content is None:
        return "no problem text (source_prompt/prompt empty or not a chat message list)"
    problem = prompt.strip() if isinstance(prompt, str) and prompt.strip() else strip_instruction(content)
    problem = strip_instruction(problem)

    answer = None
    reward_model = row.get("reward_model")
    if isinstance(reward_model, dict) and reward_model.get("ground_truth") not in (None, ""):
        answer = reward_model["ground_truth"]
    elif row.get("solution") not in (None, ""):
        answer = row["solution"]
    if answer is None or not str(answer).strip():
        return "no answer (reward_model.ground_truth and solution empty)"
    return content, problem, str(answer).strip()


def _check_columns(rows: list[dict[str, Any]]) -> None:
    columns = set().union(*(r.keys() for r in rows)) if rows else set()
    if not rows:
        raise DataPrepError("train source has no rows")
    if not columns & {"prompt", "source_prompt"}:
        raise DataPrepError(
            f"train source lacks a problem column (prompt or source_prompt); has {sorted(columns)}"
        )
    if not columns & {"reward_model", "solution"}:
        raise DataPrepError(
            f"train source lacks an answer column (reward_model or solution); has {sorted(columns)}"
        )


def prepare_train(
    rows: list[dict[str, Any]], tokenizer: Any, *, max_prompt_length: int = 1024
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """verl rows for training and a report of what was read, kept, dropped and skipped."""
    _check_columns(rows)
    out: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    dropped: list[dict[str, Any]] = []
    lengths: list[int] = []
    seen: Counter[str] = Counter()
    for i, row in enumerate(rows):
        parsed = parse_train_row(row)
        if isinstance(parsed, str):
            skipped.append({"row": i, "reason": parsed})
            continue
        content, problem, answer = parsed
        messages = user_messages(content)
        n_tokens = prompt_token_count(tokenizer, messages)
        problem_id = f"dapo-{i:05d}"
        if n_tokens > max_prompt_length:
            dropped.append({"row": i, "problem_id": problem_id, "prompt_tokens": n_tokens})
            continue
        source_info = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
        seen[normalise(problem)] += 1
        lengths.append(n_tokens)
        out.append(
            {
                "data_source": TRAIN_DATA_SOURCE,
                "prompt": messages,
                "ability": str(row.get("ability") or "MATH"),
                "reward_model": {"style": "rule", "ground_truth": answer},
                "extra_info": {
                    "index": len(out),
                    "problem_id": problem_id,
                    "source_id": str(source_info.get("index", i)),
                    "problem": problem,
                    "prompt_tokens": n_tokens,
                    "split": "train",
                },
            }
        )
    if not out:
        raise DataPrepError(f"no train rows left ({len(skipped)} malformed, {len(dropped)} over length)")
    report = {
        "data_source": TRAIN_DATA_SOURCE,
        "rows_read": len(rows),
        "kept": len(out),
        "dropped_over_length": len(dropped),
        "skipped_malformed": len(skipped),
        "max_prompt_length": max_prompt_length,
        "prompt_tokens": {"min": min(lengths), "max": max(lengths), "mean": sum(lengths) / len(lengths)},
        "duplicate_problems": sum(c - 1 for c in seen.values() if c > 1),
        "dropped": dropped[:REPORT_LIST_LIMIT],
        "skipped": skipped[:REPORT_LIST_LIMIT],
    }
    return out, report
