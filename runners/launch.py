"""The Hydra entry point: ``python runners/launch.py [-m] method=pg,tis,sc,sc_tis seed=42 [+experiment=NAME]``.

Before any compute, every job of the sweep is composed and validated (``runners.validate``), so
a config that cannot work fails at once with a message naming the key, and nothing already in
``results/`` is touched. Then, per job: write ``config.yaml`` into the run folder
(``results/<sweep>/<method>-seed<seed>/``) and hand the run to the backend.
"""

from __future__ import annotations

import itertools
import logging
import sys

import hydra
from omegaconf import DictConfig, OmegaConf

from runners.provenance import config_sha256
from runners.run_record import atomic_write_text
from runners.validate import CONF_DIR, ConfigError, backend_module, run_dir_of, validate

log = logging.getLogger("runners.launch")


def job_overrides(argv: list[str]) -> list[list[str]]:
    """The override list of every job the command line describes (the cartesian product of sweeps)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides = [a for a in argv if not a.startswith("-") and "=" in a and not a.lstrip("+~").startswith("hydra")]
    multirun = any(a in ("-m", "--multirun") for a in argv)
    parsed = OverridesParser.create().parse_overrides(overrides)
    axes = []
    for o in parsed:
        key = o.get_key_element()
        if multirun and o.is_sweep_override():
            axes.append([f"{key}={v}" for v in o.sweep_string_iterator()])
        else:
            axes.append([f"{key}={o.get_value_element_as_str()}"])
    return [list(combo) for combo in itertools.product(*axes)]


def prevalidate(argv: list[str]) -> None:
    """Compose and validate every job before the first one starts."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        for overrides in job_overrides(argv):
            cfg = compose(config_name="config", overrides=overrides)
            validate(cfg, OmegaConf.to_yaml(cfg, resolve=True))


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    config_yaml = OmegaConf.to_yaml(cfg, resolve=True)
    validate(cfg, config_yaml)
    run_dir = run_dir_of(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / "config.yaml", config_yaml)
    log.info("run %s (%s backend) in %s", cfg.run_name, cfg.backend.name, run_dir)
    backend_module(cfg).run(cfg, run_dir, config_sha256(config_yaml))


if __name__ == "__main__":
    if not any(a in ("-h", "--help", "--cfg", "-c", "--info", "-i") or a.startswith("--cfg") for a in sys.argv[1:]):
        try:
            prevalidate(sys.argv[1:])
        except (ConfigError, ValueError) as err:
            print(f"config error: {err}", file=sys.stderr)
            sys.exit(2)
    main()
