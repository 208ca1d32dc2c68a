"""``python -m runners.capacity [OVERRIDES...]``: print a launch's capacity plan (no verl, no Ray, no files).

    python -m runners.capacity +experiment=qwen3_4b_sc_repro method=sc gpu=h100_80gb   # capacity.md of one arm
    python -m runners.capacity --presets                                               # the README's preset table
    python -m runners.capacity --from-run RUN_DIR                                      # replanned from a run's first steps

Before any plan the overrides pass the launcher's checks that concern the GPUs
(:mod:`runners.capacity.launch_checks`): the schema, the arm, the rules, the verl backend's launch checks.
The plan is the one the dry run writes and the launch checks (:func:`runners.capacity.plan.plan`).

Exit status: 0 the plan fits; 2 a config error (one line, ``config error: <key> ...``, nothing planned);
5 (:data:`DOES_NOT_FIT`) the plan does not fit (the plan printed, the refusal a launch would meet on stderr).
"""

from __future__ import annotations

import argparse
import sys

from omegaconf import DictConfig

from runners.capacity import launch_checks
from runners.config.config_error import ConfigError

#: The exit status of a plan that does not fit (distinct from a config error, 2, and from Python's 1).
DOES_NOT_FIT = 5
CONFIG_ERROR = 2

#: The experiment presets of the README's table: (experiment, GPU it is meant for, arm).
PRESETS = (("qwen3_4b_sc_repro", "a100_80gb"), ("qwen3_4b_sc_repro", "h100_80gb"),
           ("qwen3_4b_sc_repro", "rtx4090_24gb"), ("qwen3_4b_sc_repro_24gb", "rtx4090_24gb"),
           ("qwen3_0p6b_1gpu", "a100_80gb"), ("qwen3_0p6b_1gpu", "h200_141gb"))


def composed(overrides: list[str]) -> DictConfig:
    """The resolved config of ``overrides``, composed as the launcher does (:func:`launch_checks.compose`)."""
    return launch_checks.compose(overrides)


def checked(overrides: list[str]) -> DictConfig:
    """:func:`composed`, then the launcher's checks (:func:`launch_checks.check`); ConfigError else."""
    cfg = composed(overrides)
    launch_checks.check(cfg)
    return cfg


def preset_table(method: str = "sc_tis") -> str:
    """A markdown row per preset: GPUs, each side's total against the GPU, fits, step time and GPU-hours with
    the range of the length assumption, disk per arm."""
    from runners.capacity.plan import plan

    rows = ["| command | GPUs | trainer GPU | rollout GPU | fits | step (est.) | GPU-hours per arm (est.; range) "
            "| disk per arm |", "|---|---|---:|---:|---|---:|---:|---:|"]
    for experiment, gpu in PRESETS:
        p = plan(checked([f"+experiment={experiment}", f"gpu={gpu}", f"method={method}"]))
        place = p["placement"]
        gpus = "1 shared" if place["shared_gpu"] else f"{place['trainer_gpus']} + {place['rollout_gpus']}"
        t, r, tm = p["trainer"], p["rollout"], p["time"]
        rows.append(f"| `+experiment={experiment} gpu={gpu}` | {gpus} x {gpu} | "
                    f"{t['per_gpu_bytes']['total'] / 1e9:.1f} of {t['gpu_bytes'] / 1e9:.1f} GB | "
                    f"{r['per_gpu_bytes']['total'] / 1e9:.1f} of {r['gpu_bytes'] / 1e9:.1f} GB | "
                    f"{'yes' if p['fits'] else '**no**: ' + ', '.join(t.get('limiting_terms', []) + r['limiting_terms'])} | "
                    f"{tm['step_seconds']:.0f} s | {tm['gpu_hours_per_arm']:.0f} ({tm['range']['low_gpu_hours_per_arm']:.0f}"
                    f"-{tm['range']['high_gpu_hours_per_arm']:.0f}) | {p['disk']['per_arm_bytes'] / 1e12:.2f} TB |")
    return "\n".join(rows)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, the config-error status
        print(f"config error: python -m runners.capacity: {message} (see --help)", file=sys.stderr)
        raise SystemExit(CONFIG_ERROR)


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="python -m runners.capacity", description=__doc__.splitlines()[0],
                     epilog=f"exit status: 0 fits; {CONFIG_ERROR} config error; {DOES_NOT_FIT} does not fit")
    parser.add_argument("--presets", action="store_true",
                        help="the table of the experiment presets (method=sc_tis; method=NAME for another arm)")
    parser.add_argument("--from-run", metavar="RUN_DIR",
                        help="replan the time of the whole experiment from a verl run's first steps")
    parser.add_argument("--steps", type=int, default=10, help="with --from-run: the first STEPS train steps (10)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as for runners/launch.py (with --from-run: "
                                                     "key=value changes of the run's config, e.g. trainer.total_steps=1000)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help (0) or a bad option (2, one line printed by _Parser.error)
        return int(done.code or 0)
    try:
        if args.presets:  # the presets' own configs; of the overrides only the arm applies
            other = [o for o in args.overrides if o.split("=", 1)[0] != "method"]
            if other:
                raise ConfigError(f"--presets plans the presets' own configs and takes only method=NAME; "
                                  f"got {' '.join(other)} (plan one config with python -m runners.capacity "
                                  f"+experiment=NAME {' '.join(other)})")
            methods = [o.split("=", 1)[1] for o in args.overrides]
            print(preset_table(*methods[-1:]))
            return 0
        if args.from_run:
            from runners.capacity import calibrate

            print(calibrate.markdown(calibrate.calibrate(args.from_run, args.overrides, steps=args.steps)))
            return 0
        from runners.capacity.plan import markdown, plan, refusal

        p = plan(checked(args.overrides))
    except ConfigError as err:
        print(f"config error: {launch_checks.one_line(err)}", file=sys.stderr)
        return CONFIG_ERROR
    print(markdown(p))
    if (reason := refusal(p)) is not None:
        print(f"does not fit: {reason}", file=sys.stderr)
        return DOES_NOT_FIT
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
