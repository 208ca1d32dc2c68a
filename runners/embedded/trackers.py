"""Live curves of an embedded run: verl's own ``verl.utils.tracking.Tracking``, to the loggers of ``backend.logger``.

``backend.logger`` has the name and meaning it has on the verl backend (verl's ``trainer.logger``): a
list of verl's tracker names (``tensorboard``, ``wandb``, ``mlflow``, ``console``, ...). The embedded
backend sends every train row (at its step) and every evaluation row (at the evaluated step) to them,
beside ``metrics.json``, which stays the record. The default, ``[]``, opens no tracker and writes no
file. Where the trackers write is verl's: TensorBoard into ``TENSORBOARD_DIR`` when that is set, else
into ``<run folder>/tensorboard/`` (verl's own default, ``tensorboard_log/<project>/<run>`` under the
working directory, would mix runs of different sweeps); W&B and MLflow as their own environment
says (W&B: its login, or ``WANDB_MODE=offline`` into ``./wandb/``; MLflow: ``MLFLOW_TRACKING_URI``, which
must be set).
The project name is ``backend.project_name``, the experiment name the run name, as on verl.

:func:`check_loggers` (validation, before anything is written; both backends: ``runners.validate``)
refuses, naming ``backend.logger`` and the fix, a name verl does not know, a tracker whose package is
not installed, and a tracker that could not start here (:data:`READINESS`, checked offline): W&B in
online mode without credentials (wandb's own ``UsageError`` at ``wandb.init``, after the run folder was
written), MLflow without ``MLFLOW_TRACKING_URI`` or with a local store that cannot be opened (verl would
fall back to ``/tmp`` or go on without MLflow). There is no fallback to W&B's offline mode: the user
asked for W&B, and curves that never reach the server, noticed hours later, are lost work; the
message names ``WANDB_MODE=offline`` as one of the fixes instead. verl is imported only when a logger
is set.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import math
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from omegaconf import DictConfig, OmegaConf

from runners.config.config_error import ConfigError

TENSORBOARD_SUBDIR = "tensorboard"
#: The package each tracker needs (trackers not listed need nothing beyond verl).
TRACKER_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow", "swanlab": "swanlab",
                    "clearml": "clearml", "trackio": "trackio", "vemlp_wandb": "volcengine_ml_platform"}


log = logging.getLogger(__name__)


def _installed(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


def wandb_problem() -> str | None:
    """Why ``wandb.init`` would refuse to start here, or None; offline, no network.

    wandb resolves its mode (``WANDB_MODE``, ``wandb offline``'s settings file) and, in online mode, its
    credentials (``WANDB_API_KEY``, ``WANDB_IDENTITY_TOKEN_FILE``, ``~/.netrc`` or ``$NETRC``, its settings)
    without asking the server; this asks the same functions of the installed wandb (0.31), without a
    prompt and without storing anything. A wandb without them is not checked (logged).
    """
    try:
        from wandb.errors import AuthenticationError
        from wandb.sdk import wandb_setup
        from wandb.sdk.lib import wbauth
    except ImportError as err:
        log.warning("cannot check the W&B login before the run (wandb has no %s); wandb.init will", err.name)
        return None
    settings = wandb_setup.singleton().settings
    if settings._noop or settings._offline:  # disabled, offline, dryrun: no login needed
        return None
    try:
        auth = wbauth.authenticate_session(host=settings.base_url, source="backend.logger check", prompt=False,
                                           update_session=False)
    except AuthenticationError as err:
        return (f"its credentials are not usable ({err}); run `wandb login --relogin`, or set WANDB_MODE=offline "
                "to log locally and `wandb sync` later")
    if auth is not None:
        return None
    return (f"W&B is in online mode (WANDB_MODE={os.environ.get('WANDB_MODE', '<unset>')}) and has no API key "
            f"for {settings.base_url} (no WANDB_API_KEY, no netrc entry); run `wandb login` or set "
            "WANDB_API_KEY, or set WANDB_MODE=offline to log locally and `wandb sync` later")


def _folder_problem(folder: Path) -> str | None:
    """Why ``folder`` cannot be created or written (its nearest existing ancestor), or None."""
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        return f"{folder} is not a writable folder"
    return None


def mlflow_problem() -> str | None:
    """Why verl's MLflow tracker would not log this run where the user looks, or None; no network.

    Without ``MLFLOW_TRACKING_URI`` verl writes to ``sqlite:////tmp/mlruns.db`` (one store in ``/tmp`` for
    every run, lost with ``/tmp``, node-local on a cluster), and when a store cannot open verl logs a
    warning and runs on without MLflow; so the URI must be set, and a local store (``sqlite:``,
    ``file:`` or a path) must be creatable, with SQLAlchemy installed for ``sqlite:``. A server URI
    (``http://``, ``databricks``, ...) is not contacted here.
    """
    uri = os.environ.get("MLFLOW_TRACKING_URI", "")
    fix = "set MLFLOW_TRACKING_URI=sqlite:///<folder>/mlruns.db (a local store) or http://<host>:<port> (a server)"
    if not uri:
        return (f"MLFLOW_TRACKING_URI is not set (verl would use sqlite:////tmp/mlruns.db, shared by every run and "
                f"lost with /tmp); {fix}")
    parsed = urlparse(uri)
    if parsed.scheme == "sqlite":
        if not _installed("sqlalchemy"):
            return f"MLFLOW_TRACKING_URI={uri} needs SQLAlchemy (pip install sqlalchemy); or {fix}"
        folder = Path(unquote(parsed.path)[1:] or ".").parent  # sqlite:///rel.db, sqlite:////abs.db
    elif parsed.scheme in ("", "file"):
        folder = Path(unquote(parsed.path) if parsed.scheme else uri)
    else:
        return None
    problem = _folder_problem(folder.expanduser().resolve())
    return None if problem is None else f"MLFLOW_TRACKING_URI={uri}: {problem}; {fix}"


#: Per tracker, why it could not start here (None: it can); each check is offline and takes milliseconds.
READINESS: dict[str, Callable[[], str | None]] = {"wandb": wandb_problem, "mlflow": mlflow_problem}


def check_loggers(names: Sequence[str]) -> None:
    """Raise ConfigError, naming ``backend.logger`` and the fix, when a name is not one of verl's trackers,
    its package is missing, or the tracker could not start here (:data:`READINESS`)."""
    if not names:
        return
    from verl.utils.tracking import Tracking

    for name in names:
        if name not in Tracking.supported_backend:
            raise ConfigError(f"backend.logger contains {name!r}, which is not one of verl's trackers; allowed: "
                              f"{', '.join(Tracking.supported_backend)}")
        package = TRACKER_PACKAGES.get(name)
        if package is not None and not _installed(package):
            raise ConfigError(f"backend.logger contains {name!r}, but its package {package!r} is not installed "
                              f"(pip install {package}); or remove {name!r} from backend.logger")
        problem = READINESS.get(name, lambda: None)()
        if problem is not None:
            raise ConfigError(f"backend.logger contains {name!r}, but it cannot start: {problem}; or remove "
                              f"{name!r} from backend.logger")


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
