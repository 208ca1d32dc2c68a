"""The scratchpad task (runners/tiny/scratchpad_task.py) and the per-step diagnostics (runners/embedded/diagnostics.py)."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from runners.embedded.diagnostics import CenteringGradient, shared_context
from runners.tiny.arithmetic_task import prompt_token_ids
from runners.tiny.scratchpad_task import ScratchpadSumTask, scratchpad
from runners.tiny.task_by_name import build_task
from runners.tiny.tokenizer import build_tokenizer

CONF = Path(__file__).resolve().parents[1] / "conf"
DATA_CFG = OmegaConf.load(CONF / "data" / "sum_scratchpad.yaml")


@pytest.fixture(scope="module")
def task() -> ScratchpadSumTask:
    return build_task(DATA_CFG)


def test_any_order_of_the_terms_is_correct_and_only_the_total_counts(task):
    problem = task.sample_train(torch.Generator().manual_seed(0), 1)[0]
    terms = task.terms_of(problem)
    assert len(terms) == 5 and all(1 <= t <= 9 for t in terms) and problem.answer == str(sum(terms))
    assert task.score(scratchpad(terms), problem) == (1.0, 1)
    assert task.score(scratchpad(terms[::-1]), problem) == (1.0, 1)
    assert task.score("1+1=3 \\boxed{" + problem.answer + "}", problem) == (1.0, 1)  # the scratchpad is not scored
    assert task.score(scratchpad(terms).replace("{" + problem.answer, "{" + str(sum(terms) + 1)), problem)[1] == 0
    assert scratchpad([7, 3, 5]) == "7+3=10 10+5=15 \\boxed{15}"


def test_reference_responses_are_diverse_and_within_the_length_bound(task):
    tok = build_tokenizer()
    problems = task.sample_train(np.random.default_rng(0), 300) + task.eval_sets()["scratch_a"]
    generator = torch.Generator().manual_seed(0)
    lengths = []
    for p in problems:
        text = task.reference_response(p, generator)
        assert task.score(text, p) == (1.0, 1)
        lengths.append(len(tok(text)["input_ids"]) + 1)
    assert 20 <= min(lengths) and max(lengths) <= task.max_response_tokens() <= 60
    assert max(len(prompt_token_ids(tok, p)) for p in problems) == task.max_prompt_tokens(tok)
    # a problem with distinct terms gets several different first tokens (prefixes diverge at once)
    distinct = next(p for p in problems if len(set(task.terms_of(p))) == 5)
    firsts = {task.reference_response(distinct, generator)[0] for _ in range(60)}
    assert len(firsts) == 5


def test_held_out_sets_are_never_trained_on(task):
    held_out = {p.messages[0]["content"] for ps in task.eval_sets().values() for p in ps}
    assert len(held_out) == 60
    drawn = {p.messages[0]["content"] for p in task.sample_train(np.random.default_rng(1), 20_000)}
    assert not drawn & held_out


@pytest.mark.parametrize(("key", "value", "message"), [
    ("terms", 1, "data.terms must be an integer >= 2"),
    ("terms", 10, "data.terms must be an integer in 2 .. 9"),
    ("max_term", 12, "data.max_term must be an integer in 1 .. 9"),
    ("name", "nope", "data.name='nope'; the embedded backend's tasks are"),
])
def test_bad_task_config_names_the_key(key, value, message):
    cfg = copy.deepcopy(DATA_CFG)
    OmegaConf.set_struct(cfg, False)
    cfg[key] = value
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        build_task(cfg)


def test_shared_context_marks_the_common_prefix_of_a_group():
    ids = torch.tensor([[5, 6, 7, 0], [5, 6, 8, 9], [5, 6, 7, 1],   # group 0: agree on 5 6, then diverge
                        [1, 2, 0, 0], [3, 2, 0, 0], [1, 2, 4, 0]])  # group 1: diverge at token 0
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]])
    shared = shared_context(ids, mask, 3)
    expected = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 0], [1, 0, 0, 0], [1, 0, 0, 0], [1, 0, 0, 0]])
    assert torch.equal(shared, expected.bool())
    with pytest.raises(ValueError, match="whole groups"):
        shared_context(ids[:4], mask[:4], 3)


def test_centering_gradient_ratio_and_cosine_match_separate_backward_passes():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    x = torch.randn(8, 4)
    out = model(x)
    main, correction = out[:, 0].square().mean(), (out[:, 1] * out[:, 2]).mean()
    params = list(model.parameters())
    g_main = torch.autograd.grad(main, params, retain_graph=True)
    g_c = torch.autograd.grad(correction, params, retain_graph=True)
    flat = lambda gs: torch.cat([g.reshape(-1) for g in gs])  # noqa: E731
    ratio = float(flat(g_c).norm() / flat(g_main).norm())
    cosine = float(torch.nn.functional.cosine_similarity(flat(g_c), flat(g_main), dim=0))
    for in_update in (False, True):
        model.zero_grad()
        tracker = CenteringGradient(params)
        tracker.add(correction)
        (main + correction if in_update else main).backward(retain_graph=True)
        before = [p.grad.clone() for p in params]
        metrics = tracker.metrics(correction_in_update=in_update)
        assert metrics["diag/centering_grad_ratio"] == pytest.approx(ratio, rel=1e-5)
        assert metrics["diag/centering_grad_cos"] == pytest.approx(cosine, abs=1e-5)
        assert all(torch.equal(a, p.grad) for a, p in zip(before, params, strict=True))  # .grad untouched
