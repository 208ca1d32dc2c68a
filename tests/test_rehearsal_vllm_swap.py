"""The rehearsal's vLLM rollout switch (``backend.rehearsal_rollout=vllm``), without vLLM: what it sets."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from runners.verl_side.platform import rehearsal as verl_cpu
from runners.verl_side.platform.rehearsal import swaps as rehearsal


def test_the_switch_selects_vllm_only_when_asked():
    assert not rehearsal.uses_vllm(OmegaConf.create({"backend": {"platform": "cpu"}}))
    assert not rehearsal.uses_vllm(OmegaConf.create({"backend": {"platform": "cpu", "rehearsal_rollout": "standin"}}))
    assert rehearsal.uses_vllm(OmegaConf.create({"backend": {"platform": "cpu", "rehearsal_rollout": "vllm"}}))


def test_the_vllm_swap_names_the_engine_its_settings_and_folders():
    state = Path("/some/results/rehearsal/sc_tis-seed42/verl/attempt-001/cpu")
    swap = rehearsal.vllm_rollout_swap(OmegaConf.create({}), state)
    ov = swap.overrides
    assert ov["actor_rollout_ref.rollout.name"] == "vllm"
    assert ov["actor_rollout_ref.rollout.enable_sleep_mode"] is False
    assert ov["actor_rollout_ref.rollout.enforce_eager"] is True
    assert ov["actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes"] == 16
    assert swap.env[verl_cpu.ROLLOUT_ENV] == verl_cpu.VLLM_ROLLOUT
    assert swap.env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind" and swap.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert swap.env["VLLM_CACHE_ROOT"].startswith(str(state))
    rpc = swap.env["VLLM_RPC_BASE_PATH"]
    assert len(rpc) + 1 + 36 <= 107  # vLLM appends a 36-character socket name; a Unix socket path holds 107
    assert rpc == str(rehearsal.vllm_rpc_folder(state)) != str(rehearsal.vllm_rpc_folder(state.parent / "other"))
