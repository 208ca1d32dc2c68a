"""The record is what ran: a `config.yaml` edited after the run wrote it is caught.

`metrics.json` records the sha256 of the run's `config.yaml` (`run.config_sha256`). A folder where they
differ is refused by every launch (the common path of both backends, `runners.run.run_folder.plan`) and
reported by `python -m runners.run.contract_check`, naming the file; a launch's own rewrite (an extension)
keeps the two in step.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from runners import validate
from runners.config import config_checks, config_error
from runners.run.contract_check import check_run_dir
from runners.run.contract_check import main as contract_main
from runners.run.provenance import config_sha256
from runners.run.run_folder import write_config
from runners.run.run_record import config_edited, recorded_config_sha256

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = [sys.executable, str(ROOT / "runners" / "launch.py")]
EDITED = "config.yaml edited after the run wrote it"


def composed(overrides: list[str]):
    with initialize_config_dir(config_dir=str(config_checks.CONF_DIR), version_base=None):
        return compose(config_name="config", overrides=overrides)


def small(results: Path) -> list[str]:
    return [f"results_root={results}", "trainer.total_steps=2", "trainer.prompts_per_step=4", "trainer.n=2",
            "backend.micro_batch_size=8", "eval.n=1", "trainer.test_freq=2", "trainer.save_freq=2",
            "backend.threads=1"]


def launch(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([*LAUNCH, *args], capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_an_edited_config_of_an_embedded_run_is_refused_and_flagged(tmp_path, capsys):
    args = small(tmp_path)
    first = launch(args)
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = tmp_path / "embedded_default" / "pg-seed42"
    config = run_dir / "config.yaml"
    assert check_run_dir(run_dir) == [] and config_edited(run_dir) is None
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}

    config.write_text(config.read_text().replace("lr: 0.0002", "lr: 0.0003"))  # a hand edit
    edited_bytes = config.read_bytes()
    for extra in ([], ["trainer.lr=3e-4"], ["trainer.total_steps=4"]):  # as launched, as edited, an extension
        out = launch([*args, *extra])
        assert out.returncode == 2, (extra, out.stderr[-2000:])
        assert out.stderr.startswith(f"config error: {config}: {EDITED}"), out.stderr
        assert len(out.stderr.splitlines()) == 1, out.stderr
    after = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    assert after == {**before, config: edited_bytes}  # nothing was changed

    assert [v for v in check_run_dir(run_dir) if EDITED in v] == [f"{config}: {config_edited(run_dir)}"]
    assert contract_main([str(run_dir)]) == 1
    assert EDITED in capsys.readouterr().out


def test_an_edited_config_of_a_verl_run_is_refused(tmp_path):
    """The same check on the verl backend's folder (the reference experiment's config, validated offline)."""
    overrides = ["+experiment=qwen3_4b_sc_repro", "method=pg", f"results_root={tmp_path}", "backend.dry_run=true"]
    cfg = composed(overrides)
    config_yaml = OmegaConf.to_yaml(cfg, resolve=True)
    run_dir = validate.run_dir_of(cfg)
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(config_yaml)
    record = {"schema_version": 1, "run": {"config_sha256": config_sha256(config_yaml)}, "train": [{"step": 1}]}
    (run_dir / "metrics.json").write_text(json.dumps(record))
    assert validate.validate(cfg, config_yaml) == "resume"  # the control: untouched, it resumes

    (run_dir / "config.yaml").write_text(config_yaml.replace("lr: 1.0e-06", "lr: 2.0e-06"))
    assert (run_dir / "config.yaml").read_text() != config_yaml
    with pytest.raises(config_error.ConfigError, match=rf"{run_dir / 'config.yaml'}: {EDITED}"):
        validate.validate(cfg, config_yaml)


def test_a_launch_rewriting_config_yaml_moves_the_recorded_hash_first(tmp_path):
    (tmp_path / "config.yaml").write_text("a: 1\n")
    record = {"schema_version": 1, "run": {"config_sha256": config_sha256("a: 1\n")}, "train": []}
    (tmp_path / "metrics.json").write_text(json.dumps(record))
    write_config(tmp_path, "a: 2\n")
    assert (tmp_path / "config.yaml").read_text() == "a: 2\n"
    assert recorded_config_sha256(tmp_path) == config_sha256("a: 2\n") and config_edited(tmp_path) is None
