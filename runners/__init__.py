"""The harness's runners. Importing the package registers the config schemas (``runners.config.schema``) in
Hydra's ConfigStore, which the group yamls name in their defaults lists.

Where Hydra and OmegaConf are not installed (the borrowed GPU machine of ``benchmarks/device_check/``:
torch, triton and transformers only) there is nothing to register, and the package's torch-only
modules (the capacity plan) stay importable; anything that composes a config still needs them."""

import importlib.util

if importlib.util.find_spec("omegaconf") is not None and importlib.util.find_spec("hydra") is not None:
    from runners.config import schema as _schema

    _schema.register()
