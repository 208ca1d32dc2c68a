"""A task whose correct responses are diverse: add up single-digit terms in any order, with a scratchpad.

`conf/data/sum_scratchpad.yaml`. A prompt lists `data.terms` single-digit numbers (1 ..
`data.max_term`), e.g. `3+7+5+9+2=? \\boxed{}`. A correct response writes the running sum in an
order of its own choosing and boxes the total:

    7+3=10 10+5=15 15+9=24 24+2=26 \\boxed{26}

Any order of the terms is correct, so the correct responses of a group diverge from their first
token (5 terms: up to 120 orders, 5 x 4 x 3 x 2 choices at the term positions), and responses
are 30-45 tokens long. Only the boxed total is scored (verl's `math_dapo`, as for every task):
the scratchpad is the model's own business, so RL can reshape it. The warm start teaches the
format with a uniformly random order (`reference_response`), so the base model's choice positions
carry up to log(5) nats of entropy, which is what gives score centering a prefix-dependent drift
to correct (docs/drift_study.md).

The problem space is every ordered tuple of terms (`max_term ** terms`), indexed in base
`max_term`; held-out sets and the training stream come from `runners.tiny.arithmetic_task.SeededTask`.
"""

from __future__ import annotations

import torch
from omegaconf import DictConfig

from runners.config.config_error import ConfigError
from runners.tiny.arithmetic_task import Problem, SeededTask, _int_key

TRAIN_DATA_SOURCE = "scratch_train"
PROMPT_SUFFIX = "=? \\boxed{}"


class ScratchpadSumTask(SeededTask):
    """Sums of `data.terms` single-digit terms, answered with a running-sum scratchpad.

    Config keys (`data` group): terms (2 .. 9), max_term (1 .. 9: terms are 1 .. max_term),
    seed (the data seed; fixes the eval sets), eval_sets (a list of {name, size}). A bad value
    raises ConfigError naming the key.
    """

    train_data_source = TRAIN_DATA_SOURCE

    def __init__(self, data_cfg: DictConfig) -> None:
        self.terms = _int_key(data_cfg, "terms", minimum=2)
        if self.terms > 9:
            raise ConfigError(f"data.terms must be an integer in 2 .. 9, got {self.terms}")
        self.max_term = _int_key(data_cfg, "max_term", minimum=1)
        if self.max_term > 9:
            raise ConfigError(f"data.max_term must be an integer in 1 .. 9 (single digits), got {self.max_term}")
        super().__init__(data_cfg, self.max_term**self.terms, f"{self.terms} terms of 1..{self.max_term}")

    def operands(self, index: int) -> tuple[int, ...]:
        """The terms of problem ``index`` (base-``max_term`` digits, most significant first, plus 1)."""
        digits = []
        for _ in range(self.terms):
            index, digit = divmod(index, self.max_term)
            digits.append(digit + 1)
        return tuple(reversed(digits))

    def _problem(self, index: int, problem_id: str | None, data_source: str) -> Problem:
        terms = self.operands(index)
        expression = "+".join(str(t) for t in terms)
        return Problem(
            problem_id=problem_id or f"{data_source}-{expression}",
            data_source=data_source,
            messages=[{"role": "user", "content": expression + PROMPT_SUFFIX}],
            answer=str(sum(terms)),
        )

    @staticmethod
    def terms_of(problem: Problem) -> list[int]:
        """The terms of a problem, read back from its prompt."""
        expression = problem.messages[0]["content"].removesuffix(PROMPT_SUFFIX)
        return [int(t) for t in expression.split("+")]

    def reference_response(self, problem: Problem, generator: torch.Generator) -> str:
        """The scratchpad for a uniformly random order of the terms (drawn from ``generator``)."""
        terms = self.terms_of(problem)
        order = torch.randperm(len(terms), generator=generator).tolist()
        return scratchpad([terms[i] for i in order])

    def max_response_tokens(self) -> int:
        """Tokens of the longest correct response (all terms at max_term), its eos included."""
        return len(scratchpad([self.max_term] * self.terms)) + 1


def scratchpad(terms: list[int]) -> str:
    """`t1+t2=s2 s2+t3=s3 ... \\boxed{total}` for terms added in the given order."""
    total = terms[0]
    steps = []
    for term in terms[1:]:
        steps.append(f"{total}+{term}={total + term}")
        total += term
    return " ".join(steps) + " \\boxed{" + str(total) + "}"
