"""The error of a run that started and then stopped for a reason its message states in full: :class:`RunError`.

Its own module (like ``runners.config.config_error``) so that a backend can raise it without importing the launcher.
"""

from __future__ import annotations


class RunError(RuntimeError):
    """A run that stopped for a user's reason (verl failed, its logs cannot be merged into the record).

    The message is one line naming the file to look at and the command to run next; the launcher
    prints it as ``run failed: ...`` without a traceback and exits with status 4
    (``runners.launch.RUN_FAILED``).
    """
