"""Building blocks of the embedded backend: tokenizer, tiny model, sampler, task, cached warm start."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from transformers import AutoTokenizer

from runners.embedded import warmstart as ws
from runners.embedded.generate import left_pad, position_ids_from_mask, sample
from runners.tiny.arithmetic_task import (
    TRAIN_DATA_SOURCE,
    ArithmeticTask,
    Problem,
    prompt_token_ids,
    response_text,
)
from runners.tiny.model import build_model, count_parameters
from runners.tiny.tokenizer import build_tokenizer

CONF = Path(__file__).resolve().parents[1] / "conf"
MODEL_CFG = OmegaConf.load(CONF / "model" / "tiny_qwen3.yaml")
DATA_CFG = OmegaConf.load(CONF / "data" / "synthetic_arith.yaml")
# A smaller model and a short warm start, for speed; same code paths as the default.
TINY_MODEL = OmegaConf.merge(
    MODEL_CFG,
    {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "head_dim": 16,
        "intermediate_size": 128,
        "warmstart": {"steps": 40, "batch_size": 32, "lr": 5e-3, "warmup_steps": 5, "seed": 0},
    },
)


def tiny_cfg(**data_overrides):
    return OmegaConf.create(
        {"seed": 42, "model": copy.deepcopy(TINY_MODEL), "data": OmegaConf.merge(DATA_CFG, data_overrides)}
    )


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.fixture(scope="module")
def task():
    return ArithmeticTask(DATA_CFG)


# -- tokenizer ----------------------------------------------------------------------------------


def test_chat_template_text_and_single_token_specials(tok):
    messages = [{"role": "user", "content": "12+34=? \\boxed{}"}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\n12+34=? \\boxed{}<|im_end|>\n<|im_start|>assistant\n"
    without = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    assert without == "<|im_start|>user\n12+34=? \\boxed{}<|im_end|>\n"
    tokens = tok.convert_ids_to_tokens(tok(text, add_special_tokens=False)["input_ids"])
    assert tokens[:3] == ["<|im_start|>", "user", "\n"]
    assert tokens[-3:] == ["<|im_start|>", "assistant", "\n"]
    assert len(tokens) == 3 + len("12+34=? \\boxed{}") + 2 + 3  # every other character is one token
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert tok.eos_token_id != tok.pad_token_id
    assert 30 <= len(tok) <= 40


def test_tokenizer_round_trip_through_save_pretrained(tok, tmp_path):
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    messages = [{"role": "user", "content": "98*7=? Answer in \\boxed{}."}]
    texts = [
        tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True),
        "\\boxed{-105}<|im_end|>",
        "0123456789+-*=?\n xbed{}",
    ]
    for text in texts:
        assert loaded(text)["input_ids"] == tok(text)["input_ids"]
    assert loaded.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == texts[0]
    assert loaded.get_vocab() == tok.get_vocab()
    assert (loaded.eos_token_id, loaded.pad_token_id) == (tok.eos_token_id, tok.pad_token_id)
    assert loaded.padding_side == "left"


def test_decode_skips_special_tokens(tok):
    ids = tok("\\boxed{57}", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert len(ids) == len("\\boxed{57}") + 1
    assert tok.decode(ids, skip_special_tokens=True) == "\\boxed{57}"
    assert tok.decode(ids) == "\\boxed{57}<|im_end|>"
    assert tok.decode(tok("b e\nd", add_special_tokens=False)["input_ids"]) == "b e\nd"


# -- model --------------------------------------------------------------------------------------


def test_default_model_size_forward_and_seeding(tok):
    torch.manual_seed(0)
    model = build_model(MODEL_CFG, tok)
    assert 400_000 <= count_parameters(model) <= 500_000
    assert model.dtype == torch.float32
    assert model.config.vocab_size == len(tok) and model.config.eos_token_id == tok.eos_token_id
    ids = torch.randint(0, len(tok), (3, 9))
    logits = model(input_ids=ids).logits
    assert logits.shape == (3, 9, len(tok)) and torch.isfinite(logits).all()
    torch.manual_seed(0)
    again = build_model(MODEL_CFG, tok)
    assert all(
        torch.equal(a, b)
        for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True)
    )


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ({"num_key_value_heads": 3}, "num_key_value_heads"),
        ({"hidden_size": 0}, "hidden_size"),
        ({"attn_implementation": "flash"}, "attn_implementation"),
    ],
)
def test_bad_model_config_names_the_key(tok, override, key):
    with pytest.raises(ValueError, match=key):
        build_model(OmegaConf.merge(MODEL_CFG, override), tok)


# -- sampler ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_model(tok):
    torch.manual_seed(1)
    return build_model(TINY_MODEL, tok)


def test_position_ids_from_left_padded_mask():
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert position_ids_from_mask(mask).tolist() == [[0, 1, 2], [0, 0, 0]]


def test_sample_is_reproducible_prompt_major_and_bounded(tok, tiny_model, task):
    prompts = [prompt_token_ids(tok, p) for p in task.sample_train(torch.Generator().manual_seed(0), 4)]
    first = sample(tiny_model, tok, prompts, 3, 12, 1.0, torch.Generator().manual_seed(7))
    again = sample(tiny_model, tok, prompts, 3, 12, 1.0, torch.Generator().manual_seed(7))
    other = sample(tiny_model, tok, prompts, 3, 12, 1.0, torch.Generator().manual_seed(8))
    assert first == again and first != other
    assert len(first) == 12
    for ids in first:
        assert 1 <= len(ids) <= 12
        assert tok.eos_token_id not in ids[:-1]  # (any other id, pad included, may be sampled)
    greedy = sample(tiny_model, tok, prompts, 3, 12, 0.0, torch.Generator())
    for p in range(4):  # the n copies of one prompt are rows p*n .. p*n+n-1
        assert greedy[3 * p] == greedy[3 * p + 1] == greedy[3 * p + 2]


def test_cached_left_padded_sampling_matches_full_forward(tok, tiny_model, task):
    """Greedy tokens from the KV-cached, left-padded sampler equal the argmax of one full forward
    with mask-derived position ids, and a prompt's output does not depend on its batch padding."""
    prompts = [prompt_token_ids(tok, p) for p in task.sample_train(torch.Generator().manual_seed(1), 3)]
    prompts[1] = prompts[1][3:]  # shorter prompt -> left padding in the batch
    greedy = sample(tiny_model, tok, prompts, 1, 8, 0.0, torch.Generator())
    alone = sample(tiny_model, tok, [prompts[1]], 1, 8, 0.0, torch.Generator())
    assert alone[0] == greedy[1]
    ids, mask = left_pad([p + r[:-1] for p, r in zip(prompts, greedy, strict=True)], tok.pad_token_id)
    with torch.no_grad():
        logits = tiny_model(
            input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask)
        ).logits
    for row, response in enumerate(greedy):
        # left padding: response token k is predicted at column width - len(response) + k
        predicted = logits[row, ids.shape[1] - len(response) :].argmax(-1).tolist()
        assert predicted == response


# -- task ---------------------------------------------------------------------------------------


def test_eval_sets_are_fixed_by_the_data_seed(task):
    sets = task.eval_sets()
    assert list(sets) == ["arith_a", "arith_b"]
    assert [len(v) for v in sets.values()] == [30, 30]
    assert sets["arith_a"][7].problem_id == "arith_a-07" and sets["arith_a"][7].data_source == "arith_a"
    assert ArithmeticTask(DATA_CFG).eval_sets() == sets
    ids = [p.problem_id for ps in sets.values() for p in ps]
    contents = [p.messages[0]["content"] for ps in sets.values() for p in ps]
    assert len(set(ids)) == 60 and len(set(contents)) == 60
    reseeded = ArithmeticTask(OmegaConf.merge(DATA_CFG, {"seed": 1})).eval_sets()
    assert reseeded["arith_a"] != sets["arith_a"]


def test_problem_format(task):
    problem = task.eval_sets()["arith_a"][0]
    a, b = problem.messages[0]["content"].split("=")[0].split("+")
    assert problem.messages == [{"role": "user", "content": f"{a}+{b}=? \\boxed{{}}"}]
    assert 10 <= int(a) <= 99 and 10 <= int(b) <= 99 and problem.answer == str(int(a) + int(b))
    assert response_text(problem) == f"\\boxed{{{problem.answer}}}"


def test_train_stream_is_reproducible_for_torch_and_numpy_generators(task):
    for make in (lambda s: torch.Generator().manual_seed(s), np.random.default_rng):
        first, again, other = (
            task.sample_train(make(3), 50),
            task.sample_train(make(3), 50),
            task.sample_train(make(4), 50),
        )
        assert first == again and first != other
        assert all(p.data_source == TRAIN_DATA_SOURCE for p in first)
    gen = torch.Generator().manual_seed(3)
    assert task.sample_train(gen, 20) != task.sample_train(gen, 20)  # the generator's state advances


def test_held_out_problems_never_appear_in_training(task):
    held_out = {p.messages[0]["content"] for ps in task.eval_sets().values() for p in ps}
    drawn = task.sample_train(np.random.default_rng(0), 20_000)
    assert not held_out & {p.messages[0]["content"] for p in drawn}
    # the rank -> index map enumerates exactly the non-held-out problem space
    every = task._train_indices(np.arange(task.train_size))
    assert len(set(every.tolist())) == task.train_size == 8100 - 60
    assert not set(every.tolist()) & task.held_out_ids()
    assert every.min() >= 0 and every.max() < task.space_size


def test_score_correct_incorrect_unboxed(task):
    problem = Problem("x", "arith_a", [{"role": "user", "content": "12+34=? \\boxed{}"}], "46")
    assert task.score("\\boxed{46}", problem) == (1.0, 1)
    assert task.score("so \\boxed{46}", problem) == (1.0, 1)
    assert task.score("\\boxed{47}", problem) == (-1.0, 0)
    assert task.score("46", problem) == (-1.0, 0)
    assert task.score("\\boxed{46", problem) == (-1.0, 0)
    assert task.score("", problem) == (-1.0, 0)
    negative = Problem("y", "arith_a", [{"role": "user", "content": "12-34=? \\boxed{}"}], "-22")
    assert task.score("\\boxed{-22}", negative) == (1.0, 1)


def test_lengths_cover_every_prompt_and_answer(tok, task):
    problems = task.sample_train(np.random.default_rng(0), 200) + task.eval_sets()["arith_b"]
    assert {len(prompt_token_ids(tok, p)) for p in problems} == {task.max_prompt_tokens(tok)} == {24}
    assert (
        max(len(tok(response_text(p))["input_ids"]) + 1 for p in problems) <= task.max_response_tokens() == 12
    )
    mul = ArithmeticTask(OmegaConf.merge(DATA_CFG, {"operation": "mul", "digits": 3}))
    assert mul.max_answer_chars() == 6 and mul.max_response_tokens() == 15


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ({"digits": 0}, "data.digits"),
        ({"operation": "div"}, "data.operation"),
        ({"seed": -1}, "data.seed"),
        (
            {"eval_sets": [{"name": "a", "size": 60}, {"name": "b", "size": 41}], "digits": 1},
            "data.eval_sets",
        ),
        ({"eval_sets": [{"name": "arith_a", "size": 3}, {"name": "arith_a", "size": 3}]}, "data.eval_sets"),
        ({"eval_sets": [{"name": "arith_a", "size": 0}]}, r"data.eval_sets\[0\].size"),
        ({"eval_sets": [{"name": TRAIN_DATA_SOURCE, "size": 3}]}, r"data.eval_sets\[0\].name"),
        ({"eval_sets": []}, "data.eval_sets"),
        ({"prompt_template": "{a}+{b}=? Respond in \\boxed{}."}, "data.prompt_template"),
        ({"prompt_template": "{a}+=?"}, "data.prompt_template"),
    ],
)
def test_bad_data_config_names_the_key(override, key):
    cfg = OmegaConf.merge(DATA_CFG, override)  # lists are replaced, not merged
    with pytest.raises(ValueError, match=key):
        ArithmeticTask(cfg)


# -- warm start ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cached(tmp_path_factory):
    """One tiny warm start into a fresh cache, shared by the warm-start tests."""
    root = tmp_path_factory.mktemp("warmstart")
    calls = []
    original = ws.train_warm_start

    def counting(cfg, progress=True):
        calls.append(1)
        return original(cfg, progress=progress)

    mp = pytest.MonkeyPatch()
    mp.setattr(ws, "train_warm_start", counting)
    path = ws.warm_start(tiny_cfg(), root, progress=False)
    yield root, path, calls, mp
    mp.undo()


def test_warm_start_writes_a_loadable_entry_and_reuses_it(cached, tok):
    root, path, calls, _ = cached
    assert calls == [1]
    assert path == root / ws.cache_key(tiny_cfg()) and len(path.name) == 16
    assert {"config.json", "model.safetensors", "tokenizer.json", ws.MARKER} <= {
        p.name for p in path.iterdir()
    }
    assert [p.name for p in root.iterdir()] == [path.name]  # no temp dir left behind
    mtime = (path / "model.safetensors").stat().st_mtime_ns
    other_run_seed = tiny_cfg()
    other_run_seed.seed = 7  # the run seed does not enter the key: all runs share one base model
    assert ws.warm_start(other_run_seed, root, progress=False) == path
    assert calls == [1] and (path / "model.safetensors").stat().st_mtime_ns == mtime
    assert AutoTokenizer.from_pretrained(path)("12+34")["input_ids"] == tok("12+34")["input_ids"]


def test_cache_key_tracks_what_matters():
    base = ws.cache_key(tiny_cfg())
    changed_ws = tiny_cfg()
    changed_ws.model.warmstart.lr = 1e-3
    assert ws.cache_key(changed_ws) != base
    assert ws.cache_key(tiny_cfg(seed=1)) != base
    assert ws.cache_key(tiny_cfg()) == base


def test_warm_start_is_deterministic_and_lowers_the_loss(cached):
    _, path, _, _ = cached
    model, stats = ws.train_warm_start(tiny_cfg(), progress=False)
    assert stats["final_loss"] < 0.5 * stats["first_loss"]
    loaded = ws.load_base_model(path, TINY_MODEL)
    for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_warm_started_model_answers_in_the_boxed_format(cached, tok, task):
    """After the tiny warm start, greedy answers are `\\boxed{<digits>}` + eos; before, they are not."""
    _, path, _, _ = cached
    trained = ws.load_base_model(path, TINY_MODEL)
    torch.manual_seed(0)
    untrained = build_model(TINY_MODEL, tok)
    problems = task.sample_train(torch.Generator().manual_seed(11), 16)
    prompts = [prompt_token_ids(tok, p) for p in problems]

    def boxed_rate(model):
        responses = sample(model, tok, prompts, 1, task.max_response_tokens(), 0.0, torch.Generator())
        ok = 0
        for ids in responses:
            text = tok.decode(ids, skip_special_tokens=True)
            ok += ids[-1] == tok.eos_token_id and text.startswith("\\boxed{") and text[7:-1].isdigit()
        return ok / len(responses)

    assert boxed_rate(trained) >= 0.75 > boxed_rate(untrained)


def test_interrupted_warm_start_leaves_no_entry(tmp_path, monkeypatch):
    def crash_while_saving(directory, model, record):
        model.save_pretrained(directory)  # half written ...
        raise KeyboardInterrupt  # ... then killed

    monkeypatch.setattr(ws, "_write_entry", crash_while_saving)
    cfg = tiny_cfg()
    cfg.model.warmstart.steps = 2
    with pytest.raises(KeyboardInterrupt):
        ws.warm_start(cfg, tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_bad_warm_start_config_fails_before_training(tmp_path):
    cfg = tiny_cfg()
    cfg.model.warmstart.batch_size = 0
    with pytest.raises(ValueError, match="model.warmstart.batch_size"):
        ws.warm_start(cfg, tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []
