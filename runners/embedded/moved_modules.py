"""The pickle module that reads an embedded checkpoint written under an older module path.

A checkpoint (:mod:`runners.embedded.checkpoint`) is a pickle of the whole training state: it names the module
of every class it holds (``runners.embedded.replay_buffer.Group``, ...). A checkpoint written while the
backend's package had another name holds that name. This module is passed to ``torch.load`` as its
``pickle_module``: its :class:`Unpickler` finds a class of :data:`MOVED_MODULES`' old packages in the package
that holds it today, so such a checkpoint still resumes. Everything else is :mod:`pickle`'s.
"""

from __future__ import annotations

import pickle
from typing import Any, BinaryIO

#: ``{old package: today's package}``: ``runners.local`` was the embedded backend's package.
MOVED_MODULES: dict[str, str] = {"runners.local": "runners.embedded"}


def current_module(module: str) -> str:
    """``module`` under today's package name (``runners.local.replay_buffer`` -> ``runners.embedded.replay_buffer``);
    a module of no moved package is returned as it is."""
    for old, new in MOVED_MODULES.items():
        if module == old or module.startswith(old + "."):
            return new + module[len(old):]
    return module


class Unpickler(pickle.Unpickler):
    """:class:`pickle.Unpickler` that looks a class up under :func:`current_module` of its stored module."""

    def find_class(self, module: str, name: str) -> Any:
        return super().find_class(current_module(module), name)


def load(file: BinaryIO, **kwargs: Any) -> Any:
    """:func:`pickle.load` through :class:`Unpickler` (torch's legacy, non-zip format reads with it)."""
    return Unpickler(file, **kwargs).load()
