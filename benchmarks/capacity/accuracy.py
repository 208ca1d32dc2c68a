"""The capacity plan's trainer terms against torch's own accounting (docs/capacity.md, "Accuracy").

    python benchmarks/capacity/accuracy.py [--counts DIR] [--only NAME ...]

For each configuration of :data:`CASES`, ``benchmarks/capacity/count.py`` counts one micro-batch of verl's
FSDP2 actor with torch's memory trackers on fake tensors (cached as ``DIR/NAME.json``; minutes per Qwen3-4B
case), and :func:`runners.capacity.trainer_memory.trainer_terms` predicts the same terms; the table gives predicted,
counted and their ratio per term:

* model states (count: sharded parameters, gradients and AdamW states after a step);
* gathered units (count: the joint peak of the unsharded parameters and gradients with their temporaries);
* activations with and without gradient checkpointing (count: the decoder stack alone);
* logits, and logits with the SC head where the case has one (count: the logits path alone);
* the micro-batch's peak with its optimizer step (count: the whole FSDP2 step), against the plan's ``peak``.

The GPU's log-prob path (flash-attn's cross-entropy) is counted with the harness's stand-in, called as verl 0.9.1
calls flash-attn (``inplace_backward = not calculate_entropy``: without the entropy the gradient overwrites the
logits), the fallback of a machine without flash-attn with verl's own function. A cached count made before the
stand-in had its in-place mode (no ``inplace_backward`` in it) is counted again.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from runners.capacity import trainer_memory  # noqa: E402
from runners.config.model_shapes import ModelShape  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    model: str  # capacity_count's model name
    tokens: int
    world_size: int
    entropy: bool
    log_probs: str  # "flash" (the GPU path) or "torch" (verl's fallback)
    sc_top_k: int = 0


CASES = (
    Case("tiny-64-w1", "tiny", 64, 1, True, "torch"),
    Case("0.6B-2048-w4", "Qwen3-0.6B", 2_048, 4, True, "flash"),
    Case("0.6B-8192-w4-sc", "Qwen3-0.6B", 8_192, 4, True, "flash", 128),
    Case("4B-4096-w4", "Qwen3-4B", 4_096, 4, True, "flash"),
    Case("4B-16384-w4-sc", "Qwen3-4B", 16_384, 4, True, "flash", 128),
    Case("4B-16384-w4-torch", "Qwen3-4B", 16_384, 4, True, "torch"),
    Case("4B-4096-w1-noentropy", "Qwen3-4B", 4_096, 1, False, "flash"),
)


def counted(case: Case, cache: Path) -> dict[str, Any]:
    """The count of ``case`` (from ``cache`` when there, else counted now and cached)."""
    from benchmarks.capacity import count as capacity_count

    path = cache / f"{case.name}.json"
    if path.exists() and "inplace_backward" in (cached := json.loads(path.read_text())):
        return cached
    print(f"counting {case.name} ...", file=sys.stderr, flush=True)
    result = capacity_count.count(capacity_count.model_shape(case.model), case.tokens, world_size=case.world_size,
                                  calculate_entropy=case.entropy, sc_top_k=case.sc_top_k, log_probs=case.log_probs)
    cache.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result) + "\n")
    return result


def rows(case: Case, count: dict[str, Any]) -> list[tuple[str, int, int]]:
    """``(term, predicted, counted)`` of one case."""
    shape = ModelShape.from_config(count["shape"])
    setup = {"calculate_entropy": case.entropy, "flash_cross_entropy": case.log_probs == "flash"}
    plan = trainer_memory.trainer_terms(shape, case.tokens, dp_size=case.world_size, sc_top_k=case.sc_top_k, **setup)
    no_ckpt = trainer_memory.trainer_terms(shape, case.tokens, dp_size=case.world_size, gradient_checkpointing=False,
                                    **setup)
    plain = trainer_memory.trainer_terms(shape, case.tokens, dp_size=case.world_size, **setup)
    out = [("model states", plan["model_states"], count["model_states"]["bytes"]),
           ("gathered units", plan["gathered"], count["gathered"]["with_temporaries_joint_peak"]),
           ("activations, checkpointing", plan["activations"], count["activations"]["checkpointing"]["bytes"]),
           ("activations, no checkpointing", no_ckpt["activations"], count["activations"]["no_checkpointing"]["bytes"]),
           ("logits", plain["logits"], count["logits"]["bytes"])]
    if case.sc_top_k:
        s = trainer_memory.TrainerSetup(tokens=case.tokens, dp_size=case.world_size, sc_top_k=case.sc_top_k, **setup)
        lg, (kept, backward) = trainer_memory.logits_bytes(shape, s), trainer_memory.sc_head_bytes(shape, s)
        with_head = max(lg["forward_end"] + kept, lg["backward_start"] + kept + backward, lg["entropy_backward"] + kept)
        out.append(("logits with the SC head", with_head, count["sc_head"]["with_head"]["bytes"]))
    out.append(("peak of the step", plan["peak"], count["peak_total"]["bytes"]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=Path, default=ROOT / "results" / "capacity_counts",
                        help="where counts are cached (default results/capacity_counts)")
    parser.add_argument("--only", nargs="*", help="case names (default: all)")
    parser.add_argument("--json", type=Path, help="also write the table as JSON")
    args = parser.parse_args(argv)
    table = []
    print("| case | term | predicted (GB) | counted (GB) | predicted / counted |")
    print("|---|---|---:|---:|---:|")
    for case in CASES:
        if args.only and case.name not in args.only:
            continue
        for term, predicted, count in rows(case, counted(case, args.counts)):
            ratio = predicted / count if count else float("nan")
            table.append({"case": case.name, "term": term, "predicted": predicted, "counted": count, "ratio": ratio})
            print(f"| {case.name} | {term} | {predicted / 1e9:.3f} | {count / 1e9:.3f} | {ratio:.3f} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"cases": [dataclasses.asdict(c) for c in CASES], "rows": table}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
