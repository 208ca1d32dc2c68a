"""What the project as head carrier (:mod:`runners.verl_side.head`) plugs into on verl 0.9.1, and how to tell
each slot is there on the installed verl (docs/verl_reference.md prints :func:`slots_table`).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from collections.abc import Callable
from typing import Any

from runners.verl_side.revisions.lookup import declares, source_file


@dataclasses.dataclass(frozen=True)
class Slot:
    """One thing of the installed verl that :mod:`runners.verl_side.head` plugs into, and how to tell it is there."""

    where: str  # module.attribute
    what: str  # what the project relies on, in words
    holds: Callable[[], bool]


def _attribute(path: str) -> Any:
    module, _, name = path.rpartition(".")
    obj = importlib.import_module(module)
    for part in name.split("/"):
        obj = getattr(obj, part)
    return obj


def _has(path: str, *names: str) -> Callable[[], bool]:
    """``path`` (``module.Class``) exists and has every attribute in ``names``."""
    def holds() -> bool:
        try:
            obj = _attribute(path)
        except (ImportError, AttributeError):
            return False
        return all(hasattr(obj, n) for n in names)
    return holds


def _source_has(module: str, *snippets: str) -> Callable[[], bool]:
    """The installed ``module``'s source (read, not imported) contains every snippet."""
    def holds() -> bool:
        path = source_file(module)
        text = path.read_text(encoding="utf-8") if path else ""
        return bool(text) and all(s in text for s in snippets)
    return holds


def _code_has(path: str, *, names: tuple[str, ...] = (), consts: tuple[str, ...] = ()) -> Callable[[], bool]:
    """The function ``path`` (``module.Class/method``) refers to these names and string constants."""
    def holds() -> bool:
        import inspect

        try:
            code = inspect.unwrap(_attribute(path)).__code__  # under verl's tracing decorators
        except (ImportError, AttributeError):
            return False
        return set(names) <= set(code.co_names) | set(code.co_varnames) and set(consts) <= set(code.co_consts)
    return holds


def _field(module: str, cls: str, name: str) -> Callable[[], bool]:
    def holds() -> bool:
        try:
            return declares(module, cls, name)
        except (ImportError, AttributeError, TypeError):
            return False
    return holds


_SERVER = "verl.workers.rollout.vllm_rollout.vllm_async_server"  # imports vLLM: read as source
_FSDP = "verl.workers.engine.fsdp.transformer_impl.FSDPEngineWithLMHead"
PROJECT_SLOTS: tuple[Slot, ...] = (
    Slot(f"{_SERVER}.vLLMReplica", "the replica names its server class in server_class, and the server hands the "
         "request's sampling params (extra_args included) to SamplingParams and keeps the engine in self.engine",
         _source_has(_SERVER, "self.server_class = ray.remote(vLLMHttpServer)",
                     "SamplingParams(max_tokens=max_tokens, **sampling_params)", "self.engine = engine_client")),
    Slot("verl.workers.rollout.replica.RolloutReplicaRegistry", "rollout replicas are looked up by name (lazily)",
         _has("verl.workers.rollout.replica.RolloutReplicaRegistry", "register")),
    Slot("verl.workers.rollout.replica.TokenOutput.extra_fields", "a server's per-request extra fields",
         lambda: "extra_fields" in getattr(_attribute("verl.workers.rollout.replica.TokenOutput"), "model_fields", {})),
    Slot("verl.workers.rollout.llm_server.FullyAsyncLLMServerClient.generate", "resumed segments come from "
         "super().generate (where the project collects each segment's head)",
         _code_has("verl.workers.rollout.llm_server.FullyAsyncLLMServerClient/generate", names=("super", "generate"))),
    Slot("verl.workers.config.rollout.AgentLoopConfig.agent_loop_manager_class", "the agent-loop manager class is "
         "chosen by config", _field("verl.workers.config.rollout", "AgentLoopConfig", "agent_loop_manager_class")),
    Slot("verl.workers.config.rollout.RolloutConfig.custom", "verl's extension point for custom rollout settings (k)",
         _field("verl.workers.config.rollout", "RolloutConfig", "custom")),
    Slot("verl.trainer.ppo.v1.agent_loop_tq.AgentLoopWorkerTQ", "the TransferQueue agent-loop worker, its request "
         "and post-processing steps", _has("verl.trainer.ppo.v1.agent_loop_tq.AgentLoopWorkerTQ",
                                          "__ray_actor_class__", "_run_prompt", "_agent_loop_postprocess")),
    Slot("verl.experimental.agent_loop.AgentLoopOutput.as_dict", "the agent-loop output's fields, written into "
         "TransferQueue", _has("verl.experimental.agent_loop.AgentLoopOutput", "as_dict", "model_construct")),
    Slot(f"{_FSDP}.prepare_model_outputs", "the logits-processor slot, opened by the micro-batch's "
         "distillation_use_topk flag", _code_has(f"{_FSDP}/prepare_model_outputs", names=("logits_processor_func",),
                                                 consts=("distillation_use_topk",))),
    Slot("verl.workers.engine.base.EngineRegistry.get_engine_cls", "engines are chosen by (device, vendor), the "
         "vendor overridable by VERL_ENGINE_VENDOR",
         _code_has("verl.workers.engine.base.EngineRegistry/get_engine_cls", consts=("VERL_ENGINE_VENDOR",))),
    Slot("verl.workers.engine_workers.ActorWorker", "the actor's loss is functools.partial(ppo_loss, config=...)",
         _source_has("verl.workers.engine_workers", "partial(ppo_loss, config=actor_config)")),
    Slot("verl.workers.utils.padding.no_padding_2_padding", "packed per-token outputs -> the response layout",
         _has("verl.workers.utils.padding.no_padding_2_padding")),
)


def slots_table() -> str:
    """:data:`PROJECT_SLOTS` as printed in docs/verl_reference.md."""
    lines = ["| where (verl 0.9.1) | what the project relies on to carry the head |", "|---|---|"]
    lines += [f"| `{slot.where}` | {slot.what} |" for slot in PROJECT_SLOTS]
    return "\n".join(lines)
