"""Each check once, one error type for a refused config (issue 41).

* ``method.top_k`` against the model's vocabulary: one function (``runners.config.model_shapes.check_top_k_fits``)
  words the refusal; the embedded backend and the verl backend give it their model's vocabulary;
* a config a user typed that is refused is a :class:`~runners.config.config_error.ConfigError` wherever it is found
  (the schema, a task, the sampler, the rehearsal, the installed verl), printed as ``config error: ...``; a
  ``ValueError`` is a defect of the project and is not worded as a config error;
* ``installed.require`` (the installed verl can run an SC arm) runs once per launch:
  ``tests/test_verl_dry_run.py::test_installed_verl_is_checked_once_per_launch``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from runners import launch
from runners.config.config_error import ConfigError
from runners.config.model_shapes import check_top_k_fits

ROOT = Path(__file__).resolve().parent.parent
EMBEDDED_VOCABULARY = "runners/tiny/tokenizer.py"


def refusal(top_k: int, vocab_size: int, model: str, source: str) -> str:
    with pytest.raises(ConfigError) as err:
        check_top_k_fits(top_k, vocab_size, model, source)
    return str(err.value)


def test_top_k_fits_its_vocabulary_up_to_the_vocabulary():
    check_top_k_fits(38, 38, "model=tiny_qwen3", EMBEDDED_VOCABULARY)
    assert refusal(39, 38, "model=tiny_qwen3", EMBEDDED_VOCABULARY) == (
        "method.top_k=39 is larger than the vocabulary of model=tiny_qwen3 (38 tokens, runners/tiny/tokenizer.py): "
        "the sampler's head cannot hold more ids than there are; allowed: 1 <= method.top_k <= 38")


def test_the_embedded_backend_refuses_top_k_with_the_one_message(tmp_path):
    from runners.tiny.tokenizer import build_tokenizer

    with pytest.raises(ConfigError) as err:
        launch.prevalidate(["method=sc", "method.top_k=100", f"results_root={tmp_path}"])
    assert str(err.value) == refusal(100, len(build_tokenizer()), "model=tiny_qwen3", EMBEDDED_VOCABULARY)


def test_the_verl_backend_refuses_top_k_with_the_one_message(tmp_path):
    from hydra import compose, initialize_config_dir

    from runners.config import CONF_DIR
    from runners.verl_side.backend.vocabulary import check_top_k

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"vocab_size": 100}))
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("config", overrides=["+experiment=qwen3_4b_sc_repro", "method=sc", f"model.path={model}"])
    with pytest.raises(ConfigError) as err:
        check_top_k(cfg)
    assert str(err.value) == refusal(128, 100, f"model.path={model}", str(model / "config.json"))


def test_the_vocabulary_refusal_is_worded_in_one_place():
    worded = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "runners").rglob("*.py")
                    if "is larger than the vocabulary" in p.read_text())
    assert worded == ["runners/config/model_shapes.py"]


#: ``raise ValueError(...)`` whose message starts with a key of the config (``data.x``, ``backend.sampler.y``):
#: a refused config, which must be a ConfigError.
CONFIG_KEY_VALUE_ERROR = re.compile(
    r"raise ValueError\(\s*f?[\"'](seed|sweep|run_name|results_root|method|trainer|rollout|eval|backend|model|data|gpu)"
    r"[.=\[{]")
#: A ValueError that names a config key but is a defect: a new sampler knob without its identity value.
DEFECTS = ("no identity value",)


def test_no_refused_config_is_a_plain_value_error():
    found = sorted(f"{p.relative_to(ROOT)}: {m.group(0)}" for p in (ROOT / "runners").rglob("*.py")
                   for m in CONFIG_KEY_VALUE_ERROR.finditer(p.read_text())
                   if not any(d in p.read_text()[m.start():m.start() + 200] for d in DEFECTS))
    assert found == []


@pytest.mark.parametrize(("overrides", "wanted"), [
    (["data.eval_sets.0.name=Upper"], r"^data\.eval_sets\[0\]\.name must be a non-empty lowercase string"),
    (["rollout.max_response_length=5"], r"^rollout\.max_response_length=5 is shorter"),
    (["+experiment=rehearsal", "backend.placement.rollout_gpus_per_node=2",
      "backend.placement.rollout_tensor_parallel=2"],
     r"^backend\.placement\.rollout_tensor_parallel=2 is not allowed on the CPU rehearsal"),
])
def test_a_refusal_a_backend_finds_is_a_config_error(tmp_path, overrides, wanted):
    with pytest.raises(ConfigError) as err:
        launch.prevalidate([*overrides, "method=pg", f"results_root={tmp_path}"])
    assert re.search(wanted, str(err.value)), str(err.value)


def test_an_unsupported_verl_is_a_config_error():
    from runners.config.schema import SchemaError
    from runners.verl_side.revisions.installed import ScoreCenteringUnsupported

    assert issubclass(ScoreCenteringUnsupported, ConfigError) and issubclass(SchemaError, ConfigError)


def test_a_value_error_is_a_defect_not_a_config_error(tmp_path, monkeypatch, capsys):
    """The launcher words a ConfigError as ``config error: ...`` (status 2); a ValueError from a check is a defect
    of the project and leaves as it is (Python's status 1 and its traceback), not disguised as the user's error."""
    def defect(cfg, config_yaml):
        raise ValueError("a check's own bug")

    monkeypatch.setattr(launch, "validate", defect)
    with pytest.raises(ValueError, match="a check's own bug"):
        launch.cli([f"results_root={tmp_path}"])
    assert "config error" not in capsys.readouterr().err

    def refused(cfg, config_yaml):
        raise ConfigError("trainer.lr=0: must be a number > 0")

    monkeypatch.setattr(launch, "validate", refused)
    assert launch.cli([f"results_root={tmp_path}"]) == launch.CONFIG_ERROR
    assert capsys.readouterr().err.strip() == "config error: trainer.lr=0: must be a number > 0"
