"""A run folder written before a config key existed still resumes and is pooled with what it did
(runners.config.config_history), on a real record of commit 4475272 (tests/fixtures/run_before_eval_numerics)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from runners.config import CONF_DIR
from runners.config.config_error import ConfigError
from runners.config.config_history import as_current
from runners.run import peer_keys
from runners.run.provenance import config_sha256
from runners.run.run_folder import plan
from runners.run.run_record import record_config_sha256

FIXTURE = Path(__file__).parent / "fixtures" / "run_before_eval_numerics" / "sc-seed3"
OLD_ROOT = "/tmp/oldruns"
OVERRIDES = ["sweep=old", "method=sc", "seed=3", "trainer.total_steps=4", "trainer.test_freq=2"]


@pytest.fixture()
def old_run(tmp_path: Path) -> Path:
    """The fixture's folder under ``tmp_path/old``, its paths moved there (the record kept in step)."""
    run_dir = tmp_path / "old" / "sc-seed3"
    shutil.copytree(FIXTURE, run_dir)
    text = (run_dir / "config.yaml").read_text().replace(OLD_ROOT, str(tmp_path))
    (run_dir / "config.yaml").write_text(text)
    record_config_sha256(run_dir, config_sha256(text))
    return run_dir


def _config_yaml(tmp_path: Path, *extra: str) -> str:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose(config_name="config", overrides=[f"results_root={tmp_path}", *OVERRIDES, *extra])
    return OmegaConf.to_yaml(cfg, resolve=True)


def test_the_fixture_predates_the_key_and_the_embedded_backends_name() -> None:
    config = yaml.safe_load((FIXTURE / "config.yaml").read_text())
    assert "numerics" not in config["eval"]
    assert config["backend"]["name"] == "local"  # the resumes below read the old name as today's


def test_an_old_value_is_read_under_its_current_name() -> None:
    old = {"backend": {"name": "local"}, "eval": {}}
    current = as_current(old)
    assert current["backend"]["name"] == "embedded"
    assert current["eval"]["numerics"] == "scenario"  # what an embedded run did before the key
    assert old == {"backend": {"name": "local"}, "eval": {}}  # the argument is not changed
    assert as_current({"backend": {"name": "verl"}})["backend"]["name"] == "verl"


def test_an_old_option_composes_todays_and_is_not_offered() -> None:
    from runners.config.config_checks import group_options
    from runners.config.config_history import RENAMED_OPTIONS

    for group, names in RENAMED_OPTIONS.items():
        for old, current in names.items():
            assert old not in group_options(group) and current in group_options(group)
            with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
                composed_old = compose(config_name="config", overrides=[f"{group}={old}"])
                composed_current = compose(config_name="config", overrides=[f"{group}={current}"])
            assert OmegaConf.to_yaml(composed_old, resolve=True) == OmegaConf.to_yaml(composed_current, resolve=True)


def test_the_same_command_is_refused_naming_the_key_and_the_value_that_continues_it(old_run: Path) -> None:
    with pytest.raises(ConfigError) as err:
        plan(old_run, _config_yaml(old_run.parent.parent))
    text = str(err.value)
    assert "eval.numerics: 'scenario' -> 'clean'" in text
    assert "add that to continue it" in text and "eval.numerics=scenario" in text


def test_it_resumes_and_extends_with_what_it_did(old_run: Path) -> None:
    root = old_run.parent.parent
    assert plan(old_run, _config_yaml(root, "eval.numerics=scenario")) == "resume"
    assert plan(
        old_run, _config_yaml(root, "eval.numerics=scenario", "trainer.total_steps=6")) == "extend"


def test_capacity_inputs_do_not_block_a_resume(old_run: Path) -> None:
    """The capacity plan's inputs (``gpu``, ``backend.capacity``) change no number of a run: a key added
    under them (as on the verl backend) or a changed value does not block a resume."""
    new = yaml.safe_load(_config_yaml(old_run.parent.parent, "eval.numerics=scenario"))
    new["gpu"] = {"memory_bytes": 80e9}
    new["backend"]["capacity"] = {"disk_budget_bytes": 1e12}
    assert plan(old_run, yaml.safe_dump(new)) == "resume"
    new["backend"]["lr_typo"] = 1
    with pytest.raises(ConfigError, match="backend.lr_typo"):
        plan(old_run, yaml.safe_dump(new))


def test_the_report_pools_it_with_runs_scored_as_it_was() -> None:
    old = yaml.safe_load((FIXTURE / "config.yaml").read_text())
    assert peer_keys.setting(old)["eval.numerics"] == "scenario"
    scenario = as_current(old)
    clean = as_current(old)
    clean["eval"]["numerics"] = "clean"
    assert peer_keys.differences(peer_keys.setting(old), peer_keys.setting(scenario)) == {}
    assert peer_keys.differences(peer_keys.setting(old), peer_keys.setting(clean)) == {
        "eval.numerics": ("scenario", "clean")}


def test_a_verl_run_before_the_key_evaluated_clean() -> None:
    old = yaml.safe_load((FIXTURE / "config.yaml").read_text())
    old["backend"] = {"name": "verl"}
    assert as_current(old)["eval"]["numerics"] == "clean"


def test_a_key_present_is_left_alone() -> None:
    config = {"backend": {"name": "local"}, "eval": {"numerics": "clean"}}
    assert as_current(config)["eval"]["numerics"] == "clean"
    assert config == {"backend": {"name": "local"}, "eval": {"numerics": "clean"}}


def test_a_rehearsal_before_the_rollout_switch_sampled_with_the_standin() -> None:
    verl_run = {"backend": {"name": "verl", "platform": "cpu"}, "eval": {"numerics": "clean"}}
    assert as_current(verl_run)["backend"]["rehearsal_rollout"] == "standin"
    local_run = {"backend": {"name": "local"}, "eval": {"numerics": "scenario"}}
    assert "rehearsal_rollout" not in as_current(local_run)["backend"]  # no such key on that backend
    recorded = {"backend": {"name": "verl", "rehearsal_rollout": "vllm"}, "eval": {"numerics": "clean"}}
    assert as_current(recorded)["backend"]["rehearsal_rollout"] == "vllm"  # present: kept


def test_a_verl_run_before_the_head_transport_key_took_the_head_as_flat_log_probs() -> None:
    verl_run = {"backend": {"name": "verl", "rollout_engine": {"name": "vllm"}}, "eval": {"numerics": "clean"}}
    assert as_current(verl_run)["backend"]["rollout_engine"]["head_transport"] == "flat_logprobs"
    local_run = {"backend": {"name": "local"}, "eval": {"numerics": "scenario"}}
    assert "rollout_engine" not in as_current(local_run)["backend"]
    recorded = {"backend": {"name": "verl", "rollout_engine": {"head_transport": "logits_processor"}}}
    assert as_current(recorded)["backend"]["rollout_engine"]["head_transport"] == "logits_processor"


def test_a_verl_run_before_the_log_prob_transport_key_asked_vllm_for_its_log_probs() -> None:
    verl_run = {"backend": {"name": "verl", "rollout_engine": {"name": "vllm"}}, "eval": {"numerics": "clean"}}
    assert as_current(verl_run)["backend"]["rollout_engine"]["log_prob_transport"] == "logprobs"
    embedded_run = {"backend": {"name": "embedded"}, "eval": {"numerics": "scenario"}}
    assert "rollout_engine" not in as_current(embedded_run)["backend"]
