"""The rehearsal: the reference experiment's verl launch on a CPU (``backend.platform=cpu``).

``+experiment=rehearsal`` is ``+experiment=qwen3_4b_sc_repro`` with smaller sizes (its yaml) and
``backend.platform=cpu``, which swaps exactly the GPU-only leaves listed by :func:`swaps`, each
named, in the override list and the environment; everything else is the reference experiment's
launch, run by verl's whole V1 ``separate_async`` trainer (Ray, the agent loop, TransferQueue, the
replay buffer, weight sync every step, validation, checkpoints, the file logger). The dry run's
report lists the difference from the reference launch key by key (:func:`difference`).

What it trains on is :mod:`~runners.verl_side.platform.rehearsal.assets`, what its tiny model can hold
:mod:`~runners.verl_side.platform.rehearsal.limits`; :mod:`~runners.verl_side.platform.rehearsal.cpu_platform` is the
rehearsal as the platform seam's :class:`~runners.verl_side.platform.base.Platform`.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from runners.config.hydra_override import override, parse
from runners.verl_side.logits_processor import FILES_ENV
from runners.verl_side.platform import rehearsal as cpu

#: Module of the CPU platform, named in ``VERL_USE_EXTERNAL_MODULES`` so that a failed import is loud
#: (the ``verl.plugins`` entry point alone would be swallowed by verl).
PLUGIN_MODULE = f"{cpu.__name__}.plugin"
#: The environment of every process of a rehearsal, besides the platform: one thread per process
#: (2 cores run a dozen processes), no tokenizer thread pool.
CPU_THREADS_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
RUNTIME_ENV = "ray_kwargs.ray_init.runtime_env.env_vars"


@dataclasses.dataclass(frozen=True)
class Swap:
    """One named CPU stand-in: the verl overrides it sets (key -> value), the environment it adds and
    the modules it adds to ``VERL_USE_EXTERNAL_MODULES``."""

    name: str
    why: str
    overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    modules: tuple[str, ...] = ()

    def keys(self) -> list[str]:
        """What it sets: verl keys, ``env:NAME`` for the environment (driver and Ray's runtime_env)."""
        env = [*self.env, *(["VERL_USE_EXTERNAL_MODULES"] if self.modules else [])]
        return [*self.overrides, *(f"env:{k}" for k in env), *(f"{RUNTIME_ENV}.{k}" for k in env)]


def logical_gpus(cfg: DictConfig) -> int:
    """Logical GPUs declared to Ray: the trainer pool plus the rollout pool, as placed on a GPU node."""
    p = cfg.backend.placement
    return int(p.nnodes) * int(p.trainer_gpus_per_node) + int(p.rollout_nnodes) * int(p.rollout_gpus_per_node)


def rollout_name(cfg: DictConfig) -> str:
    """verl's rollout name in a rehearsal: the CPU rollout's own, or for an SC arm whose head verl carries
    ``vllm``, which the score-centering verl requires and the CPU platform maps to the same stand-in
    (:data:`runners.verl_side.platform.rehearsal.HEAD_ROLLOUT_NAME`). Where the project carries the head the CPU
    rollout answers the head request under its own name."""
    from ablations.arms import ArmSpec
    from runners.verl_side.revisions import installed

    native_sc = ArmSpec.of(cfg.method).sc and installed.head_carrier() is installed.VERL_CARRIES
    return cpu.HEAD_ROLLOUT_NAME if native_sc else cpu.ROLLOUT_NAME


def uses_vllm(cfg: DictConfig) -> bool:
    """Whether the rehearsal's rollout is vLLM's CPU build (``backend.rehearsal_rollout=vllm``)."""
    return OmegaConf.select(cfg, "backend.rehearsal_rollout", default="standin") == cpu.VLLM_ROLLOUT


#: The CPU engine's settings (vLLM's CPU build through verl's vLLM server), set once here: no sleep mode
#: (refused on CPUs), eager (its compile cache does not reload: 50-60 s a start), small sync buckets
#: (each bucket is one /dev/shm segment), no prefix cache (a sync would have to clear it).
VLLM_CPU_OVERRIDES = {"enable_sleep_mode": False, "enforce_eager": True, "enable_prefix_caching": False,
                      "checkpoint_engine.update_weights_bucket_megabytes": 16}
#: Its environment: KV cache of 1 GiB per replica (otherwise a share of the machine's RAM), no thread
#: pinning (the default pins every replica to core 0), one thread.
VLLM_CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}


def vllm_rollout_swap(cfg: DictConfig, state_dir: Path) -> Swap:
    """The rollout swap with vLLM's CPU build: verl's vLLM replica and server (the project's head-capturing
    server with a CPU weight loader), its settings and its folders (caches and RPC sockets in the attempt)."""
    from runners.verl_side.revisions import config_facts

    return Swap(
        "rollout", "vLLM's CPU build (the vllm-cpu extra) through verl's vLLM replica and server classes, "
        "registered under verl's name `vllm` by the CPU platform (runners.verl_side.platform.rehearsal.vllm_cpu: the project's "
        "head-capturing server, weights loaded through vLLM's in-place reload); eager, no sleep mode, "
        "1 GiB KV cache, 16 MB sync buckets, fp32",
        {f"{config_facts.ROLLOUT}.name": cpu.HEAD_ROLLOUT_NAME, f"{config_facts.ROLLOUT}.dtype": "float32",
         **{f"{config_facts.ROLLOUT}.{key}": value for key, value in VLLM_CPU_OVERRIDES.items()}},
        {cpu.ROLLOUT_ENV: cpu.VLLM_ROLLOUT, **VLLM_CPU_ENV,
         "VLLM_CACHE_ROOT": str(state_dir / "vllm_cache"), "VLLM_RPC_BASE_PATH": str(vllm_rpc_folder(state_dir)),
         FILES_ENV: str(head_files_folder(state_dir))})


def vllm_rpc_folder(state_dir: Path) -> Path:
    """vLLM's folder of IPC socket files for one attempt: short (a Unix socket's path holds at most 107
    bytes, and vLLM appends a 36-character name), under the temporary folder, named by the attempt."""
    return Path(tempfile.gettempdir()) / f"sc-vllm-rpc-{_attempt_tag(state_dir)}"


def _attempt_tag(state_dir: Path) -> str:
    """A short name of one attempt for folders outside the run folder (12 hex digits of its path's SHA-1)."""
    import hashlib

    return hashlib.sha1(str(state_dir).encode()).hexdigest()[:12]


def head_files_folder(state_dir: Path) -> Path:
    """The folder of one attempt's head files (``head_transport=logits_processor``,
    :mod:`runners.verl_side.logits_processor.head_file`): in ``/dev/shm`` (memory), named by the attempt."""
    parent = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    return parent / f"sc-vllm-heads-{_attempt_tag(state_dir)}"


def leftovers(cfg: DictConfig, state_dir: Path) -> tuple[Path, ...]:
    """What vLLM's CPU engine leaves outside the run folder, to be removed once its attempt has ended (verl's
    process group is gone): its folder of IPC socket files (:func:`vllm_rpc_folder`) and of head files
    (:func:`head_files_folder`, those of requests in flight when it ended). None for the stand-in."""
    return (vllm_rpc_folder(state_dir), head_files_folder(state_dir)) if uses_vllm(cfg) else ()


#: verl's weight sync (``BucketedWeightSender`` with shared memory) makes one ``verl_weights_<uuid>`` segment per
#: sync and unlinks it when the sync ends; a process group killed mid-sync leaves it behind.
SYNC_PREFIX = "/dev/shm/verl_weights_"


def leftover_segments(cfg: DictConfig) -> tuple[str, ...]:
    """Prefixes of the shared-memory segments a vLLM rehearsal's group can leave if killed: verl's weight sync
    makes one per sync (:data:`SYNC_PREFIX`); the watchdog unlinks those of its attempt that no live process
    maps. None for the stand-in (its sync is a file in the attempt)."""
    return (SYNC_PREFIX,) if uses_vllm(cfg) else ()


def swaps(cfg: DictConfig, state_dir: Path) -> list[Swap]:
    """The CPU swaps of a rehearsal, in the order they are applied (``state_dir``: the attempt's
    folder for the weight-sync files and the rollout's sync log)."""
    model = Path(str(cfg.model.path)).expanduser().resolve()
    rollout = vllm_rollout_swap(cfg, state_dir) if uses_vllm(cfg) else Swap(
        "rollout", f"`{cpu.ROLLOUT_NAME}` in verl's RolloutReplicaRegistry (runners.verl_side.platform.rehearsal.rollout): "
        "an HF model sampling on the CPU instead of vLLM, returning the sampler's top-k head where a request "
        "asks for it; an SC arm on verl as head carrier keeps rollout.name="
        f"{cpu.HEAD_ROLLOUT_NAME} (the score-centering verl takes the head from that name only), which the "
        "CPU platform registers to the same stand-in",
        {"actor_rollout_ref.rollout.name": rollout_name(cfg), "actor_rollout_ref.rollout.dtype": "float32"})
    return [
        Swap("model", "the shipped tiny Qwen3 (prepare_assets) instead of a hub checkpoint; sdpa, no flash-attn",
             {"actor_rollout_ref.model.path": model,
              "actor_rollout_ref.model.override_config.attn_implementation": "sdpa"}),
        Swap("platform", "verl's platform `cpu` (runners.verl_side.platform.rehearsal.verl_device): device cpu, gloo collectives; "
             "verl's FSDP engine is looked up under the cuda device name; one thread per process",
             env={**cpu.ENVIRONMENT, **CPU_THREADS_ENV}, modules=(PLUGIN_MODULE,)),
        rollout,
        Swap("weight sync", f"`{cpu.WEIGHT_SYNC_BACKEND}` in verl's CheckpointEngineRegistry "
             "(runners.verl_side.platform.rehearsal.weight_sync): a file per sync instead of NCCL",
             {"actor_rollout_ref.rollout.checkpoint_engine.backend": cpu.WEIGHT_SYNC_BACKEND},
             {cpu.STATE_DIR_ENV: str(state_dir)}),
        logical_gpus_swap(cfg),
        Swap("sizes", "one storage unit, one reward worker, no dataloader workers: 2 cores",
             {"transfer_queue.backend.SimpleStorage.num_data_storage_units": 1, "reward.num_workers": 1,
              "data.dataloader_num_workers": 0}),
    ]


def logical_gpus_swap(cfg: DictConfig) -> Swap:
    """Ray's GPUs on a CPU: declared to verl's own local Ray, or (``backend.ray_address`` set) by the nodes of the
    cluster it joins (``ray start --num-gpus=N``; Ray refuses ``num_gpus`` from a driver that joins)."""
    if OmegaConf.select(cfg, "backend.ray_address", default=None):
        return Swap("logical GPUs", "Ray places verl's resource pools on the logical GPUs that the nodes of the cluster "
                    "at backend.ray_address declared (ray start --num-gpus; docs/multinode.md)")
    # include_dashboard=False still leaves Ray's API server (dashboard.py, UsageStatsHead only, no HTTP
    # frontend): Ray 2.60 has no switch for it (docs/verl_reference.md, "Ray's processes in a rehearsal").
    return Swap("logical GPUs", "Ray places verl's resource pools on logical GPUs and CPUs of a local cluster",
                {"ray_kwargs.ray_init.num_gpus": logical_gpus(cfg), "ray_kwargs.ray_init.num_cpus": 16,
                 "ray_kwargs.ray_init.include_dashboard": False})


def apply(overrides: list[str], cfg: DictConfig, state_dir: Path) -> list[str]:
    """``overrides`` with every swap's keys replaced in place (or appended with ``++`` where the
    reference launch does not set them)."""
    out = list(overrides)
    index = {parse(item)[0]: i for i, item in enumerate(out)}
    for swap in swaps(cfg, state_dir):
        for key, value in swap.overrides.items():
            if key in index:  # same form as the reference's entry
                out[index[key]] = override(key, value, add=parse(out[index[key]])[2] == "++")
            else:
                index[key] = len(out)
                out.append(override(key, value, add=True))
    return out


def environment(cfg: DictConfig, state_dir: Path) -> tuple[dict[str, str], list[str]]:
    """The environment the swaps add to every verl process, and the modules they add to
    ``VERL_USE_EXTERNAL_MODULES``."""
    env: dict[str, str] = {}
    modules: list[str] = []
    for swap in swaps(cfg, state_dir):
        env.update(swap.env)
        modules += swap.modules
    return env, modules


def difference(reference: list[str], rehearsal: list[str], reference_env: dict[str, str],
               rehearsal_env: dict[str, str], named: list[Swap]) -> list[dict[str, Any]]:
    """One row per verl key or environment variable whose value differs from the reference launch:
    ``{"key", "reference", "rehearsal", "by"}``, ``by`` the swap that set it, else the experiment's yaml."""
    owner = {key: s.name for s in named for key in s.keys()}

    def values(items: list[str]) -> dict[str, Any]:
        return {key: value for key, value, _ in map(parse, items)}

    rows = []
    for kind, ref, new in (("", values(reference), values(rehearsal)),
                           ("env:", reference_env, rehearsal_env)):
        for key in [*ref, *(k for k in new if k not in ref)]:
            if ref.get(key, "<unset>") != new.get(key, "<unset>"):
                name = f"{kind}{key}"
                rows.append({"key": name, "reference": ref.get(key, "<unset>"), "rehearsal": new.get(key, "<unset>"),
                             "by": owner.get(name, "conf/experiment/rehearsal.yaml")})
    return rows


def difference_text(report: dict[str, Any]) -> str:
    """The difference as a table for people: one line per key, grouped by what set it."""
    lines = ["CPU swaps (runners/verl_side/platform/rehearsal/swaps.py):"]
    lines += [f"  {s['name']}: {s['why']}" for s in report["swaps"]]
    lines.append("")
    lines.append("difference from +experiment=qwen3_4b_sc_repro (key: reference -> rehearsal):")
    by: dict[str, list[dict[str, Any]]] = {}
    for row in report["difference"]:
        by.setdefault(row["by"], []).append(row)
    for name, rows in by.items():
        lines.append(f"  [{name}]")
        lines += [f"    {r['key']}: {r['reference']} -> {r['rehearsal']}" for r in rows]
    return "\n".join(lines) + "\n"
