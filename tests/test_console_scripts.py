"""The console scripts of ``pyproject.toml`` (``[project.scripts]``): each target imports, is callable and answers
``--help``; ``sca-launch`` composes the same config as ``python runners/launch.py``. The targets are called as the
generated scripts call them (``sys.exit(target())`` with ``sys.argv`` set), so no reinstall is needed."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def target(spec: str):
    """The object ``module:attr`` names, as the console script imports it."""
    module, _, attr = spec.partition(":")
    found = importlib.import_module(module)
    for part in attr.split("."):
        found = getattr(found, part)
    return found


def test_launch_analysis_capacity_contract_check_and_data_have_a_command():
    assert set(SCRIPTS) == {"sca-launch", "sca-analysis", "sca-capacity", "sca-contract-check", "sca-data"}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_each_target_imports_and_answers_help(name, capsys, monkeypatch):
    run = target(SCRIPTS[name])
    assert callable(run)
    monkeypatch.setattr(sys, "argv", [name, "--help"])
    try:
        status = run()
    except SystemExit as done:  # argparse's --help
        status = done.code
    assert status in (0, None)
    assert "usage" in capsys.readouterr().out.lower() or name == "sca-launch"


def test_sca_launch_help_is_the_launchers_usage(capsys, monkeypatch):
    from runners.launch import usage

    monkeypatch.setattr(sys, "argv", ["sca-launch", "--help"])
    assert target(SCRIPTS["sca-launch"])() == 0
    assert capsys.readouterr().out.strip() == usage().strip()


def test_sca_launch_composes_the_config_of_python_runners_launch_py(tmp_path):
    """Hydra finds the same config folder whether ``main`` runs from the script file or from the imported module."""
    args = ["--cfg", "job", f"results_root={tmp_path}", "method=sc", "seed=3"]
    module, _, function = SCRIPTS["sca-launch"].partition(":")
    as_script = subprocess.run([sys.executable, str(ROOT / "runners" / "launch.py"), *args], cwd=ROOT,
                               capture_output=True, text=True, timeout=300)
    as_console_script = subprocess.run(
        [sys.executable, "-c", f"import sys; from {module} import {function}; sys.argv[0] = 'sca-launch'; "
                               f"sys.exit({function}())", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert as_script.returncode == 0 == as_console_script.returncode, as_console_script.stderr[-2000:]
    assert "name: sc" in as_script.stdout and f"results_root: {tmp_path}" in as_script.stdout
    assert as_console_script.stdout == as_script.stdout
