"""Data preparation: DAPO-Math-17k (train) and AIME 2024/2025 (eval) as verl parquet, plus an
overlap report between them.

CLI: ``python -m math_data --help`` (see :mod:`math_data.__main__`).

verl row layout written here (one parquet row per prompt)::

    data_source   "math_dapo" (train) | "aime2024" | "aime2025" (distinct, lowercase)
    prompt        [{"role": "user", "content": <instruction + problem>}]  (verl renders the chat template)
    ability       "MATH"
    reward_model  {"style": "rule", "ground_truth": <answer string>}
    extra_info    {"index", "problem_id", "source_id", "problem", "prompt_tokens", "split"}

``extra_info.problem_id`` is the stable id the reward function copies into verl's validation
dumps (``aime2024-07``: the row's position in the pinned source, two digits). ``prompt_tokens``
is the chat-template-rendered length (model tokenizer, ``enable_thinking=True``,
``add_generation_prompt=True``), the same count verl's ``data.filter_overlong_prompts`` uses.

Malformed input, decided per case:

- file-level defects (unknown source, unreadable file, invalid JSON line, a required column
  missing) raise :class:`DataPrepError` naming the file / line / column;
- a train row with no usable problem text or answer is skipped and counted (``skipped`` in the
  report, with row numbers and reasons): one bad row among 17k should not stop a run, and the
  count makes it visible;
- an eval row with any defect (no problem, non-integer AIME answer, over-long prompt), or an eval
  set whose size differs from the expected count, raises: a test set is never silently shrunk.
"""

from math_data.aime import prepare_eval
from math_data.dapo import prepare_train
from math_data.overlap import overlap_report
from math_data.sources import DataPrepError, load_rows, write_parquet

__all__ = ["DataPrepError", "load_rows", "overlap_report", "prepare_eval", "prepare_train", "write_parquet"]
