"""The platform seam of the verl side (runners.verl_side.platform): one choice from ``backend.platform``, a GPU that adds
nothing, the rehearsal as the other platform; the verl run resolved once (runners.verl_side.backend.verl_run); the
prompt/response fit check shared by the rehearsal and the embedded backend (runners.tiny.task_fit)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from runners.config import CONF_DIR
from runners.config.config_error import ConfigError
from runners.run.verl_files import AttemptPaths
from runners.tiny.task_fit import check_lengths_fit
from runners.verl_side.backend import overrides as ovr
from runners.verl_side.backend.verl_run import VerlRun
from runners.verl_side.platform import platform_for
from runners.verl_side.platform.gpu import GpuPlatform
from runners.verl_side.platform.rehearsal.cpu_platform import RehearsalPlatform
from runners.verl_side.revisions import installed

ROOT = Path(__file__).resolve().parent.parent


def _config(tmp_path: Path, experiment: str, *extra: str, method: str = "sc") -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("config", overrides=[f"+experiment={experiment}", f"method={method}", f"results_root={tmp_path}",
                                           *extra])
    OmegaConf.resolve(cfg)
    return cfg


def test_the_platform_is_chosen_once_from_backend_platform(tmp_path):
    assert type(platform_for(_config(tmp_path, "qwen3_4b_sc_repro"))) is GpuPlatform
    assert type(platform_for(_config(tmp_path, "rehearsal"))) is RehearsalPlatform
    assert type(platform_for(_config(tmp_path, "rehearsal", "backend.platform=gpu"))) is GpuPlatform


def test_the_gpu_adds_nothing(tmp_path):
    cfg = _config(tmp_path, "qwen3_4b_sc_repro")
    gpu, state = platform_for(cfg), tmp_path / "attempt" / "cpu"
    assert gpu.overrides(["a=1", "+b=2"], state) == ["a=1", "+b=2"]
    assert gpu.environment(state) == ({}, [])
    assert (gpu.leftovers(state), gpu.leftover_segments(), gpu.ray_start_args()) == ((), (), [])
    assert gpu.reference_difference(lambda c: pytest.fail("a GPU launch is the reference"), state) is None
    record = {"how": {}, "not_fixed": {}}
    assert gpu.seed_fixes(record) is record and gpu.rollout_engine("vllm 0.31.0") == "vllm 0.31.0"
    assert gpu.fits_gpus and not gpu.writes_data
    gpu.check()
    gpu.prepare_assets()
    assert not tmp_path.joinpath(".cache").exists()


def test_the_rehearsal_adds_its_swaps_and_no_gpu_to_fit(tmp_path):
    cfg = _config(tmp_path, "rehearsal")
    rehearsal, paths = platform_for(cfg), AttemptPaths(tmp_path / "run", 1)
    assert not rehearsal.fits_gpus and rehearsal.writes_data
    env, modules = rehearsal.environment(paths.cpu_state)
    assert env["VERL_PLATFORM"] == "cpu" and modules == ["runners.verl_side.platform.rehearsal.plugin"]
    launch = ovr.build_overrides(VerlRun.of(cfg), paths)
    assert "actor_rollout_ref.rollout.checkpoint_engine.backend=cpu_file" in launch
    assert rehearsal.ray_start_args() == ["--num-gpus=2", "--num-cpus=8"]


def test_the_run_is_resolved_once_into_arm_platform_carrier_transport_and_placement(tmp_path):
    sc = VerlRun.of(_config(tmp_path, "qwen3_4b_sc_repro", "backend.rollout_engine.head_transport=logits_processor"))
    assert sc.arm.sc and sc.head_carrier is installed.head_carrier() and sc.head_transport == "logits_processor"
    assert sc.project_carries_head == (installed.head_carrier() is installed.PROJECT_CARRIES)
    assert sc.verl_carries_head == (not sc.project_carries_head)
    assert sc.placement.trainer_gpus == int(sc.cfg.backend.placement.nnodes) * int(
        sc.cfg.backend.placement.trainer_gpus_per_node)
    pg = VerlRun.of(_config(tmp_path, "qwen3_4b_sc_repro", method="pg"))
    assert not pg.arm.sc and pg.head_carrier is None and not pg.project_carries_head and not pg.verl_carries_head


def test_only_the_platform_package_reads_backend_platform():
    """The seam holds: outside runners/verl_side/platform/ no module branches on the platform's key (the capacity
    calibration only reports a finished run's recorded platform)."""
    allowed = {"runners/capacity/calibrate.py"}
    readers = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "runners").rglob("*.py")
                     if "runners/verl_side/platform" not in str(p.relative_to(ROOT))
                     and re.search(r"""["']backend\.platform["']|backend\.platform\s*==|\.platform\s*==\s*["']cpu""",
                                   p.read_text()))
    assert [r for r in readers if r not in allowed] == []


class _Task:
    def max_prompt_tokens(self, tokenizer: object) -> int:
        return 20

    def max_response_tokens(self) -> int:
        return 9


@pytest.mark.parametrize(("prompt", "response", "key"), [(19, 9, "rollout.max_prompt_length=19"),
                                                         (20, 8, "rollout.max_response_length=8")])
def test_lengths_that_cannot_hold_the_task_are_refused_naming_the_key(prompt, response, key):
    with pytest.raises(ConfigError, match=re.escape(key) + r".* on the CPU rehearsal .*allowed: >= "):
        check_lengths_fit(_Task(), None, prompt, response, " on the CPU rehearsal")
    check_lengths_fit(_Task(), None, 20, 9)
