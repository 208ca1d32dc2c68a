"""Rollout ``cpu_hf``: a standalone rollout replica that samples from an HF causal LM on the CPU.

What verl's V1 trainer needs of a rollout server, answered on a CPU (one Ray actor per replica,
named ``cpu_hf_server_<rank>``):

* ``generate(prompt_ids, sampling_params, request_id)`` -> ``TokenOutput``: token-in/token-out
  sampling with a KV cache; ``log_probs`` are the sampled tokens' log-probs after temperature (and
  top-k/top-p), what vLLM returns with ``logprobs_mode=processed_logprobs``;
  ``extra_fields["global_steps"]`` is the weight version that sampled them (the staleness tag);
* the sampler's head: where the request asks for one -- ``sampling_params["topk_log_probs"] = k > 0``,
  which the score-centering verl's agent loop sends on training rollouts only, from ``rollout.topk_log_probs``, or
  ``sampling_params["extra_args"]["sc_ablations_topk"] = k``, the project as head carrier on verl
  0.9.1 (:mod:`runners.verl_side.head`) --, ``extra_fields["response_topk_ids"]`` (int32) and
  ``["response_topk_log_probs"]`` (float32), one row of the k largest processed log-probs per generated
  token, the layout both vLLM servers return; a request that asks for none gets none;
* registered under :data:`~runners.verl_side.platform.rehearsal.ROLLOUT_NAME` and, on the CPU platform only, under
  verl's name ``vllm`` too (:data:`~runners.verl_side.platform.rehearsal.HEAD_ROLLOUT_NAME`): the score-centering verl takes the head from
  ``rollout.name=vllm`` only, so the rehearsal's SC arms keep that name and get this stand-in;
* ``abort_all_requests``/``resume_generation`` around a weight sync: a request in flight returns
  what it has with ``stop_reason="aborted"`` and verl's client resumes it with prompt + those tokens;
* weights arrive through the checkpoint engine in a :class:`CpuCheckpointEngineWorker` (verl's
  worker class with this replica's server adapter), which loads them into the server and sets the
  weight version; each load appends a line to ``$SC_ABLATIONS_CPU_STATE_DIR/rollout_syncs.jsonl``
  (replica, global_steps, a digest of the weights), the record that the sampler follows the trainer.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import ray
import torch
from verl.checkpoint_engine.base import CheckpointEngineWorker
from verl.single_controller.ray import RayClassWithInitArgs
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry, TokenOutput
from verl.workers.rollout.utils import ensure_async_iterator

from runners.verl_side.head import TOKEN_IDS, TOKEN_LOG_PROBS
from runners.verl_side.head.vllm_head import requested_k
from runners.verl_side.platform.rehearsal import HEAD_ROLLOUT_NAME, ROLLOUT_NAME
from runners.verl_side.platform.rehearsal.sync_log import append_sync, weights_digest

SERVER_PREFIX = f"{ROLLOUT_NAME}_server_"


def model_path(model_config: Any) -> str:
    """The local folder (or id) of the model in verl's ``HFModelConfig`` (or its dict form)."""
    for key in ("local_path", "path"):
        value = model_config.get(key) if isinstance(model_config, dict) else getattr(model_config, key, None)
        if value:
            return str(value)
    raise ValueError("the rollout's model config has no path")


def processed_log_probs(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """Log-probs of the distribution sampled from: ``logits / temperature``, then top-k and top-p
    filtering (filtered tokens get ``-inf``), renormalised. ``temperature <= 0`` is greedy: the
    plain log-softmax (the argmax is taken by the caller)."""
    logits = logits.float()
    if temperature <= 0:
        return torch.log_softmax(logits, -1)
    logits = logits / temperature
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = torch.softmax(sorted_logits, -1)
        drop = probs.cumsum(-1) - probs > top_p  # keep the smallest prefix whose mass reaches top_p
        logits = logits.scatter(0, order[drop], float("-inf"))
    return torch.log_softmax(logits, -1)


class CpuHFServer:
    """One rollout server: an HF causal LM in float32 on the CPU, one thread."""

    def __init__(self, config: Any, model_config: Any, replica_rank: int) -> None:
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(1)
        self.config = config
        self.replica_rank = replica_rank
        self.model = AutoModelForCausalLM.from_pretrained(model_path(model_config), dtype=torch.float32,
                                                          attn_implementation="sdpa").eval()
        eos = self.model.generation_config.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos]) if eos is not None else set()
        self.generator = torch.Generator().manual_seed(int(getattr(config, "seed", 0) or 0) + replica_rank)
        self.global_steps: int | None = None
        self.paused = False
        self.resumed = asyncio.Event()
        self.resumed.set()
        self.requests = 0

    def ready(self) -> bool:
        return True

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str,
                       image_data: Any = None, video_data: Any = None, **kwargs: Any) -> TokenOutput:
        while self.paused:
            await self.resumed.wait()
        params = dict(sampling_params)
        head_size = int(params.get("topk_log_probs") or 0) or requested_k(params)  # training requests only
        max_tokens = int(params.get("max_tokens") or params.get("max_new_tokens") or self.config.response_length)
        temperature = float(params.get("temperature", 1.0))
        top_k, top_p = int(params.get("top_k", -1) or -1), float(params.get("top_p", 1.0))
        version = self.global_steps
        tokens: list[int] = []
        sampled: list[float] = []
        head_ids: list[np.ndarray] = []
        head_log_probs: list[np.ndarray] = []
        stop_reason = "completed"
        past = None
        self.requests += 1
        with torch.no_grad():
            for _ in range(max(1, max_tokens)):
                step_input = torch.tensor([list(prompt_ids) if past is None else [tokens[-1]]], dtype=torch.long)
                out = self.model(input_ids=step_input, past_key_values=past, use_cache=True)
                past = out.past_key_values
                log_probs = processed_log_probs(out.logits[0, -1], temperature, top_k, top_p)
                if temperature <= 0:
                    token = int(torch.argmax(log_probs))
                else:
                    token = int(torch.multinomial(log_probs.exp(), 1, generator=self.generator))
                tokens.append(token)
                sampled.append(float(log_probs[token]))
                if head_size:
                    head = torch.topk(log_probs, min(head_size, log_probs.shape[-1]))
                    head_ids.append(head.indices.to(torch.int32).numpy())
                    head_log_probs.append(head.values.to(torch.float32).numpy())
                if token in self.eos_ids:
                    break
                await asyncio.sleep(0)  # let an abort or a weight sync in between tokens
                if self.paused:  # partial rollout: verl's client resumes with prompt + these tokens
                    stop_reason = "aborted"
                    break
        extra: dict[str, Any] = {"global_steps": version}
        if head_size:
            extra[TOKEN_IDS] = np.stack(head_ids)
            extra[TOKEN_LOG_PROBS] = np.stack(head_log_probs)
        return TokenOutput(token_ids=tokens, log_probs=sampled if params.get("logprobs") else None,
                           stop_reason=stop_reason, extra_fields=extra)

    def load_weights(self, state: dict[str, torch.Tensor], global_steps: int | None) -> int:
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        tied = self.model.config.tie_word_embeddings
        missing = [m for m in missing if not (tied and m == "lm_head.weight")]
        if missing or unexpected:
            raise RuntimeError(f"weights do not fit the rollout model: missing {missing}, unexpected {unexpected}")
        if global_steps is not None:
            self.global_steps = global_steps
        append_sync(self.replica_rank, global_steps, weights_digest(state))
        return len(state)

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    async def abort_all_requests(self, reject_request: bool = False, **kwargs: Any) -> dict[str, Any]:
        self.paused = True
        self.resumed.clear()
        return {"aborted_count": 0, "request_ids": []}

    async def resume_generation(self) -> None:
        self.paused = False
        self.resumed.set()

    # memory management and profiling: nothing to do on a CPU
    async def wake_up(self, *args: Any, **kwargs: Any) -> None: ...
    async def sleep(self, *args: Any, **kwargs: Any) -> None: ...
    async def clear_kv_cache(self) -> None: ...
    async def release_kv_cache(self) -> None: ...
    async def resume_kv_cache(self) -> None: ...
    async def start_profile(self, **kwargs: Any) -> None: ...
    async def stop_profile(self) -> None: ...


class CpuHFServerAdapter(BaseRollout):
    """What the checkpoint-engine worker hands received weights to: this replica's server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any = None, replica_rank: int = -1,
                 **kwargs: Any) -> None:
        super().__init__(config, model_config, device_mesh)
        self.replica_rank = replica_rank
        self.is_leader_rank = True

    def server(self):
        return ray.get_actor(f"{SERVER_PREFIX}{self.replica_rank}")

    async def resume(self, tags: list[str]) -> None:
        pass

    async def release(self) -> None:
        pass

    async def update_weights(self, weights, global_steps: int | None = None, wire_format: str = "named_tensors",
                             **kwargs: Any) -> None:
        if wire_format != "named_tensors":
            raise ValueError(f"rollout {ROLLOUT_NAME!r} takes named tensors, got wire format {wire_format!r}")
        state = {}
        async for name, tensor in ensure_async_iterator(weights):
            state[name] = tensor.clone()
        await self.server().load_weights.remote(state, global_steps)


class CpuCheckpointEngineWorker(CheckpointEngineWorker):
    """verl's checkpoint-engine worker with this rollout's adapter (verl's adapter table has no
    registration API, so the adapter is passed in)."""

    def __init__(self, rollout_config: Any, model_config: Any, replica_rank: int = -1, **kwargs: Any) -> None:
        adapter = CpuHFServerAdapter(config=rollout_config, model_config=model_config, replica_rank=replica_rank)
        super().__init__(rollout_config, model_config, server_adapter=adapter)


class CpuHFReplica(RolloutReplica):
    """A standalone replica: its checkpoint-engine worker in verl's placement, and one server actor."""

    def get_ray_class_with_init_args(self) -> RayClassWithInitArgs:
        return RayClassWithInitArgs(cls=ray.remote(CpuCheckpointEngineWorker), rollout_config=self.config,
                                    model_config=self.model_config, replica_rank=self.replica_rank)

    async def launch_servers(self) -> None:
        name = f"{SERVER_PREFIX}{self.replica_rank}"
        server = (ray.remote(CpuHFServer)
                  .options(name=name, max_concurrency=self.max_concurrency, num_cpus=0)
                  .remote(self.config, self.model_config, self.replica_rank))
        await server.ready.remote()
        self.servers = [server]
        self._server_handle = server
        self._server_address = name


RolloutReplicaRegistry.register(ROLLOUT_NAME, lambda: CpuHFReplica)
# Imported only where VERL_PLATFORM=cpu (runners.verl_side.platform.rehearsal.plugin), where vLLM cannot run anyway.
RolloutReplicaRegistry.register(HEAD_ROLLOUT_NAME, lambda: CpuHFReplica)
