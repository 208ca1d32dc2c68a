"""``python -m runners.capacity [OVERRIDES...]``: print a launch's capacity plan (no verl, no Ray, no files).

    python -m runners.capacity +experiment=qwen3_4b_sc_repro method=sc gpu=h100_80gb   # capacity.md of one arm
    python -m runners.capacity --presets                                               # the README's preset table

The plan is the one the dry run writes and the launch checks (:func:`runners.capacity.plan.plan`).
"""

from __future__ import annotations

import argparse
import sys

from omegaconf import DictConfig, OmegaConf

#: The experiment presets of the README's table: (experiment, GPU it is meant for, arm).
PRESETS = (("qwen3_4b_sc_repro", "a100_80gb"), ("qwen3_4b_sc_repro", "h100_80gb"),
           ("qwen3_4b_sc_repro", "rtx4090_24gb"), ("qwen3_4b_sc_repro_24gb", "rtx4090_24gb"),
           ("qwen3_0p6b_1gpu", "a100_80gb"), ("qwen3_0p6b_1gpu", "h200_141gb"))


def composed(overrides: list[str]) -> DictConfig:
    from hydra import compose, initialize_config_dir

    from runners.validate import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("config", overrides=overrides)
    OmegaConf.resolve(cfg)
    return cfg


def preset_table(method: str = "sc_tis") -> str:
    """A markdown row per preset: GPUs, each side's total against the GPU, fits, step time and GPU-hours."""
    from runners.capacity.plan import plan

    rows = ["| command | GPUs | trainer GPU | rollout GPU | fits | step (est.) | GPU-hours per arm (est.) |",
            "|---|---|---:|---:|---|---:|---:|"]
    for experiment, gpu in PRESETS:
        p = plan(composed([f"+experiment={experiment}", f"gpu={gpu}", f"method={method}"]))
        place = p["placement"]
        gpus = "1 shared" if place["shared_gpu"] else f"{place['trainer_gpus']} + {place['rollout_gpus']}"
        t, r = p["trainer"], p["rollout"]
        rows.append(f"| `+experiment={experiment} gpu={gpu}` | {gpus} x {gpu} | "
                    f"{t['per_gpu_bytes']['total'] / 1e9:.1f} of {t['gpu_bytes'] / 1e9:.1f} GB | "
                    f"{r['per_gpu_bytes']['total'] / 1e9:.1f} of {r['gpu_bytes'] / 1e9:.1f} GB | "
                    f"{'yes' if p['fits'] else '**no**: ' + ', '.join(t.get('limiting_terms', []) + r['limiting_terms'])} | "
                    f"{p['time']['step_seconds']:.0f} s | {p['time']['gpu_hours_per_arm']:.0f} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runners.capacity", description=__doc__.splitlines()[0])
    parser.add_argument("--presets", action="store_true", help="the table of the experiment presets (method=sc_tis)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as for runners/launch.py")
    args = parser.parse_args(argv)
    if args.presets:
        print(preset_table())
        return 0
    from runners.capacity.plan import markdown, plan, refusal

    cfg = composed(args.overrides)
    if OmegaConf.select(cfg, "backend.name") != "verl":
        print("capacity: the plan is of a verl launch (+experiment=qwen3_4b_sc_repro, ...); the embedded default "
              "runs on a CPU", file=sys.stderr)
        return 2
    try:
        p = plan(cfg)
    except ValueError as err:
        print(f"capacity: {err}", file=sys.stderr)
        return 2
    print(markdown(p))
    if (reason := refusal(p)) is not None:
        print(f"a launch would be refused: {reason}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
