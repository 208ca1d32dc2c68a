"""A Ray cluster over the nodes of one SLURM job (``hydra/launcher=slurm_multinode``), verl's SLURM pattern.

The launcher config submits one job of ``nodes`` nodes per arm with one task per node; submitit runs the
Hydra job (``runners/launch.py``'s ``main``) in every task (``srun``). :func:`job_task` tells them apart
(submitit's ``JobEnvironment``: global rank, number of tasks, the job's folder):

* **task 0, the head** (:func:`head_of_job`, around the verl launch): starts a Ray head on its node
  (``ray start --head``, a temporary folder of its own, every port picked free, token authentication with a
  token made for the job), writes the head's address, the token and its window of worker ports
  (:func:`node_port_args`) to ``<job folder>/<job id>_ray_head.json``
  (mode 0600, on the shared filesystem submitit needs anyway: **that file is how the address reaches the
  workers**), waits until every task's node has joined, then runs the arm with ``backend.ray_address`` set to
  the head (the cluster check of :mod:`runners.verl_side.cluster.ray_cluster` then runs against it). When the arm
  ends, however it ends, it writes ``<job id>_ray_done`` and stops its node.
* **every other task, a worker** (:func:`serve_as_worker`, before the launcher touches the run folder): waits
  for the head's file, joins (``ray start --address=<head>``), and stays until the head writes its done file
  or its node stops, then stops its own node. It never locks, writes or reads the run folder.

Requeue: SLURM signals the job ``signal_delay_s`` before its time limit; submitit (task 0) requeues it and
the tasks exit, the ``finally`` blocks stopping the nodes, and SLURM kills whatever is left in the
allocation with the job. The requeued job brings up a new cluster, and the arm resumes from its newest
checkpoint in the same run folder (a new attempt, as on one node).

On a CPU rehearsal (``backend.platform=cpu``) each node declares ``trainer_gpus_per_node +
rollout_gpus_per_node`` logical GPUs (:func:`node_gpus`); on GPU nodes Ray counts the node's GPUs itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from runners.verl_side.platform import platform_for

HEAD_FILE = "{job}_ray_head.json"
DONE_FILE = "{job}_ray_done"
#: In the environment of each node's processes: its temporary folder, by which :func:`stop_node` finds them.
NODE_ENV = "SC_RAY_NODE_DIR"
JOIN_TIMEOUT_S = 600


@dataclasses.dataclass(frozen=True)
class JobTask:
    rank: int
    tasks: int
    job_id: str
    folder: Path  # submitit's folder of the job (shared by its nodes)

    @property
    def head_file(self) -> Path:
        return self.folder / HEAD_FILE.format(job=self.job_id)

    @property
    def done_file(self) -> Path:
        return self.folder / DONE_FILE.format(job=self.job_id)


def job_task(cfg: DictConfig) -> JobTask | None:
    """This process's task where it is one of several tasks of a submitit job running the verl backend, else None."""
    if OmegaConf.select(cfg, "backend.name") != "verl" or OmegaConf.select(cfg, "backend.dry_run"):
        return None
    if not os.environ.get("SUBMITIT_EXECUTOR"):  # submitit's job script sets it (slurm, local)
        return None
    import submitit

    try:
        env = submitit.JobEnvironment()
    except RuntimeError:  # not inside a submitit job
        return None
    if env.num_tasks <= 1:
        return None
    return JobTask(int(env.global_rank), int(env.num_tasks), str(env.job_id), Path(env.paths.folder))


def node_gpus(cfg: DictConfig) -> list[str]:
    """``ray start`` arguments for the node's GPUs: the platform's (:meth:`~runners.verl_side.platform.base.Platform.ray_start_args`:
    logical ones on a CPU rehearsal, none on GPU nodes, where Ray counts them itself)."""
    return platform_for(cfg).ray_start_args()


def free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


#: Ray's worker processes of one node listen on a window of this many ports (``--min/max-worker-port``).
WORKER_PORTS = 201
#: The windows start here and end below the kernel's ephemeral range, from which :func:`free_ports` draws the
#: node's other ports (and the kernel every outgoing connection's), so none of those can fall in a window.
WORKER_PORTS_FROM = 10000


def worker_windows() -> int:
    """How many disjoint windows of :data:`WORKER_PORTS` ports lie between :data:`WORKER_PORTS_FROM` and the
    kernel's ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range``; Linux's default 32768 where unreadable)."""
    try:
        ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    return max(1, (ephemeral_low - WORKER_PORTS_FROM) // WORKER_PORTS)


@dataclasses.dataclass(frozen=True)
class HeadPorts:
    """A head node's ports: ``port`` (its GCS, the cluster's address), ``window`` (of worker ports; task ``rank``'s
    node takes ``window + rank``, so one job's nodes never share a port) and ``args`` (``ray start``'s for the rest)."""

    port: int
    window: int
    args: list[str]


def head_ports() -> HeadPorts:
    """Eight free ports drawn together (so all different) and a random window of worker ports, for ``ray start --head``."""
    port, client_port, *node_ports = free_ports(8)
    window = secrets.randbelow(worker_windows())
    return HeadPorts(port, window, [f"--ray-client-server-port={client_port}", *node_port_args(window, node_ports)])


def node_port_args(window: int, ports: list[int] | None = None) -> list[str]:
    """Ports for every listening process of a node (two may share a machine): ``ports``, six free ones (drawn now
    where None), and window ``window`` (modulo :func:`worker_windows`) of worker ports, below the ephemeral range,
    so no worker port is one of the six (Ray refuses a port used twice)."""
    ports = free_ports(6) if ports is None else ports
    names = ("--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
             "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port")
    low = WORKER_PORTS_FROM + (window % worker_windows()) * WORKER_PORTS
    return [*(f"{n}={p}" for n, p in zip(names, ports, strict=True)), f"--min-worker-port={low}",
            f"--max-worker-port={low + WORKER_PORTS - 1}"]


def ray_start(args: list[str], env: dict[str, str]) -> None:
    out = subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "start", *args], env=env, capture_output=True,
                         text=True, timeout=300)
    if out.returncode:
        raise RuntimeError(f"ray start {' '.join(args)} failed: {' | '.join(out.stderr.strip().splitlines()[-3:])}")


def node_pids(temp_dir: Path) -> set[int]:
    """The processes of the node(s) started with ``temp_dir`` (their environment or command line names it)."""
    pids = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            seen = (proc / "cmdline").read_bytes() + (proc / "environ").read_bytes()
        except OSError:
            continue
        if str(temp_dir).encode() in seen:
            pids.add(int(proc.name))
    return pids


def stop_node(temp_dir: Path, grace_s: float = 20.0) -> set[int]:
    """SIGTERM, then SIGKILL, to the processes of the node(s) of ``temp_dir``; returns those still alive."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        for pid in node_pids(temp_dir):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while node_pids(temp_dir) and time.monotonic() < deadline:
            time.sleep(0.5)
    return node_pids(temp_dir)


def _wait_for(predicate, timeout_s: float, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not happen within {timeout_s:g} s")
        time.sleep(1.0)


@contextlib.contextmanager
def head_of_job(cfg: DictConfig, task: JobTask, join_timeout_s: float = JOIN_TIMEOUT_S) -> Iterator[str]:
    """Task 0: the Ray head of the job's cluster (the module docstring); yields its address once every node joined.
    The token goes into this process's environment, which the verl driver inherits."""
    from ray._private.services import get_node_ip_address

    from runners.verl_side.cluster import ray_cluster

    temp_dir = Path(tempfile.mkdtemp(prefix=f"sc-ray-{task.job_id}-", dir="/tmp"))
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, **auth, NODE_ENV: str(temp_dir)}
    ports = head_ports()
    address = f"{get_node_ip_address()}:{ports.port}"
    try:
        ray_start(["--head", f"--port={ports.port}", f"--temp-dir={temp_dir}", "--include-dashboard=false",
                   "--disable-usage-stats", *node_gpus(cfg), *ports.args], env)
        staged = task.head_file.with_suffix(".tmp")
        staged.write_text(json.dumps({"address": address, "temp_dir": str(temp_dir), "worker_window": ports.window,
                                      **auth}))
        staged.chmod(0o600)
        os.replace(staged, task.head_file)
        os.environ.update(auth)
        _wait_for(lambda: len(ray_cluster.probe(address)) >= task.tasks, join_timeout_s,
                  f"all {task.tasks} nodes of SLURM job {task.job_id} joining the Ray head at {address}")
        yield address
    finally:
        task.done_file.touch()
        stop_node(temp_dir)
        task.head_file.unlink(missing_ok=True)
        shutil.rmtree(temp_dir, ignore_errors=True)  # the node's sessions, logs and sockets


def serve_as_worker(cfg: DictConfig, task: JobTask, join_timeout_s: float = JOIN_TIMEOUT_S) -> None:
    """A task other than 0: a Ray worker node of the job's cluster until the head is done (the module docstring).
    Nothing where ``backend.ray_address`` is set (task 0 refuses the launch: the job brings up its own cluster)."""
    if OmegaConf.select(cfg, "backend.ray_address", default=None):
        return
    _wait_for(task.head_file.exists, join_timeout_s, f"the Ray head of SLURM job {task.job_id} writing {task.head_file}")
    head = json.loads(task.head_file.read_text())
    temp_dir = Path(head["temp_dir"])  # a worker node uses the head's folder name, on its own machine
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "RAY_AUTH_MODE": head["RAY_AUTH_MODE"],
           "RAY_AUTH_TOKEN": head["RAY_AUTH_TOKEN"], NODE_ENV: f"{temp_dir}-worker{task.rank}"}
    ray_start([f"--address={head['address']}", "--disable-usage-stats", *node_gpus(cfg),
               *node_port_args(int(head["worker_window"]) + task.rank)], env)
    worker_tag = Path(env[NODE_ENV])
    try:
        while not task.done_file.exists() and node_pids(worker_tag):
            time.sleep(2.0)
    finally:
        stop_node(worker_tag)
        if not node_pids(temp_dir):  # on its own machine the worker node keeps its session in the head's folder name
            shutil.rmtree(temp_dir, ignore_errors=True)
