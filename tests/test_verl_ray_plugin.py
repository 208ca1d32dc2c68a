"""The arms' registrations inside Ray worker processes, as verl's actors see them (CPU only).

A Ray worker is a fresh process: the project's losses (the four arms' and ``ablation_sc_corrected``) must be in verl's ``POLICY_LOSS_REGISTRY`` there
after a plain ``import verl`` (the ``verl.plugins`` entry point), and through the route the launcher
adds for every verl actor (``VERL_USE_EXTERNAL_MODULES`` in the runtime_env, where a failed
import is loud instead of swallowed).
"""

from __future__ import annotations

import pytest
import ray  # a dependency of verl: a missing or broken Ray fails here, it does not skip

ARMS = ["ablation_pg", "ablation_sc", "ablation_sc_corrected", "ablation_sc_tis", "ablation_tis"]


@pytest.fixture(scope="module")
def ray_cpu():
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)  # fails the tests
    yield
    ray.shutdown()


@ray.remote(num_cpus=1)
def registered_in_worker() -> dict:
    import os

    import verl
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

    return {
        "pid": os.getpid(),
        "verl": verl.__version__,
        "arms": sorted(k for k in POLICY_LOSS_REGISTRY if k.startswith("ablation_")),
        "external_modules": os.environ.get("VERL_USE_EXTERNAL_MODULES"),
    }


def test_arms_registered_in_a_ray_worker(ray_cpu):
    import os

    result = ray.get(registered_in_worker.remote(), timeout=300)
    assert result["pid"] != os.getpid()
    assert result["arms"] == ARMS, f"registered in the Ray worker: {result['arms']}"


def test_arms_registered_through_the_launchers_runtime_env(ray_cpu):
    from runners.verl_side.backend import overrides as ovr

    env = {"VERL_USE_EXTERNAL_MODULES": ovr.REGISTRY_MODULE}  # what the launcher sets for a PG/TIS arm
    task = registered_in_worker.options(runtime_env={"env_vars": env})
    result = ray.get(task.remote(), timeout=300)
    assert result["external_modules"] == ovr.REGISTRY_MODULE
    assert result["arms"] == ARMS
