"""Data preparation on small local fixtures (never the hub), with a tiny offline ChatML tokenizer.

The tokenizer is word-level (whitespace split, every unknown word one token) with Qwen3-style
chat template: the non-thinking generation prompt adds ``<think> </think>`` (2 tokens), so the
tests can tell which mode was rendered.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from math_data import (
    DataPrepError,
    load_rows,
    overlap_report,
    prepare_eval,
    prepare_train,
    write_parquet,
)
from math_data.__main__ import main as data_main
from math_data.overlap import normalise
from math_data.prompting import INSTRUCTION_HEAD, prompt_token_count, wrap_problem

FIXTURES = Path(__file__).parent / "fixtures" / "data"
DAPO = FIXTURES / "dapo_processed.jsonl"
AIME24 = FIXTURES / "aime_2024.jsonl"
AIME25 = FIXTURES / "aime_2025.jsonl"

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}"
)


def make_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {
        "<unk>": 0,
        "<|im_start|>": 1,
        "<|im_end|>": 2,
        "<think>": 3,
        "</think>": 4,
        "Answer:": 5,
        "208": 6,
        "so": 7,
        "209": 8,
    }
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        additional_special_tokens=["<|im_start|>", "<think>", "</think>"],
    )
    fast.chat_template = CHATML
    return fast


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tok")
    make_tokenizer().save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tok(tok_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tok_dir)


def expected_tokens(text: str) -> int:
    """Word count of the thinking-mode rendering of one user message (specials count one each)."""
    # <|im_start|>user \n text <|im_end|> \n <|im_start|>assistant \n
    return 1 + 1 + len(text.split()) + 1 + 1 + 1


def test_token_count_is_thinking_mode_rendering(tok):
    messages = [{"role": "user", "content": "a b c"}]
    assert prompt_token_count(tok, messages) == expected_tokens("a b c") == 8
    non_thinking = tok.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False, enable_thinking=False
    )
    assert len(tok(non_thinking, add_special_tokens=False)["input_ids"]) == 10  # would be the wrong count


def test_train_prep_counts_drops_and_skips(tok):
    rows = load_rows(DAPO)
    assert len(rows) == 8
    long_len = expected_tokens(wrap_problem(rows[2]["prompt"]))
    short_max = max(
        expected_tokens(wrap_problem(r["prompt"])) for i, r in enumerate(rows) if i not in (2, 3, 4)
    )
    assert short_max < long_len
    out, report = prepare_train(rows, tok, max_prompt_length=long_len - 1)
    assert (
        report["rows_read"],
        report["kept"],
        report["dropped_over_length"],
        report["skipped_malformed"],
    ) == (8, 5, 1, 2)
    assert report["dropped"] == [{"row": 2, "problem_id": "dapo-00002", "prompt_tokens": long_len}]
    assert [s["row"] for s in report["skipped"]] == [3, 4]
    assert (
        "no problem text" in report["skipped"][0]["reason"] and "no answer" in report["skipped"][1]["reason"]
    )
    # a prompt exactly at the limit is kept (verl drops only prompts *over* max_prompt_length)
    out_at, report_at = prepare_train(rows, tok, max_prompt_length=long_len)
    assert report_at["kept"] == 6 and report_at["dropped_over_length"] == 0

    row = out[0]
    assert row["data_source"] == "math_dapo" and row["ability"] == "MATH"
    assert row["reward_model"] == {"style": "rule", "ground_truth": "55"}
    assert row["prompt"] == [{"role": "user", "content": rows[0]["source_prompt"][0]["content"]}]
    assert row["extra_info"]["problem_id"] == "dapo-00000" and row["extra_info"]["source_id"] == "a1b2-0001"
    assert row["extra_info"]["problem"] == "What is $1 + 2 + \\cdots + 10$?"
    for r in out:
        assert r["extra_info"]["prompt_tokens"] == prompt_token_count(tok, r["prompt"])
    # the row without source_prompt gets the same DAPO instruction around its problem
    last = out[-1]
    assert last["extra_info"]["source_id"] == "a1b2-0008"
    assert last["prompt"][0]["content"] == wrap_problem("Find the largest prime factor of $2024$.")
    assert [r["extra_info"]["index"] for r in out] == list(range(5))


def test_train_file_level_errors(tmp_path, tok):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x", "solution": "1"}\n{not json\n')
    with pytest.raises(DataPrepError, match=r"bad.jsonl:2: not valid JSON"):
        load_rows(bad)
    nocol = tmp_path / "nocol.jsonl"
    nocol.write_text('{"question": "x", "solution": "1"}\n')
    with pytest.raises(DataPrepError, match=r"lacks a problem column.*question"):
        prepare_train(load_rows(nocol), tok)
    with pytest.raises(DataPrepError, match="no such file or folder"):
        load_rows(tmp_path / "missing.parquet")


def test_folder_source_with_config_subfolder(tmp_path):
    rows = load_rows(DAPO)
    write_parquet(rows[:3], tmp_path / "all" / "train-00000-of-00002.parquet")
    write_parquet(rows[3:], tmp_path / "all" / "train-00001-of-00002.parquet")
    write_parquet(rows[:1], tmp_path / "en" / "train-00000-of-00001.parquet")
    loaded = load_rows(tmp_path, config="all")
    assert [r["extra_info"]["index"] for r in loaded] == [r["extra_info"]["index"] for r in rows]
    assert loaded[0]["source_prompt"] == rows[0]["source_prompt"]


def test_eval_prep_ids_answers_and_errors(tmp_path, tok):
    out, report = prepare_eval(load_rows(AIME24), "aime2024", tok, expected_count=3)
    assert [r["extra_info"]["problem_id"] for r in out] == ["aime2024-00", "aime2024-01", "aime2024-02"]
    assert [r["extra_info"]["source_id"] for r in out] == ["60", "61", "62"]
    assert {r["data_source"] for r in out} == {"aime2024"}
    assert out[0]["prompt"][0]["content"].startswith(INSTRUCTION_HEAD)
    out25, _ = prepare_eval(load_rows(AIME25), "aime2025", tok, expected_count=3)
    assert [r["reward_model"]["ground_truth"] for r in out25] == ["500", "60", "0"]
    assert report["columns"] == {"problem": "problem", "answer": "answer", "id": "id"}

    with pytest.raises(DataPrepError, match="3 rows, expected 30"):
        prepare_eval(load_rows(AIME24), "aime2024", tok)
    rows = load_rows(AIME24)
    rows[1]["answer"] = "12.5"
    with pytest.raises(DataPrepError, match=r"aime2024 row 1: answer '12.5' is not an AIME integer"):
        prepare_eval(rows, "aime2024", tok, expected_count=3)
    rows = load_rows(AIME24)
    rows[2]["problem"] = "  "
    with pytest.raises(DataPrepError, match="aime2024 row 2: empty"):
        prepare_eval(rows, "aime2024", tok, expected_count=3)
    with pytest.raises(DataPrepError, match="row 0: prompt is .* tokens > max_prompt_length 5"):
        prepare_eval(load_rows(AIME24), "aime2024", tok, expected_count=3, max_prompt_length=5)
    with pytest.raises(DataPrepError, match="lowercase"):
        prepare_eval(load_rows(AIME24), "AIME 2024", tok, expected_count=3)


def test_overlap_exact_and_ngram():
    assert normalise("LET  $x$,\\, and \\quad Y!") == "let x and y"
    train = [(f"dapo-{i:05d}", r["prompt"] or "") for i, r in enumerate(load_rows(DAPO))]
    evals = {
        "aime2024": [(f"aime2024-{i:02d}", r["problem"]) for i, r in enumerate(load_rows(AIME24))],
        "aime2025": [(f"aime2025-{i:02d}", r["problem"]) for i, r in enumerate(load_rows(AIME25))],
    }
    report = overlap_report(train, evals, n=13)
    s24, s25 = report["sets"]["aime2024"], report["sets"]["aime2025"]
    assert s24["exact_match"] == {
        "count": 1,
        "matches": [{"eval_id": "aime2024-00", "train_ids": ["dapo-00005"]}],
    }
    assert s24["ngram_overlap"]["count"] == 1 and s24["ngram_overlap"]["matches"][0]["max_fraction"] == 1.0
    assert s25["exact_match"]["count"] == 0
    (m,) = s25["ngram_overlap"]["matches"]
    assert m["eval_id"] == "aime2025-00" and m["train_ids"] == ["dapo-00006"]
    # shared normalised prefix "find the number ... such that a" is 20 words: 20 - 13 + 1 = 8 13-grams
    assert m["shared_ngrams"] == 8 and 0 < m["max_fraction"] < 1
    assert report["n_train"] == 8 and report["ngram_n"] == 13


def test_cli_all_on_fixtures(tmp_path, tok_dir):
    parquet_dapo = tmp_path / "src" / "dapo.parquet"
    write_parquet(load_rows(DAPO), parquet_dapo)  # exercise the parquet reader too
    out = tmp_path / "data"
    rc = data_main(
        [
            "all",
            "--out-dir",
            str(out),
            "--tokenizer",
            str(tok_dir),
            "--expected-count",
            "3",
            "--max-prompt-length",
            "150",
            "--train-source",
            str(parquet_dapo),
            "--aime2024-source",
            str(AIME24),
            "--aime2025-source",
            str(AIME25),
        ]
    )
    assert rc == 0
    train = pq.read_table(out / "dapo_math_17k" / "train.parquet").to_pylist()
    assert len(train) == 5 and train[0]["prompt"][0]["role"] == "user"
    assert {r["data_source"] for r in pq.read_table(out / "aime2025" / "test.parquet").to_pylist()} == {
        "aime2025"
    }
    summary = json.loads((out / "prep_report.json").read_text())
    assert summary["train"]["kept"] == 5 and summary["train"]["dropped_over_length"] == 1
    assert summary["train"]["source"]["local_path"] == str(parquet_dapo.resolve())
    overlap = json.loads((out / "overlap.json").read_text())
    assert overlap["sets"]["aime2024"]["exact_match"]["matches"][0]["train_ids"] == ["dapo-00005"]
    assert json.loads((out / "aime2024" / "test.report.json").read_text())["kept"] == 3
    # the two eval files share one schema, so verl can read them as one val set
    assert pq.read_schema(out / "aime2024" / "test.parquet") == pq.read_schema(
        out / "aime2025" / "test.parquet"
    )

    # the reference counts can be insisted on: a mismatch fails before anything is written
    rc = data_main(
        [
            "train",
            "--source",
            str(DAPO),
            "--tokenizer",
            str(tok_dir),
            "--max-prompt-length",
            "150",
            "--expect-rows",
            "8",
            "--expect-kept",
            "6",
            "--out",
            str(tmp_path / "t.parquet"),
        ]
    )
    assert rc == 2 and not (tmp_path / "t.parquet").exists()

    bad = tmp_path / "bad_aime.jsonl"
    shutil.copy(AIME24, bad)
    with bad.open("a") as f:
        f.write('{"id": 99, "problem": "Extra?", "answer": "x"}\n')
    rc = data_main(
        [
            "eval",
            "--name",
            "aime2024",
            "--source",
            str(bad),
            "--tokenizer",
            str(tok_dir),
            "--expected-count",
            "4",
            "--out",
            str(tmp_path / "a.parquet"),
        ]
    )
    assert rc == 2 and not (tmp_path / "a.parquet").exists()


def test_reward_scores_with_math_dapo_and_reports_length(tok):
    import numpy as np
    import torch
    from verl import DataProto

    from ablations.reward import LengthAwareRewardManager, compute_score

    info = {"problem_id": "aime2024-00", "index": 0}
    right = compute_score("aime2024", "work\nAnswer: 208", "208", extra_info=info)
    assert right == {
        "score": 1.0,
        "acc": 1.0,
        "pred": "208",
        "data_source": "aime2024",
        "problem_id": "aime2024-00",
    }
    wrong = compute_score("math_dapo", "Answer: 209", "208")
    assert (wrong["score"], wrong["acc"], "problem_id" in wrong) == (-1.0, 0.0, False)

    # prompt 2 tokens, response "so Answer: 208" (3 tokens) right-padded to 5
    prompts = torch.tensor([[1, 7]])
    responses = torch.tensor([[7, 5, 6, 2, 2]])
    attention = torch.tensor([[1, 1, 1, 1, 1, 0, 0]])
    data = DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "attention_mask": attention},
        non_tensors={
            "data_source": np.array(["aime2024"], dtype=object),
            "reward_model": np.array([{"ground_truth": "208", "style": "rule"}], dtype=object),
            "extra_info": np.array([dict(info)], dtype=object),
        },
    )

    async def run():
        manager = LengthAwareRewardManager(config=None, tokenizer=tok, compute_score=compute_score)
        return await manager.run_single(data)

    result = asyncio.run(run())
    assert result["reward_score"] == 1.0
    extra = result["reward_extra_info"]
    assert extra["response_length"] == 3 and extra["problem_id"] == "aime2024-00" and extra["acc"] == 1.0


def test_launch_keys_resolve_to_the_project_reward():
    """The reward keys the launch config sets resolve, through verl's own loaders, to this module."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn, resolve_reward_manager_cls

    import ablations.reward

    config = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": "pkg://ablations.reward",
                    "name": "compute_score",
                    "reward_kwargs": {},
                },
                "reward_manager": {
                    "source": "importlib",
                    "name": "LengthAwareRewardManager",
                    "module": {"path": "pkg://ablations.reward"},
                },
            }
        }
    )
    assert resolve_reward_manager_cls(config) is ablations.reward.LengthAwareRewardManager
    fn = get_custom_reward_fn(config)
    out = fn(
        data_source="aime2025", solution_str="Answer: 60", ground_truth="60", extra_info={"problem_id": "p"}
    )
    assert (out["score"], out["problem_id"]) == (1.0, "p")


def test_the_old_command_says_the_new_one_and_runs_it():
    """``python -m ablations.data`` (the command before the preparation had its own package) still runs."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-m", "ablations.data", "--help"], capture_output=True, text=True,
                         timeout=120, cwd=root)
    assert out.returncode == 0, out.stderr
    assert "python -m ablations.data is now python -m math_data" in out.stderr
    assert out.stdout.startswith("usage: python -m math_data")
