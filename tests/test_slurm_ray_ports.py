"""The ports of a job's Ray nodes (runners/verl_side/cluster/slurm_ray.py): every port of a node is different, and
the nodes of one job never share a worker port, even on one machine (a job of two tasks on one host, as in
tests/test_slurm_multinode.py). The worker range once derived from a free port overlapped the metrics port it
was drawn beside, and ``ray start`` refused the node ("trying to use a port number ... used by other components")."""

from __future__ import annotations

import re

import pytest

from runners.verl_side.cluster import slurm_ray


def _ports(args: list[str]) -> tuple[set[int], range]:
    values = dict(re.fullmatch(r"--([a-z-]+)=(\d+)", a).groups() for a in args)
    low, high = int(values.pop("min-worker-port")), int(values.pop("max-worker-port"))
    return {int(v) for v in values.values()}, range(low, high + 1)


def test_no_worker_port_is_one_of_the_nodes_other_ports():
    for window in range(0, slurm_ray.worker_windows(), 7):
        listening, workers = _ports(slurm_ray.node_port_args(window))
        assert len(listening) == 6 and len(workers) == slurm_ray.WORKER_PORTS
        assert not listening & set(workers)


def test_the_windows_lie_below_the_ephemeral_range_and_the_nodes_of_a_job_do_not_overlap():
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    count = slurm_ray.worker_windows()
    assert count >= 2
    for window in (0, count // 2, count - 1):  # the last window's next node wraps to the first
        _, head = _ports(slurm_ray.node_port_args(window))
        _, worker = _ports(slurm_ray.node_port_args(window + 1))
        assert max(head) < low and max(worker) < low and min(head) >= slurm_ray.WORKER_PORTS_FROM
        assert not set(head) & set(worker)


@pytest.mark.parametrize("given", ["", "garbage"])
def test_an_unreadable_ephemeral_range_falls_back_to_linuxs_default(monkeypatch, given):
    real_read = slurm_ray.Path.read_text

    def read_text(self, *args, **kwargs):
        if str(self) == "/proc/sys/net/ipv4/ip_local_port_range":
            return given
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(slurm_ray.Path, "read_text", read_text)
    assert slurm_ray.worker_windows() == (32768 - slurm_ray.WORKER_PORTS_FROM) // slurm_ray.WORKER_PORTS
