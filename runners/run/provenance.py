"""Where a run came from: the project version, the hash of its resolved config, file hashes."""

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


def versions() -> dict[str, str]:
    """``run.versions`` of ``metrics.json``: the project's and the installed versions of the libraries a
    run depends on (``verl``, ``torch``, ``transformers``, ``vllm``; those not installed are left out)."""
    out = {"project": project_version()}
    for dist in ("verl", "torch", "transformers", "vllm"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out


def config_sha256(config_yaml: str) -> str:
    return hashlib.sha256(config_yaml.encode()).hexdigest()


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes, read in 4 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()
