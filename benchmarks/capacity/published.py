"""The capacity plan's time estimate against published step times (docs/capacity.md, "Time against published runs").

    python benchmarks/capacity/published.py [--json FILE]

For each published run whose setup is known well enough, the plan's timing model
(:mod:`runners.capacity.timing`, with the project's default assumptions of ``conf/backend/verl.yaml``) is run
on that setup and set beside the published figure, as a ratio estimate / published. Where the run does not
publish its mean response length, the estimate is given at three assumed means (a quarter, half and all of
the response cap), so the spread the unknown length alone causes is visible. Figures and their sources:

* slime issue #385 (github.com/THUDM/slime/issues/385): verl at "equal config" to slime's Qwen3-0.6B recipe on
  2 x H200, 1,152 prompts x 5 responses of at most 1,024 tokens, trainer and rollout colocated: 33.6 s per
  step, 9.1 s of it generation;
* SkyRL PR #2244 (github.com/NovaSky-AI/SkyRL/pull/2244): Qwen3-1.7B-Base on 8 x H100, 4 FSDP trainer GPUs and
  4 vLLM engines at TP 1, fully async, 32 prompts per step: policy training 14 s per step, 18-20 s per step;
  the responses per prompt and the lengths are not published (assumed here: 8 responses, cap 8,192);
* verl PR #8010 (commit 8718ca30, from a secondary digest): Qwen3-0.6B on Countdown, 2 x RTX PRO 6000 (96 GB,
  1,792 GB/s, 500 dense bf16 TFLOPS derived from the 4,000 sparse FP4 TOPS), 64 prompts x 8 responses: PG 14-17
  s per step, SC 25 s (14-16 s once vLLM returned flat log-probs); the placement and the lengths are not
  published (assumed: one trainer and one vLLM GPU, prompts of 256 and responses of at most 1,024 tokens);
* the Qwen3-4B GRPO run on 8 x RTX 4090 of the project's seed document (figures as issue 43 quotes them): about
  23 minutes an iteration, rollout 85-96% of it, about 46% of the responses at the 8,192-token cap early and 21%
  at iteration 120; its setup is its parent recipe, THUDM/slime ``scripts/run-qwen3-4B.sh``: colocated on the 8
  GPUs, 32 prompts x 8 responses, SGLang at TP 2 with 0.7 of the memory, Megatron TP 2, 9,216 tokens per GPU.
  The GeForce cards have no peer-to-peer: the TP all-reduces go through host memory.

Each row gives the plan's range (:func:`runners.capacity.timing.range_ends`) and whether it meets the published
figure, and the ratio of the plan's point estimate (the config's assumptions) to the published figure (the middle
of a published range); the last line is the band of that ratio over all the comparisons.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from omegaconf import OmegaConf

from runners.capacity import rollout_memory, timing
from runners.config.model_shapes import PUBLISHED

ROOT = Path(__file__).resolve().parents[2]
FRACTIONS = (0.25, 0.5, 1.0)


def default_assumptions() -> timing.TimeAssumptions:
    """The time assumptions as ``conf/backend/verl.yaml`` sets them."""
    time = OmegaConf.load(ROOT / "conf" / "backend" / "verl.yaml").capacity.time
    return timing.TimeAssumptions(**{f.name: float(time[f.name]) for f in dataclasses.fields(timing.TimeAssumptions)})


#: The intra-node links of the runs below (the values of conf/gpu/*.yaml's intra_node_link where a preset has the GPU).
NVLINK4 = timing.Link("nvlink4", 450e9, 3e-6)
PCIE5_P2P = timing.Link("pcie5_p2p", 50e9, 10e-6)
PCIE4_NO_P2P = timing.Link("pcie4_no_p2p", 12e9, 20e-6)


@dataclasses.dataclass(frozen=True)
class Published:
    name: str
    model: str
    gpu_bytes: float
    bandwidth: float
    flops: float
    trainer_gpus: int
    rollout_gpus: int
    shared: bool
    utilization: float
    prompts: int
    n: int
    max_prompt: int
    max_response: int
    figures: dict[str, str]  # what was published: quantity -> seconds (text)
    compare: dict[str, tuple[float, float]]  # quantity -> the published seconds (low, high; equal for one figure)
    link: timing.Link = NVLINK4
    tensor_parallel: int = 1
    train_micro_batch_tokens: int = 16_384


RUNS = (
    Published("slime #385, verl at equal config", "Qwen/Qwen3-0.6B", 141e9, 4.8e12, 989.5e12, 2, 2, True, 0.5,
              1_152, 5, 256, 1_024, {"step": "33.6", "generation": "9.1"}, {"step": (33.6, 33.6), "generation": (9.1, 9.1)}),
    Published("SkyRL #2244", "Qwen/Qwen3-1.7B", 80e9, 3.35e12, 989.5e12, 4, 4, False, 0.85, 32, 8, 1_024, 8_192,
              {"step": "18-20", "training": "14"}, {"step": (18.0, 20.0), "training": (14.0, 14.0)}),
    Published("verl #8010 (PG)", "Qwen/Qwen3-0.6B", 96e9, 1.792e12, 500e12, 1, 1, False, 0.85, 64, 8, 256, 1_024,
              {"step": "14-17"}, {"step": (14.0, 17.0)}, link=PCIE5_P2P),
    Published("Qwen3-4B GRPO, 8 x RTX 4090 (slime, colocated)", "Qwen/Qwen3-4B", 24e9, 1.008e12, 165.2e12, 8, 8, True,
              0.7, 32, 8, 1_024, 8_192, {"step": "~1,380 (23 min)", "generation": "1,170-1,325 (85-96%)"},
              {"step": (1_380.0, 1_380.0), "generation": (1_170.0, 1_325.0)}, link=PCIE4_NO_P2P, tensor_parallel=2,
              train_micro_batch_tokens=9_216),
)


def _setup(run: Published) -> tuple:
    shape = PUBLISHED[run.model]
    setup = rollout_memory.RolloutSetup(gpu_bytes=int(run.gpu_bytes), gpu_memory_utilization=run.utilization,
                                 tensor_parallel=run.tensor_parallel, sequence_tokens=run.max_prompt + run.max_response,
                                 outside_torch_bytes=500_000_000, cuda_graph_bytes=1_000_000_000)
    r = rollout_memory.rollout_terms(shape, setup)
    hw = timing.Hardware(bandwidth_bytes_per_s=run.bandwidth, bf16_flops=run.flops, trainer_gpus=run.trainer_gpus,
                         rollout_gpus=run.rollout_gpus, tensor_parallel=run.tensor_parallel, shared_gpu=run.shared,
                         weights_bytes_per_rank=r["weights"], kv_bytes_per_token=r["kv_bytes_per_token"],
                         kv_capacity_tokens=r["kv_capacity_tokens"], max_num_seqs=256, intra_node_link=run.link)
    work = timing.Workload(prompts_per_step=run.prompts, n=run.n, max_prompt_length=run.max_prompt,
                           max_response_length=run.max_response, total_steps=1, test_freq=0, eval_prompts=0, eval_n=0,
                           gradient_checkpointing=True, tokens_per_micro_batch=run.train_micro_batch_tokens)
    return shape, hw, work


def _parts(out: dict) -> dict[str, float]:
    return {"step": out["step_seconds"], "generation": out["generation"]["seconds"], "training": out["train_seconds"]}


def estimate(run: Published, fraction: float, ta: timing.TimeAssumptions) -> dict[str, float]:
    """The plan's step, generation and training at mean response ``fraction`` of the cap (the other assumptions
    the config's)."""
    shape, hw, work = _setup(run)
    return _parts(timing.step_and_experiment(shape, work, hw, dataclasses.replace(ta, mean_response_fraction=fraction)))


def plan_range(run: Published, ta: timing.TimeAssumptions) -> dict[str, dict[str, float]]:
    """The plan's point estimate and its range's two ends (:func:`runners.capacity.timing.range_ends`)."""
    shape, hw, work = _setup(run)
    out = {"point": _parts(timing.step_and_experiment(shape, work, hw, ta))}
    for end, (t, costs) in timing.range_ends(ta).items():
        out[end] = _parts(timing.step_and_experiment(shape, work, hw, t, costs))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = parser.parse_args(argv)
    ta = default_assumptions()
    rows = []
    print("| run | quantity | published (s) | " + " | ".join(f"at mean response {f:g} x cap (s)" for f in FRACTIONS)
          + " | plan: range (point) (s) | in the range | plan / published |")
    print("|---|---|---:|" + "---:|" * len(FRACTIONS) + "---:|---|---:|")
    for run in RUNS:
        estimates = {f: estimate(run, f, ta) for f in FRACTIONS}
        ranged = plan_range(run, ta)
        for quantity, (first, last) in run.compare.items():
            values = [estimates[f][quantity] for f in FRACTIONS]
            low, point, high = (ranged[k][quantity] for k in ("low", "point", "high"))
            ratio = point / ((first + last) / 2)  # against the middle of a published range
            inside = low <= last and first <= high  # the plan's range meets the published one
            rows.append({"run": run.name, "quantity": quantity, "published": run.figures[quantity],
                         "estimates": dict(zip(map(str, FRACTIONS), values, strict=True)), "low": low, "point": point,
                         "high": high, "inside": inside, "ratio": ratio})
            print(f"| {run.name} | {quantity} | {run.figures[quantity]} | " + " | ".join(f"{v:.1f}" for v in values)
                  + f" | {low:.1f}-{high:.1f} ({point:.1f}) | {'yes' if inside else '**no**'} | {ratio:.2f} |")
    ratios = [r["ratio"] for r in rows]
    print(f"\nplan / published at the plan's own assumptions, over all {len(rows)} comparisons: "
          f"{min(ratios):.2f}-{max(ratios):.2f}; inside the plan's range: {sum(r['inside'] for r in rows)} of {len(rows)}")
    if args.json:
        args.json.write_text(json.dumps({"assumptions": dataclasses.asdict(ta), "engine": dataclasses.asdict(timing.ENGINE),
                                         "rows": rows, "band": [min(ratios), max(ratios)]}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
