"""Live curves of an embedded run: verl's own ``verl.utils.tracking.Tracking``, to the loggers of ``backend.logger``.

``backend.logger`` has the name and meaning it has on the verl backend (verl's ``trainer.logger``): a
list of verl's tracker names (``tensorboard``, ``wandb``, ``mlflow``, ``console``, ...). The embedded
backend sends every train row (at its step) and every evaluation row (at the evaluated step) to them,
beside ``metrics.json``, which stays the record. The default, ``[]``, opens no tracker and writes no
file. Where the trackers write is verl's: TensorBoard into ``TENSORBOARD_DIR`` when that is set, else
into ``<run folder>/tensorboard/`` (verl's own default, ``tensorboard_log/<project>/<run>`` under the
working directory, would mix runs of different sweeps); W&B and MLflow as their own environment
says (``WANDB_MODE=offline``; ``MLFLOW_TRACKING_URI``, verl's default ``sqlite:////tmp/mlruns.db``).
The project name is ``backend.project_name``, the experiment name the run name, as on verl.

:func:`check_loggers` (validation, before compute) refuses a name verl does not know and a tracker
whose package is not installed, naming ``backend.logger``. verl is imported only when a logger is set.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from runners.config_error import ConfigError

TENSORBOARD_SUBDIR = "tensorboard"
#: The package each tracker needs (trackers not listed need nothing beyond verl).
TRACKER_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow", "swanlab": "swanlab",
                    "clearml": "clearml", "trackio": "trackio", "vemlp_wandb": "volcengine_ml_platform"}


def check_loggers(names: Sequence[str]) -> None:
    """Raise ConfigError when a name of ``backend.logger`` is not one of verl's trackers or its package is
    missing."""
    if not names:
        return
    from verl.utils.tracking import Tracking

    for name in names:
        if name not in Tracking.supported_backend:
            raise ConfigError(f"backend.logger contains {name!r}, which is not one of verl's trackers; allowed: "
                              f"{', '.join(Tracking.supported_backend)}")
        package = TRACKER_PACKAGES.get(name)
        if package is not None and importlib.util.find_spec(package) is None:
            raise ConfigError(f"backend.logger contains {name!r}, but its package {package!r} is not installed "
                              f"(pip install {package}); or remove {name!r} from backend.logger")


@contextlib.contextmanager
def _tensorboard_dir(run_dir: Path) -> Iterator[None]:
    """``TENSORBOARD_DIR`` = ``<run_dir>/tensorboard`` while verl opens its writer, unless the user set it."""
    if "TENSORBOARD_DIR" in os.environ:
        yield
        return
    os.environ["TENSORBOARD_DIR"] = str(Path(run_dir) / TENSORBOARD_SUBDIR)
    try:
        yield
    finally:
        del os.environ["TENSORBOARD_DIR"]


class RunTracker:
    """The trackers of one run (none when ``backend.logger`` is empty); :meth:`log` a row, :meth:`finish` once."""

    def __init__(self, cfg: DictConfig, run_dir: Path):
        names = list(cfg.backend.logger)
        self.tracking: Any = None
        if names:
            from verl.utils.tracking import Tracking

            with _tensorboard_dir(run_dir):
                self.tracking = Tracking(project_name=cfg.backend.project_name, experiment_name=cfg.run_name,
                                         default_backend=names, config=OmegaConf.to_container(cfg, resolve=True))

    def log(self, row: dict[str, Any]) -> None:
        """Send the finite numbers of a metrics row (``step`` and the metrics) at its step."""
        if self.tracking is None:
            return
        data = {k: float(v) for k, v in row.items()
                if k != "step" and isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}
        self.tracking.log(data=data, step=int(row["step"]))

    def finish(self, failed: bool = False) -> None:
        if self.tracking is not None:
            self.tracking.finish(exit_code=1 if failed else 0)
