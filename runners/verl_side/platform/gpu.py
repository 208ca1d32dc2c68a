"""The GPU platform: the reference launch as it is (every method of the seam adds nothing)."""

from __future__ import annotations

from typing import ClassVar

from runners.verl_side.platform.base import Platform


class GpuPlatform(Platform):
    """verl on GPUs, with nothing added (``backend.platform=gpu``)."""

    name: ClassVar[str] = "gpu"
