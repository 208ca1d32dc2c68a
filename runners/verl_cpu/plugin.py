"""The ``verl.plugins`` entry point of the CPU platform: registers it only when it is selected.

verl imports every ``verl.plugins`` entry point at ``import verl`` in every process (and swallows
an entry point's import error); the rehearsal also names this module in
``VERL_USE_EXTERNAL_MODULES``, where a failed import is loud. With ``VERL_PLATFORM`` anything but
``cpu`` importing this module changes nothing.
"""

from __future__ import annotations

import os

from runners.verl_cpu import PLATFORM


def selected() -> bool:
    return os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM


if selected():
    from runners.verl_cpu import platform, rollout, weight_sync  # noqa: F401 - registration on import
