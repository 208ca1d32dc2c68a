"""Beyond one node, without a cluster: ``backend.ray_address`` in verl's overrides and the launcher's checks,
the placement check against a cluster's nodes, the multi-node SLURM launcher config as composed and as sbatch
would receive it, and the capacity plan across nodes (docs/multinode.md). The two-node runs are
tests/integration/test_rehearsal_two_nodes.py (a Ray cluster of two nodes) and tests/test_slurm_multinode.py
(the SLURM job's tasks on submitit's local executor)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from runners.capacity import nodes
from runners.capacity.estimate import evaluate, inputs_of
from runners.capacity.fixes import MORE_NODES_EFFECT
from runners.config.config_error import ConfigError
from runners.config.hydra_override import parse
from runners.run import verl_files
from runners.verl_side.backend import overrides as ovr
from runners.verl_side.backend.checks import validate
from runners.verl_side.backend.verl_run import VerlRun
from runners.verl_side.cluster import ray_cluster

CONF = Path(__file__).resolve().parents[1] / "conf"
REFERENCE = "+experiment=qwen3_4b_sc_repro"


def composed(*overrides: str, hydra: bool = False):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides), return_hydra_config=hydra)
    return cfg


def init_keys(cfg, tmp_path) -> dict:
    paths = verl_files.AttemptPaths(tmp_path / "run", 1)
    values = {k: v for k, v, _ in map(parse, ovr.build_overrides(VerlRun.of(cfg), paths))}
    return {k.removeprefix("ray_kwargs.ray_init."): v for k, v in values.items()
            if k.startswith("ray_kwargs.ray_init.") and ".runtime_env." not in k}


def test_verl_starts_its_own_ray_unless_told_a_cluster(tmp_path):
    """Without ``backend.ray_address`` verl's driver gets ``address=local`` (a new Ray, whatever RAY_ADDRESS or a
    running cluster's address file says); with it, that address, and on the rehearsal no ``num_gpus``/``num_cpus``
    (Ray refuses them from a driver that joins: the nodes declare their logical GPUs)."""
    assert init_keys(composed(REFERENCE), tmp_path) == {"address": "local"}
    assert init_keys(composed(REFERENCE, "backend.ray_address=10.0.0.1:6379"), tmp_path) == {"address": "10.0.0.1:6379"}
    own = init_keys(composed("+experiment=rehearsal"), tmp_path)
    assert own["address"] == "local" and own["num_gpus"] == 2 and own["num_cpus"] == 16
    joined = init_keys(composed("+experiment=rehearsal", "backend.ray_address=127.0.0.1:6379",
                                "backend.placement.nnodes=2"), tmp_path)
    assert joined == {"address": "127.0.0.1:6379"}


def test_the_shared_gpu_cannot_join_a_cluster():
    cfg = composed("+experiment=qwen3_0p6b_1gpu", "backend.ray_address=127.0.0.1:6379", "backend.dry_run=true")
    assert cfg.backend.placement.shared_gpu
    with pytest.raises(ConfigError, match=r"backend\.placement\.shared_gpu=True is not allowed: only on a Ray"):
        validate(cfg)


def groups(*overrides: str) -> list[tuple[str, int]]:
    return [(g.what, g.gpus) for g in ray_cluster.placement_groups(composed(REFERENCE, *overrides))]


def test_the_placement_as_verl_places_it():
    assert groups() == [("trainer node 1 of 1", 4), ("vLLM replica 1 of 2", 2), ("vLLM replica 2 of 2", 2)]
    assert groups("backend.placement.nnodes=2")[:2] == [("trainer node 1 of 2", 4), ("trainer node 2 of 2", 4)]
    # a replica wider than the rollout GPUs of a node: one group per node it spans
    assert groups("backend.placement.rollout_nnodes=2", "backend.placement.rollout_gpus_per_node=2",
                  "backend.placement.rollout_tensor_parallel=4")[1:] == [("rollout node 1 of 2", 2),
                                                                         ("rollout node 2 of 2", 2)]


def node(gpus: float, free: float | None = None) -> ray_cluster.Node:
    return ray_cluster.Node("192.0.2.2", gpus, gpus if free is None else free)


def test_each_group_needs_one_node_with_its_gpus_free():
    cfg = composed(REFERENCE, "backend.placement.nnodes=2", "backend.ray_address=192.0.2.1:6379")
    assert ray_cluster.refusal(cfg, [node(8), node(8)]) is None  # 4 + 2, 4 + 2
    # 16 GPUs in all, but no node holds a trainer node's 4 beside the other groups: verl's total check would pass
    why = ray_cluster.refusal(cfg, [node(3)] * 4 + [node(2)] * 2)
    assert why.startswith("backend.ray_address=192.0.2.1:6379: the cluster cannot hold backend.placement (nnodes=2 x "
                          "trainer_gpus_per_node=4"), why
    assert "trainer node 1 of 2, trainer node 2 of 2 finds no node" in why
    assert ray_cluster.refusal(cfg, [node(8), node(8, free=3)]) is not None  # GPUs in use do not count
    assert "no live node" in ray_cluster.refusal(cfg, [])


def test_the_multinode_launcher_config_composes_with_a_node_per_trainer_node():
    cfg = composed(REFERENCE, "backend.placement.nnodes=2", "hydra/launcher=slurm_multinode", hydra=True)
    launcher = cfg.hydra.launcher
    assert launcher.nodes == 2 and launcher.tasks_per_node == 1 and launcher.max_num_timeout == 6
    assert launcher._target_.endswith("SlurmLauncher")


def test_the_sbatch_script_asks_for_the_nodes_one_task_each_and_the_requeue_signal(tmp_path, monkeypatch):
    """What sbatch would receive: submitit's SLURM executor given the composed launcher's parameters the way
    hydra-submitit-launcher gives them (its ``launch``), asked for its submission script (sbatch is not called)."""
    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

    launcher = composed(REFERENCE, "backend.placement.nnodes=3", "hydra/launcher=slurm_multinode",
                        "hydra.launcher.partition=gpu", hydra=True).hydra.launcher
    params = {k: v for k, v in OmegaConf.to_container(launcher, resolve=True).items() if k != "_target_"}
    params.pop("submitit_folder")
    bin_dir = tmp_path / "bin"  # submitit's executor looks for srun on PATH when it is made; never run here
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    executor = submitit.AutoExecutor(cluster="slurm", folder=tmp_path, slurm_max_num_timeout=params.pop("max_num_timeout"))
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    executor.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in params.items()})
    script = executor._executor._make_submission_file_text("python -u -m submitit.core._submit X", "uid")
    lines = script.splitlines()
    for want in ("#SBATCH --nodes=3", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=8",
                 "#SBATCH --exclusive", "#SBATCH --partition=gpu", "#SBATCH --time=2880"):
        assert want in lines, script
    assert any(x.startswith("#SBATCH --signal=USR2@300") for x in lines), script
    assert any(x.startswith("srun ") for x in lines), script  # one task per node runs the Hydra job


def test_the_capacity_plan_counts_the_link_between_nodes():
    one = evaluate(inputs_of(composed(REFERENCE)))["time"]
    two_cfg = composed(REFERENCE, "backend.placement.nnodes=2")
    i = inputs_of(two_cfg)
    two = evaluate(i)["time"]
    assert one["internode_collective_seconds"] == 0.0
    assert i.nodes.internode_bytes_per_s_per_gpu == 25e9  # the A100 preset's DGX A100: 8 x 200 Gb/s
    trainer_gpus, params = 8, i.shape.parameters
    micro = nodes.micro_batches(two_cfg.trainer.prompts_per_step * two_cfg.trainer.n,
                                two["mean_prompt_tokens"] + two["mean_response_tokens"], trainer_gpus, i.tokens)
    expected = micro * params * (2 * 2 + 4) * (trainer_gpus - 1) / trainer_gpus / 25e9
    assert two["internode_collective_seconds"] == pytest.approx(expected, rel=1e-12) and expected > 0
    assert two["weight_sync_seconds"] == pytest.approx(2 * params / min(1e10, 25e9), rel=1e-12)
    slow = evaluate(inputs_of(composed(REFERENCE, "backend.placement.nnodes=2",
                                       "backend.capacity.internode_bytes_per_s_per_gpu=1e9")))["time"]
    assert slow["weight_sync_seconds"] == pytest.approx(2 * params / 1e9, rel=1e-12)
    assert slow["step_seconds"] > two["step_seconds"]


def test_a_gpu_without_a_known_link_needs_the_key_across_nodes(monkeypatch):
    monkeypatch.delitem(nodes.INTERNODE_BYTES_PER_S_PER_GPU, "a100_80gb")
    with pytest.raises(ConfigError, match=r"backend\.capacity\.internode_bytes_per_s_per_gpu=None: the capacity plan"):
        inputs_of(composed(REFERENCE, "backend.placement.nnodes=2"))
    assert inputs_of(composed(REFERENCE)).nodes.internode_bytes_per_s_per_gpu == 0  # one node: not needed


def test_the_more_nodes_fix_names_a_launch_the_project_runs():
    assert "hydra/launcher=slurm_multinode" in MORE_NODES_EFFECT and "backend.ray_address" in MORE_NODES_EFFECT
    assert (CONF / "hydra" / "launcher" / "slurm_multinode.yaml").is_file()


def test_rays_local_address_starts_a_new_ray_whatever_the_environment_names(monkeypatch, tmp_path):
    """Ray's own rule the default launch relies on: ``address=None`` follows RAY_ADDRESS (or a running cluster's
    address file), ``address="local"`` never does (``ray.init``: RAY_ADDRESS replaces only None or "auto")."""
    from ray._private import services

    monkeypatch.setenv("RAY_ADDRESS", "192.0.2.1:6379")
    assert services.canonicalize_bootstrap_address(None, str(tmp_path)) == "192.0.2.1:6379"
    assert services.canonicalize_bootstrap_address(ray_cluster.OWN_RAY, str(tmp_path)) is None
