"""Names are names, and folders may move (issue 47, items 1 and 5).

* ``run_name`` and ``sweep`` that are not one folder name (empty, ``.``/``..``, absolute, with a separator) and an
  empty ``results_root`` are refused with one ``config error`` line, status 2, before anything is written, by the
  launcher and by the capacity CLI (before the fix: ``run_name=..`` wrote ``metrics.json`` into ``results_root``,
  ``sweep=../escape`` wrote outside it, ``results_root=`` wrote into the current folder);
* a run folder copied to another ``results_root`` resumes and extends there, with another cache folder and another
  checkpoint retention (before: exit 2, "a different config"): the inert keys are one list
  (``runners.run.peer_keys.INERT_KEYS``), read by the report and by the resume check.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runners.capacity.__main__ import main as capacity_main
from runners.config.config_error import ConfigError
from runners.config.run_names import check_names, name_problem
from runners.run import peer_keys, run_folder

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = [sys.executable, str(ROOT / "runners" / "launch.py")]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
SMALL = ["trainer.total_steps=2", "trainer.prompts_per_step=4", "trainer.n=2", "backend.micro_batch_size=8",
         "eval.n=1", "trainer.test_freq=2", "trainer.save_freq=2", "backend.threads=1"]


def launch(args: list[str], cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([*LAUNCH, *args], capture_output=True, text=True, timeout=300, cwd=cwd, env=ENV)


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("value", ["", ".", "..", "a/b", "../escape", "/abs/path", "a\\b", "x/.."])
def test_a_name_that_is_not_one_folder_is_named(value):
    assert name_problem(value) is not None
    for key, args in (("sweep", ("r", value, "pg-seed1")), ("run_name", ("r", "s", value))):
        with pytest.raises(ConfigError, match=rf"^{key}="):
            check_names(*args)


@pytest.mark.parametrize("value", ["pg-seed1", "seeds", "kv4_sync", "a.b", "x..", "run name"])
def test_ordinary_names_pass(value):
    assert name_problem(value) is None
    check_names("results", value, value)


@pytest.mark.parametrize("value", [".hidden", "..x", "report"])
def test_a_run_name_the_report_would_skip_or_overwrite_is_refused(value):
    check_names("results", value, "pg-seed1")  # a sweep may be so named
    with pytest.raises(ConfigError, match=r"^run_name=.*sweep folder"):
        check_names("results", "s", value)


@pytest.mark.parametrize("override,key", [
    ("run_name=", "run_name"), ("run_name=..", "run_name"), ("run_name=a/b", "run_name"),
    ("sweep=../escape", "sweep"), ("sweep=/abs/path", "sweep"), ("sweep=", "sweep"), ("results_root=", "results_root"),
])
def test_the_launcher_refuses_a_name_as_a_path_before_writing(tmp_path, override, key):
    work = tmp_path / "work"
    (work / "results" / "embedded_default").mkdir(parents=True)  # an existing sweep, as in the issue
    done = launch([*SMALL, "results_root=results", override], cwd=work)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"config error: {key}="), done.stderr
    assert files_under(tmp_path) == ["work", "work/results", "work/results/embedded_default"]


@pytest.mark.parametrize("override", ["run_name=..", "sweep=/abs/path", "results_root="])
def test_the_capacity_cli_refuses_a_name_as_a_path(capsys, override):
    assert capacity_main(["+experiment=qwen3_4b_sc_repro", override]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"config error: {override.split('=')[0]}=") and len(err.strip().splitlines()) == 1, err


def test_the_inert_keys_are_one_list_for_the_report_and_the_resume():
    assert run_folder.plan.__defaults__ == (peer_keys.INERT_KEYS,)
    assert {"results_root", "backend.cache_dir", "backend.keep_checkpoints"} <= peer_keys.INERT_KEYS
    for key in peer_keys.INERT_KEYS:
        assert not peer_keys.is_pooling_key(key)


def test_a_copied_results_folder_resumes_and_extends(tmp_path):
    first, copy = tmp_path / "first", tmp_path / "copy"
    done = launch([*SMALL, f"results_root={first}", f"backend.cache_dir={tmp_path / 'cache1'}"])
    assert done.returncode == 0, done.stderr
    shutil.copytree(first, copy)
    run = copy / "embedded_default" / "pg-seed42"
    before = (run / "metrics.json").read_text()
    again = launch([*SMALL, f"results_root={copy}", f"backend.cache_dir={tmp_path / 'cache2'}",
                    "backend.keep_checkpoints=3"])
    assert again.returncode == 0, again.stderr
    assert json.loads((run / "metrics.json").read_text())["train"] == json.loads(before)["train"]
    longer = launch([*SMALL, f"results_root={copy}", "trainer.total_steps=4"])
    assert longer.returncode == 0, longer.stderr
    record = json.loads((run / "metrics.json").read_text())
    assert record["run"]["last_step"] == 4 and record["run"]["status"] == "finished"
    assert json.loads((first / "embedded_default" / "pg-seed42" / "metrics.json").read_text())["run"]["last_step"] == 2


def test_the_report_folder_name_is_the_analysis_own():
    from analysis.load import REPORT_DIR
    from runners.config import run_names

    assert run_names.REPORT_DIR == REPORT_DIR


def test_presets_take_the_arm_and_refuse_other_overrides(capsys):
    """Issue 47: ``--presets method=pg`` ignored the override silently."""
    assert capacity_main(["--presets", "method=pg"]) == 0
    pg = capsys.readouterr().out
    assert capacity_main(["--presets"]) == 0
    assert capsys.readouterr().out != pg  # PG's plans are smaller than SC+TIS's
    assert capacity_main(["--presets", "gpu=h100_80gb"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("config error: --presets plans the presets' own configs and takes only method=NAME")
