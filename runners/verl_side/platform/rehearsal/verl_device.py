"""Platform ``cpu`` in verl's ``PlatformRegistry``, and gloo for verl's process groups on a CPU.

Selected with ``VERL_PLATFORM=cpu``. The device is ``cpu``, collectives use gloo, memory queries
answer 0, and the Ray resource that carries placement is "GPU": the rehearsal declares logical GPUs
to ``ray.init(num_gpus=N)``, so verl's resource pools place workers exactly as on a GPU node while
nothing uses a device. verl's ``load_rng_state`` restores the CPU generator through the device
module, hence ``get_rng_state``/``set_rng_state`` there (a resume needs them).
"""

from __future__ import annotations

import contextlib
import types
from typing import Any

import torch
import torch.distributed as dist
from verl.plugin.platform import PlatformBase, PlatformRegistry

from runners.verl_side.platform.rehearsal import PLATFORM


class CpuDeviceModule(types.ModuleType):
    """``torch.cpu`` plus the accelerator queries verl makes of a device module."""

    def __getattr__(self, name: str) -> Any:
        if hasattr(torch.cpu, name):
            return getattr(torch.cpu, name)
        if name in ("get_rng_state", "set_rng_state"):
            return getattr(torch, name)
        if name == "get_device_name":
            return lambda *a, **k: "CPU"
        if name == "mem_get_info":
            return lambda *a, **k: (0, 0)
        if name.startswith(("memory_", "max_memory", "reset_", "empty_cache", "ipc_collect")):  # ipc_collect: verl's weight sender
            return lambda *a, **k: 0
        raise AttributeError(name)


DEVICE_MODULE = CpuDeviceModule("verl_cpu_device")


@PlatformRegistry.register(platform=PLATFORM)
class PlatformCPU(PlatformBase):
    """verl's platform interface answered for a CPU (no device, no profiler, no IPC)."""

    device_name = property(lambda self: "cpu")
    vendor_name = property(lambda self: "cpu")
    device_module = property(lambda self: DEVICE_MODULE)

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return True

    def current_device(self) -> torch.device:  # verl passes it to .to() and torch.device()
        return torch.device("cpu")

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        pass

    def synchronize(self, device_index: int | None = None) -> None:
        pass

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def get_device_capability(self, device_index: int = 0) -> tuple[None, None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        pass

    def profiler_stop(self) -> None:
        pass

    def ray_resource_name(self) -> str:
        return "GPU"  # logical GPUs (ray.init(num_gpus=N)) carry the placement

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> None:
        return None


def gloo_backend(backend: Any) -> Any:
    """``"cpu:gloo,cpu:gloo"`` (what verl builds from device ``cpu`` and backend gloo) -> ``"gloo"``."""
    if isinstance(backend, str):
        parts = {p.strip() for p in backend.split(",") if p.strip()}
        if parts == {"cpu:gloo"}:
            return "gloo"
    return backend


def _install_gloo_shim() -> None:
    real = dist.init_process_group
    if getattr(real, "_verl_cpu_shim", False):
        return

    def init_process_group(backend: Any = None, *args: Any, **kwargs: Any) -> Any:
        return real(gloo_backend(backend), *args, **kwargs)

    init_process_group._verl_cpu_shim = True  # type: ignore[attr-defined]
    dist.init_process_group = init_process_group


_install_gloo_shim()
