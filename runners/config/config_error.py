"""The error every config check raises: :class:`ConfigError`.

Its own module so that every module that checks a config (``runners.validate``, ``runners.run.run_folder``)
can raise it without importing the others; ``runners.validate.ConfigError`` is the same class.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A config that cannot work; the launcher prints its message on one line and exits with status 2."""
