"""The seeded synthetic verifiable math task of the embedded backend (`conf/data/synthetic_arith.yaml`).

Problems are `a <op> b` with both operands of exactly `data.digits` digits. The problem space is
every ordered pair, indexed `i = (a - lo) * span + (b - lo)`. From it, with `data.seed`, the
task draws held-out evaluation sets (the miniature of AIME 2024/2025: two sets of 30 with
distinct `data_source` names); the training stream samples uniformly, with replacement, from
the rest, so no held-out problem is ever trained on. Answers are scored by verl's `math_dapo`
scorer, the same reward function as the GPU reproduction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, ListConfig

from runners.config.config_error import ConfigError
from runners.tiny.tokenizer import CHARACTERS

OPERATIONS: dict[str, tuple[str, Callable[[int, int], int]]] = {
    "add": ("+", lambda a, b: a + b),
    "sub": ("-", lambda a, b: a - b),
    "mul": ("*", lambda a, b: a * b),
}
TRAIN_DATA_SOURCE = "arith_train"
_PLACEHOLDERS = ("{a}", "{op}", "{b}")


@dataclass(frozen=True)
class Problem:
    """One prompt with its verifiable answer.

    problem_id is stable across runs and machines: `<data_source>-<NN>` for held-out problems
    (position in the set), `arith_train-<a><op><b>` for training problems.
    messages is the chat (one user turn) to pass through the tokenizer's chat template.
    """

    problem_id: str
    data_source: str
    messages: list[dict[str, str]] = field(hash=False)
    answer: str


class SeededTask:
    """A finite problem space indexed ``0 .. space_size - 1``, split into held-out sets and a training stream.

    With ``data.seed``, ``data.eval_sets`` (a list of {name, size}) are drawn without replacement
    from the space; the training stream samples uniformly, with replacement, from the rest, so no
    held-out problem is ever trained on. Subclasses define the space (``space_size``), a problem
    (``_problem``), the reference response of the warm start (``reference_response``) and the
    length bounds; the reward is verl's ``math_dapo`` scorer for every task.
    """

    train_data_source = TRAIN_DATA_SOURCE

    def __init__(self, data_cfg: DictConfig, space_size: int, description: str) -> None:
        self.seed = _int_key(data_cfg, "seed", minimum=0)
        self.space_size = space_size
        specs = _eval_specs(data_cfg.get("eval_sets"), self.train_data_source)
        total = sum(size for _, size in specs)
        if total >= self.space_size:
            raise ConfigError(
                f"data.eval_sets hold {total} problems in all, but {description} has only {self.space_size} "
                "(some must remain for training)"
            )
        rng = np.random.default_rng(self.seed)
        drawn = rng.choice(self.space_size, size=total, replace=False)
        self._eval: dict[str, list[Problem]] = {}
        start = 0
        for name, size in specs:
            width = max(2, len(str(size - 1)))
            self._eval[name] = [
                self._problem(int(index), f"{name}-{position:0{width}d}", name)
                for position, index in enumerate(drawn[start : start + size])
            ]
            start += size
        # For the rank -> index map of the training stream (see _train_indices).
        self._held_out = np.sort(drawn).astype(np.int64)
        self._held_out_gaps = self._held_out - np.arange(len(self._held_out), dtype=np.int64)
        self.train_size = self.space_size - total
        self._verl_score: Callable[..., dict[str, Any]] | None = None

    def _problem(self, index: int, problem_id: str | None, data_source: str) -> Problem:
        raise NotImplementedError

    def reference_response(self, problem: Problem, generator: torch.Generator) -> str:
        """A correct response for the supervised warm start (may draw from ``generator``)."""
        raise NotImplementedError

    def max_response_tokens(self) -> int:
        """Tokens of the longest correct response, its eos included (character tokenizer)."""
        raise NotImplementedError

    # -- problems ---------------------------------------------------------------------------

    def eval_sets(self) -> dict[str, list[Problem]]:
        """Held-out sets by data_source name, in config order (fresh lists; same problems every call)."""
        return {name: list(problems) for name, problems in self._eval.items()}

    def held_out_ids(self) -> set[int]:
        """Problem-space indices of every held-out problem."""
        return set(self._held_out.tolist())

    def sample_train(self, generator: torch.Generator | np.random.Generator, n: int) -> list[Problem]:
        """Draw `n` training problems uniformly (with replacement) from the non-held-out space.

        Reproducible: the result depends only on the generator's state (which it advances) and
        the data config. Accepts a CPU `torch.Generator` or a numpy `Generator`.
        """
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        if isinstance(generator, torch.Generator):
            ranks = torch.randint(0, self.train_size, (n,), generator=generator).numpy()
        elif isinstance(generator, np.random.Generator):
            ranks = generator.integers(0, self.train_size, size=n)
        else:
            raise TypeError(f"generator must be a torch.Generator or numpy Generator, got {type(generator)}")
        return [self._problem(int(i), None, self.train_data_source) for i in self._train_indices(ranks)]

    def _train_indices(self, ranks: np.ndarray) -> np.ndarray:
        # The r-th (0-based) index not held out is r + #{held-out h_j : h_j - j <= r}.
        ranks = np.asarray(ranks, dtype=np.int64)
        return ranks + np.searchsorted(self._held_out_gaps, ranks, side="right")

    def max_prompt_tokens(self, tokenizer: Any) -> int:
        """Tokens of the longest chat-templated prompt (the last problem of the space is the longest)."""
        largest = self._problem(self.space_size - 1, "probe", "probe")
        return len(prompt_token_ids(tokenizer, largest))

    # -- reward -----------------------------------------------------------------------------

    def score(self, response_text: str, problem: Problem) -> tuple[float, int]:
        """(score, acc) of a decoded response: +1.0/1 if correct, -1.0/0 otherwise.

        Uses `verl.utils.reward_score.math_dapo.compute_score(response_text, problem.answer)`;
        a correct answer must be the last `\\boxed{...}` (or an `Answer: ...` line). verl is
        imported on the first call only (it costs several seconds).
        """
        if self._verl_score is None:
            from verl.utils.reward_score import math_dapo

            self._verl_score = math_dapo.compute_score
        result = self._verl_score(response_text, problem.answer)
        return float(result["score"]), int(bool(result["acc"]))


class ArithmeticTask(SeededTask):
    """Seeded arithmetic problems `a <op> b`: held-out eval sets, a training stream, and the reward.

    Config keys (`data` group): digits (>= 1), operation (add | sub | mul), seed (the data
    seed; fixes the eval sets, independent of the run seed), prompt_template (contains `{a}`
    and `{b}`, optionally `{op}`; every other character must be in the tokenizer's vocabulary),
    eval_sets (a list of {name, size}; names distinct and not the training stream's name).
    Any bad value raises ConfigError naming the key, before anything is computed.
    """

    def __init__(self, data_cfg: DictConfig) -> None:
        self.digits = _int_key(data_cfg, "digits", minimum=1)
        self.operation = data_cfg.get("operation", "add")
        if self.operation not in OPERATIONS:
            raise ConfigError(f"data.operation must be one of {sorted(OPERATIONS)}, got {self.operation!r}")
        self.op_symbol, self._apply = OPERATIONS[self.operation]
        self.prompt_template = _check_template(data_cfg.get("prompt_template"))
        self._lo = 10 ** (self.digits - 1) if self.digits > 1 else 0
        self._span = 10**self.digits - self._lo
        super().__init__(data_cfg, self._span * self._span, f"{self.digits}-digit {self.operation}")

    def _problem(self, index: int, problem_id: str | None, data_source: str) -> Problem:
        a = self._lo + index // self._span
        b = self._lo + index % self._span
        content = (
            self.prompt_template.replace("{a}", str(a)).replace("{op}", self.op_symbol).replace("{b}", str(b))
        )
        return Problem(
            problem_id=problem_id or f"{data_source}-{a}{self.op_symbol}{b}",
            data_source=data_source,
            messages=[{"role": "user", "content": content}],
            answer=str(self._apply(a, b)),
        )

    def reference_response(self, problem: Problem, generator: torch.Generator) -> str:
        """`\\boxed{<answer>}` (draws nothing from ``generator``)."""
        return response_text(problem)

    # -- lengths ----------------------------------------------------------------------------

    def max_answer_chars(self) -> int:
        """Characters of the longest answer in the problem space (sign included)."""
        hi = self._lo + self._span - 1
        corners = [self._apply(x, y) for x in (self._lo, hi) for y in (self._lo, hi)]
        return max(len(str(c)) for c in corners)

    def max_response_tokens(self) -> int:
        """Tokens of the longest correct response `\\boxed{<answer>}<|im_end|>` (char tokenizer)."""
        return len("\\boxed{}") + self.max_answer_chars() + 1


def prompt_token_ids(tokenizer: Any, problem: Problem) -> list[int]:
    """The chat-templated prompt of `problem` (with the assistant generation prompt) as token ids."""
    text = tokenizer.apply_chat_template(problem.messages, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def response_text(problem: Problem) -> str:
    """The reference (supervised warm-start target) response text: `\\boxed{<answer>}`."""
    return "\\boxed{" + problem.answer + "}"


# -- config checks --------------------------------------------------------------------------


def _int_key(cfg: DictConfig, key: str, minimum: int) -> int:
    value = cfg.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"data.{key} must be an integer >= {minimum}, got {value!r}")
    return value


def _check_template(template: Any) -> str:
    if not isinstance(template, str):
        raise ConfigError(f"data.prompt_template must be a string, got {template!r}")
    for placeholder in ("{a}", "{b}"):
        if placeholder not in template:
            raise ConfigError(f"data.prompt_template must contain {placeholder}, got {template!r}")
    rest = template
    for placeholder in _PLACEHOLDERS:
        rest = rest.replace(placeholder, "")
    uncovered = sorted(set(rest) - set(CHARACTERS))
    if uncovered:
        raise ConfigError(
            f"data.prompt_template uses characters outside the tokenizer vocabulary: {uncovered} "
            f"(allowed: {CHARACTERS!r})"
        )
    return template


def _eval_specs(eval_sets: Any, train_data_source: str = TRAIN_DATA_SOURCE) -> list[tuple[str, int]]:
    if not isinstance(eval_sets, list | ListConfig) or len(eval_sets) == 0:
        raise ConfigError(f"data.eval_sets must be a non-empty list of {{name, size}}, got {eval_sets!r}")
    specs: list[tuple[str, int]] = []
    for position, entry in enumerate(eval_sets):
        name = entry.get("name") if hasattr(entry, "get") else None
        size = entry.get("size") if hasattr(entry, "get") else None
        if not isinstance(name, str) or not name or name != name.lower() or "/" in name:
            raise ConfigError(
                f"data.eval_sets[{position}].name must be a non-empty lowercase string, got {name!r}"
            )
        if name == train_data_source:
            raise ConfigError(
                f"data.eval_sets[{position}].name may not be {train_data_source!r} (the training stream)"
            )
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigError(f"data.eval_sets[{position}].size must be an integer >= 1, got {size!r}")
        specs.append((name, size))
    names = [name for name, _ in specs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ConfigError(
            f"data.eval_sets names must be distinct (they are data_source values), repeated: {duplicates}"
        )
    return specs
