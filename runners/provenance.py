"""Where a run came from: the project version and the hash of its resolved config."""

from __future__ import annotations

import hashlib
import subprocess
from importlib import metadata
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent


def project_version() -> str:
    """``git describe``-style commit of the checkout (``+dirty`` when modified), else the package version."""
    try:
        sha = subprocess.run(["git", "-C", str(_ROOT), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(_ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return metadata.version("sc-ablations")


def config_sha256(config_yaml: str) -> str:
    return hashlib.sha256(config_yaml.encode()).hexdigest()
