"""The embedded backend's tasks by name: :func:`build_task` maps ``data.name`` to its task class."""

from __future__ import annotations

from omegaconf import DictConfig

from runners.config.config_error import ConfigError
from runners.tiny.arithmetic_task import ArithmeticTask, SeededTask
from runners.tiny.scratchpad_task import ScratchpadSumTask


def build_task(data_cfg: DictConfig) -> SeededTask:
    """The task named by ``data.name``: ``synthetic_arith`` (the default) or ``sum_scratchpad``."""
    tasks = {"synthetic_arith": ArithmeticTask, "sum_scratchpad": ScratchpadSumTask}
    name = data_cfg.get("name", "synthetic_arith")
    if name not in tasks:
        raise ConfigError(f"data.name={name!r}; the embedded backend's tasks are: {', '.join(tasks)}")
    return tasks[name](data_cfg)
