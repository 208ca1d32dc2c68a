"""AIME 2024 / AIME 2025 (30 problems each) to verl eval parquet.

Default sources (the ones lighteval's ``aime24``/``aime25`` tasks read; both ``split=train``):
``HuggingFaceH4/aime_2024`` (columns ``id, problem, solution, answer, url, year``) and
``yentinglin/aime_2025`` (``problem, answer`` plus id/solution columns). No revision of them is
pinned by the reference; pass ``--revision`` to pin one, the report records what was used.
Accepted column names: problem ``problem | question | Problem``, answer ``answer | Answer``,
id ``id | ID | problem_id | problem_idx`` (optional).

``problem_id`` = ``<data_source>-<NN>``, NN the row's position in the source (stable for a pinned
source). The ground truth is the answer as a canonical integer string (``"033"`` -> ``"33"``); an
AIME answer that is not an integer in [0, 999] is an error.
"""

from __future__ import annotations

import re
from typing import Any

from math_data.prompting import prompt_token_count, user_messages, wrap_problem
from math_data.sources import DataPrepError

EVAL_SETS: dict[str, dict[str, Any]] = {
    "aime2024": {"source": "HuggingFaceH4/aime_2024", "config": None, "split": "train", "revision": None},
    "aime2025": {"source": "yentinglin/aime_2025", "config": None, "split": "train", "revision": None},
}
PROBLEM_COLUMNS = ("problem", "question", "Problem")
ANSWER_COLUMNS = ("answer", "Answer")
ID_COLUMNS = ("id", "ID", "problem_id", "problem_idx")
_DATA_SOURCE_RE = re.compile(r"^[a-z0-9_]+$")


def _column(rows: list[dict[str, Any]], candidates: tuple[str, ...], what: str, required: bool) -> str | None:
    columns = set().union(*(r.keys() for r in rows))
    for name in candidates:
        if name in columns:
            return name
    if required:
        raise DataPrepError(
            f"eval source lacks a {what} column (one of {', '.join(candidates)}); has {sorted(columns)}"
        )
    return None


def canonical_answer(value: Any) -> str | None:
    """AIME answers are integers 0..999; ``None`` when ``value`` is not one."""
    text = str(value).strip().strip("$")
    text = re.sub(r"^\\boxed\{(.*)\}$", r"\1", text).strip()
    if not re.fullmatch(r"\d{1,3}", text):
        return None
    return str(int(text))


def prepare_eval(
    rows: list[dict[str, Any]],
    data_source: str,
    tokenizer: Any,
    *,
    max_prompt_length: int = 1024,
    expected_count: int | None = 30,
    instruction: bool = True,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """verl rows of one evaluation set; any defect raises :class:`DataPrepError` naming the row.

    ``instruction=False`` makes the problem text the whole user message, for sets whose problems
    carry their own answer format (the CPU rehearsal's arithmetic, which its tokenizer covers).
    """
    if not _DATA_SOURCE_RE.match(data_source):
        raise DataPrepError(
            f"data_source {data_source!r} must be lowercase letters, digits or _ (e.g. aime2024)"
        )
    if not rows:
        raise DataPrepError(f"{data_source}: source has no rows")
    if expected_count is not None and len(rows) != expected_count:
        raise DataPrepError(f"{data_source}: {len(rows)} rows, expected {expected_count}")
    problem_col = _column(rows, PROBLEM_COLUMNS, "problem", required=True)
    answer_col = _column(rows, ANSWER_COLUMNS, "answer", required=True)
    id_col = _column(rows, ID_COLUMNS, "id", required=False)
    width = max(2, len(str(len(rows) - 1)))
    out: list[dict[str, Any]] = []
    lengths = []
    seen_problems: dict[str, int] = {}
    for i, row in enumerate(rows):
        problem = row.get(problem_col)
        if not isinstance(problem, str) or not problem.strip():
            raise DataPrepError(f"{data_source} row {i}: empty or non-text {problem_col!r}")
        if problem.strip() in seen_problems:
            raise DataPrepError(
                f"{data_source} row {i}: same problem as row {seen_problems[problem.strip()]}"
            )
        seen_problems[problem.strip()] = i
        answer = canonical_answer(row.get(answer_col))
        if answer is None:
            raise DataPrepError(
                f"{data_source} row {i}: answer {row.get(answer_col)!r} is not an AIME integer (0..999)"
            )
        messages = user_messages(wrap_problem(problem) if instruction else problem.strip())
        n_tokens = prompt_token_count(tokenizer, messages)
        if n_tokens > max_prompt_length:
            raise DataPrepError(
                f"{data_source} row {i}: prompt is {n_tokens} tokens > max_prompt_length {max_prompt_length}; "
                "eval problems are never dropped: raise the limit"
            )
        lengths.append(n_tokens)
        source_id = row.get(id_col) if id_col else None
        out.append(
            {
                "data_source": data_source,
                "prompt": messages,
                "ability": "MATH",
                "reward_model": {"style": "rule", "ground_truth": answer},
                "extra_info": {
                    "index": i,
                    "problem_id": f"{data_source}-{i:0{width}d}",
                    "source_id": str(i if source_id is None else source_id),
                    "problem": problem.strip(),
                    "prompt_tokens": n_tokens,
                    "split": "test",
                },
            }
        )
    report = {
        "data_source": data_source,
        "rows_read": len(rows),
        "kept": len(out),
        "max_prompt_length": max_prompt_length,
        "prompt_tokens": {"min": min(lengths), "max": max(lengths), "mean": sum(lengths) / len(lengths)},
        "columns": {"problem": problem_col, "answer": answer_col, "id": id_col},
    }
    return out, report
