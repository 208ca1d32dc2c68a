"""A run folder written before the verl side became one package (``runners/verl_side/``) still resumes.

Its attempts' files hold the old module paths (docs/architecture.md, "Stored module paths"): ``launch.sh``'s
``VERL_USE_EXTERNAL_MODULES`` and the overrides' agent-loop manager class and logits processor. Nothing reads them
back: the resume check compares ``config.yaml`` (which holds no module path of the verl side) and the next attempt
writes its own launch from the config. These tests write such a folder and resume it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from runners.config import CONF_DIR
from runners.run.run_folder import plan, write_config
from runners.verl_side.backend import launch
from runners.verl_side.backend.verl_run import VerlRun

ROOT = Path(__file__).resolve().parent.parent
#: Old stored string -> where it went (the table of docs/architecture.md).
MOVED = {
    "runners.verl_cpu.plugin": "runners.verl_side.platform.rehearsal.plugin",
    "runners.verl_head.plugin": "runners.verl_side.head.plugin",
    "runners.verl_backend.sc_hook": "runners.verl_side.backend.sc_hook",
    "runners.verl_head.agent_loop.HeadAgentLoopManager": "runners.verl_side.head.agent_loop.HeadAgentLoopManager",
    "runners.verl_head.vllm_logits_head:HeadFileWriter": "runners.verl_side.logits_processor.writer:HeadFileWriter",
    "runners.verl_side.head.vllm_logits_head:HeadFileWriter": "runners.verl_side.logits_processor.writer:HeadFileWriter",
}


def _config(tmp_path: Path, experiment: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("config", overrides=[f"+experiment={experiment}", "method=sc", f"results_root={tmp_path}",
                                           f"data.dir={tmp_path / 'data'}",
                                           "backend.rollout_engine.head_transport=logits_processor"])
    OmegaConf.resolve(cfg)
    return cfg


def _module_of(path: str) -> tuple[str, str | None]:
    """``(module, class or None)`` of a stored string: ``a.b``, ``a.b.Class`` or ``a.b:Class``."""
    if ":" in path:
        module, name = path.split(":")
        return module, name
    if path.rpartition(".")[2][:1].isupper():
        module, _, name = path.rpartition(".")
        return module, name
    return path, None


def _defined(path: str) -> bool:
    """Whether ``path`` names a module (and class) of this checkout (its file, read without importing it: an
    editable install of another checkout could still import an old path)."""
    module, name = _module_of(path)
    base = ROOT.joinpath(*module.split("."))
    source = next((f for f in (base.with_suffix(".py"), base / "__init__.py") if f.is_file()), None)
    return source is not None and (name is None or f"class {name}(" in source.read_text())


def _old_run_folder(cfg: DictConfig) -> Path:
    """The run folder of ``cfg`` as the code before the move left it after one attempt: its config and an
    attempt's ``launch.sh`` with the old module paths."""
    run_dir = Path(cfg.results_root) / cfg.sweep / cfg.run_name
    run_dir.mkdir(parents=True)
    write_config(run_dir, OmegaConf.to_yaml(cfg, resolve=True))
    script = launch.build_spec(VerlRun.of(cfg), run_dir, attempt=1).script("verl launch, attempt 1")
    for old, new in MOVED.items():
        script = script.replace(new, old)
    attempt = run_dir / "verl" / "attempt-001"
    attempt.mkdir(parents=True)
    (attempt / "launch.sh").write_text(script)
    return run_dir


def test_every_moved_path_is_gone_and_its_new_place_holds_it():
    for old, new in MOVED.items():
        assert not _defined(old), old
        assert _defined(new), new


@pytest.mark.parametrize("experiment", ["qwen3_4b_sc_repro", "rehearsal"])
def test_an_old_run_folder_resumes_and_its_next_attempt_names_the_new_paths(tmp_path, experiment):
    cfg = _config(tmp_path, experiment)
    run_dir = _old_run_folder(cfg)
    old_script = (run_dir / "verl" / "attempt-001" / "launch.sh").read_text()
    stored = [old for old in MOVED if old in old_script]
    assert "runners.verl_head.plugin" in stored and "runners.verl_head.agent_loop.HeadAgentLoopManager" in stored
    assert ("runners.verl_cpu.plugin" in stored) == (experiment == "rehearsal")

    assert plan(run_dir, OmegaConf.to_yaml(cfg, resolve=True)) == "resume"
    spec = launch.build_spec(VerlRun.of(cfg), run_dir)
    assert spec.paths.attempt == 2
    modules = spec.env["VERL_USE_EXTERNAL_MODULES"].split(",")
    assert [m for m in modules if not _defined(m)] == []
    new_script = spec.script("verl launch, attempt 2")
    assert [old for old in MOVED if old in new_script] == []
    assert [MOVED[old] for old in stored if MOVED[old] not in new_script] == []
