"""The config: what a run asks for, checked before any compute.

* :mod:`~runners.config.schema` -- one dataclass per config group (types, allowed values, ranges),
  registered in Hydra's ConfigStore;
* :mod:`~runners.config.config_checks` -- the checks of a config by itself (schema, arm, cross-field rules,
  command-line keys) and the backend a config names;
* :mod:`~runners.config.config_error` -- :class:`ConfigError`, raised by every config check;
* :mod:`~runners.config.config_history` -- keys added to the config after run folders were written, and what a
  run without them did;
* :mod:`~runners.config.run_names` -- names as paths: the run folder from ``results_root``, ``sweep``, ``run_name``;
* :mod:`~runners.config.hydra_override` -- Python values <-> Hydra override strings, outside a Hydra app;
* :mod:`~runners.config.model_shapes` -- a model's sizes from its ``config.json`` (the capacity plan's and the
  launch checks') and the one check of ``method.top_k`` against its vocabulary.

The checks of a whole launch (these, the trackers, the run folder, the backend's own) are ``runners/validate.py``,
beside the launcher, because they read every room. :data:`CONF_DIR` is the config groups' folder.
"""

from pathlib import Path

#: The Hydra config groups (``conf/``).
CONF_DIR = Path(__file__).resolve().parent.parent.parent / "conf"
