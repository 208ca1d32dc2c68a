"""Train/eval overlap: normalised exact matches and shared long word n-grams.

Normalisation (:func:`normalise`): lowercase; drop LaTeX spacing (``\\,`` ``\\;`` ``\\:`` ``\\!``
``\\quad`` ``\\qquad`` ``~`` ``\\ ``) and sizing (``\\left`` ``\\right``); every run of characters
other than (Unicode) letters and digits becomes one space. Two problems *match exactly* when their
normalised texts are equal; they *share an n-gram* when some window of ``n`` consecutive
normalised words (default 13, the long-n-gram contamination convention) appears in both.
Problems shorter than ``n`` words can only match exactly.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

_LATEX_SPACING = re.compile(r"\\(?:qquad|quad|left|right|[,;:! ])|~")
_NON_WORD = re.compile(r"[\W_]+")
DEFAULT_NGRAM = 13


def normalise(text: str) -> str:
    """Lowercase words of letters and digits, single-spaced (LaTeX spacing removed)."""
    text = _LATEX_SPACING.sub(" ", text.lower())
    return _NON_WORD.sub(" ", text).strip()


def ngrams(words: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def overlap_report(
    train: list[tuple[str, str]], evals: dict[str, list[tuple[str, str]]], *, n: int = DEFAULT_NGRAM
) -> dict[str, Any]:
    """Overlap of each eval set with the train problems.

    ``train`` and each ``evals[name]`` are ``(problem_id, problem text)`` pairs. Returns a JSON-ready
    dict: per set the number of problems, exact matches and n-gram overlaps, each with the matching
    ids (for n-grams also the number of shared n-grams and the largest share of the eval problem's
    n-grams found in one train problem).
    """
    eval_norm = {name: [(pid, normalise(t)) for pid, t in items] for name, items in evals.items()}
    exact_index: dict[str, list[tuple[str, str]]] = defaultdict(list)
    gram_index: dict[tuple[str, ...], list[tuple[str, str]]] = defaultdict(list)
    eval_grams: dict[tuple[str, str], set] = {}
    for name, items in eval_norm.items():
        for pid, norm in items:
            exact_index[norm].append((name, pid))
            grams = ngrams(norm.split(), n)
            eval_grams[(name, pid)] = grams
            for g in grams:
                gram_index[g].append((name, pid))

    exact: dict[tuple[str, str], list[str]] = defaultdict(list)
    shared: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    for train_id, text in train:
        norm = normalise(text)
        for key in exact_index.get(norm, ()):
            exact[key].append(train_id)
        counts: dict[tuple[str, str], int] = defaultdict(int)
        for g in ngrams(norm.split(), n):
            for key in gram_index.get(g, ()):
                counts[key] += 1
        for key, c in counts.items():
            shared[key][train_id] = c

    sets: dict[str, Any] = {}
    for name, items in eval_norm.items():
        exact_matches = [
            {"eval_id": pid, "train_ids": exact[(name, pid)]} for pid, _ in items if exact[(name, pid)]
        ]
        gram_matches = []
        for pid, _ in items:
            hits = shared.get((name, pid))
            if not hits:
                continue
            total = len(eval_grams[(name, pid)])
            gram_matches.append(
                {
                    "eval_id": pid,
                    "train_ids": sorted(hits),
                    "shared_ngrams": max(hits.values()),
                    "max_fraction": max(hits.values()) / total,
                }
            )
        sets[name] = {
            "n_problems": len(items),
            "exact_match": {"count": len(exact_matches), "matches": exact_matches},
            "ngram_overlap": {"count": len(gram_matches), "matches": gram_matches},
        }
    return {
        "normalisation": "lowercase; LaTeX spacing/sizing removed; non-alphanumeric runs -> one space",
        "ngram_n": n,
        "n_train": len(train),
        "sets": sets,
    }
