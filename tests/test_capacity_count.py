"""The counting harness of the capacity plan's accuracy table (benchmarks/capacity/count.py) stays true:
its flash-attn cross-entropy stand-in computes what it stands in for, and a count of the tiny model agrees
with the plan's terms (the full table: python benchmarks/capacity/accuracy.py, docs/capacity.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from runners.capacity import trainer_memory
from runners.config.model_shapes import ModelShape

# the repository's own file, imported plainly: a break in it fails these tests (it is no optional dependency)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.capacity import count as capacity_count  # noqa: E402


def test_flash_cross_entropy_stand_in_equals_log_softmax_and_its_gradient():
    torch.manual_seed(0)
    logits = torch.randn(130, 50, requires_grad=True)  # 130 rows: three blocks of 64
    labels = torch.randint(0, 50, (130,))
    weights = torch.randn(130)
    stand_in = capacity_count.FlashCrossEntropyStandIn.apply(logits, labels)
    (grad,) = torch.autograd.grad((weights * stand_in).sum(), logits)
    reference = torch.log_softmax(logits, -1).gather(-1, labels[:, None]).squeeze(-1)
    (expected,) = torch.autograd.grad((weights * reference).sum(), logits)
    torch.testing.assert_close(stand_in, reference)
    torch.testing.assert_close(grad, expected)
    # verl's call without the entropy (inplace_backward=True): the same gradient, written into the logits' storage
    block = torch.randn(130, 50, requires_grad=True)
    leaf = block.detach().clone()
    inner = block * 1.0  # a non-leaf logits block, as the LM head's output is
    in_place = capacity_count.FlashCrossEntropyStandIn.apply(inner, labels, True)
    (grad_in_place,) = torch.autograd.grad((weights * in_place).sum(), block)
    (expected_in_place,) = torch.autograd.grad(
        (weights * torch.log_softmax(leaf.requires_grad_(), -1).gather(-1, labels[:, None]).squeeze(-1)).sum(), leaf)
    torch.testing.assert_close(grad_in_place, expected_in_place)


def test_a_count_of_the_tiny_model_agrees_with_the_plan():
    shape = capacity_count.tiny_shape()
    count = capacity_count.count(shape, 64, world_size=1, calculate_entropy=True,
                                 parts=("model_states", "activations", "logits", "peak_total"))
    terms = trainer_memory.trainer_terms(ModelShape.from_config(shape), 64, dp_size=1, calculate_entropy=True,
                                  flash_cross_entropy=False)
    # 16 bytes per parameter; AdamW adds a 4-byte step counter per parameter tensor (35 here), not modelled
    assert 0 <= count["model_states"]["bytes"] - terms["model_states"] <= 4 * 35 + 512
    assert terms["logits"] == pytest.approx(count["logits"]["bytes"], rel=0.02)
    assert terms["activations"] == pytest.approx(count["activations"]["checkpointing"]["bytes"], rel=0.10)
    assert terms["peak"] == pytest.approx(count["peak_total"]["bytes"], rel=0.02)
