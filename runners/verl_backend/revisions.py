"""What the harness relies on in each verl revision it supports: the one table of facts about verl.

* **0.9.1** (the PyPI pin): the V1 ``separate_async`` trainer (FSDP2 + standalone vLLM on Ray),
  bypass-mode REINFORCE, token-level IS; rollout-correction ``rollout_is_threshold`` defaults to
  :data:`DEFAULT_IS_THRESHOLD`. No score-centering transport of its own, but the slots of
  :data:`PROJECT_SLOTS`, through which the project carries the sampler's head itself
  (:data:`PROJECT_TRANSPORT`, :mod:`runners.verl_head`).
* **8718ca30** (PR #8010): 0.9.1 plus score centering. vLLM returns the head
  (``rollout.topk_log_probs``), it is carried through partial rollouts and TransferQueue, and the
  FSDP engine hands the trainer logits to a logits-processor slot, :data:`SEAM_MODULE`, into which
  the project plugs its correction (:mod:`runners.verl_backend.sc_seam`): :data:`VERL_TRANSPORT`.
  It adds the config keys of :data:`NEWER_KEYS` and enforces :data:`SC_REQUIRES` and :data:`SC_SIDES_AGREE`.

Which transport an SC arm uses (:func:`transport`): verl's own where the installed verl has the
seam module, else the project's; :func:`check` verifies the chosen one's facts on the installed verl
and an SC launch stops before anything starts where they do not hold. Either way the correction that
trains is the project's (``ablations.score_centering``).

Read by every module of the backend. docs/verl_reference.md prints :func:`markdown_table` and
:func:`slots_table` (a test keeps them in step). Importing this module is cheap; :func:`check` imports verl.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from runners.verl_head import MANAGER_CLASS


@dataclasses.dataclass(frozen=True)
class Revision:
    name: str
    commit: str | None  # None: the PyPI release
    install: str  # how a GPU user gets it (see docs/verl_reference.md)
    score_centering: bool


_SC_COMMIT = "8718ca30a3f002f93b7c4fd99b9b2506718681bc"
PYPI = Revision("0.9.1", None, 'pip install -e ".[gpu]"', score_centering=True)
#: Optional: verl's own transport. The project's gpu extra first, then verl from git at the commit over the wheel.
SCORE_CENTERING = Revision(_SC_COMMIT[:8], _SC_COMMIT, f'{PYPI.install} && pip install --no-deps '
                           f'"verl @ git+https://github.com/verl-project/verl.git@{_SC_COMMIT}"', score_centering=True)
REQUIRED_COMMIT = SCORE_CENTERING.commit  # the first with verl's own score-centering transport (the reference runs)
REQUIRED_COMMIT_SHORT = SCORE_CENTERING.name
INSTALL_COMMAND = SCORE_CENTERING.install

# -- every supported revision -----------------------------------------------------------------------
#: ``RolloutCorrectionConfig.rollout_is_threshold``'s default (a test holds it equal to the installed
#: verl's). Written on both sides for arms without TIS: 8718ca30 compares the blocks with no defaults.
DEFAULT_IS_THRESHOLD = 2.0
#: Bypass mode with REINFORCE: the sampler's log-prob is ``old_log_prob`` (no recompute pass), no PPO clip.
BYPASS_REINFORCE = {"bypass_mode": True, "loss_type": "reinforce"}
DRIVER_RC = "algorithm.rollout_correction"  # read by the driver
ACTOR_RC = "actor_rollout_ref.actor.policy_loss.rollout_correction"  # read by the actor (not copied)
ROLLOUT = "actor_rollout_ref.rollout"

# -- what 8718ca30 adds ---------------------------------------------------------------------------
#: The slot's module and the names in it the project relies on (read from PR #8010's files).
SEAM_MODULE = "verl.trainer.ppo.score_centering"
SEAM_NAMES = ("score_centering_ppo_loss", "score_centering_logits_processor")


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@dataclasses.dataclass(frozen=True)
class NewerKey:
    key: str  # override key, without a leading "+"
    declared_in: tuple[str, str, str]  # (module, dataclass, field) of the revision that has it
    allowed: str  # allowed values, in words (docs table)
    meaning: str
    value_ok: Callable[[Any], bool]
    since: str = REQUIRED_COMMIT


_RC_CLASS = ("verl.trainer.config.algorithm", "RolloutCorrectionConfig", "score_centering")
NEWER_KEYS: tuple[NewerKey, ...] = (
    NewerKey(f"{ROLLOUT}.topk_log_probs", ("verl.workers.config.rollout", "RolloutConfig", "topk_log_probs"),
             "integer >= 1 (= method.top_k); needs rollout.name=vllm, calculate_log_probs=True, "
             "top_p=1, top_k=-1, logprobs_mode=processed_logprobs",
             "vLLM returns the sampler's top-k log-probs per generated token (the head H)", _positive_int),
    NewerKey(f"{DRIVER_RC}.score_centering", _RC_CLASS,
             "true; needs bypass_mode=True, loss_type=reinforce, rollout_is in {null, token}, "
             "rollout_is_batch_normalize=False, and the same flag on the actor side",
             "the driver carries the sampler head to the trainer", lambda v: isinstance(v, bool)),
    NewerKey(f"{ACTOR_RC}.score_centering", _RC_CLASS,
             "true, equal to the driver flag; actor and driver rollout_correction agree on "
             "bypass_mode, loss_type, rollout_is, rollout_is_threshold; loss_mode takes sc_correction",
             "the FSDP engine computes the correction from the trainer logits and passes "
             "sc_correction= to the policy loss", lambda v: isinstance(v, bool)),
)
BY_KEY = {entry.key: entry for entry in NEWER_KEYS}
TOPK_KEY, DRIVER_SC_KEY, ACTOR_SC_KEY = BY_KEY


@dataclasses.dataclass(frozen=True)
class Requirement:
    """``key`` must equal ``want`` (be one of them, for a tuple) in a score-centering arm's verl config."""

    key: str
    want: Any
    why: str
    project: str | None = None  # the project key that sets it (checked before any compute), if any
    absent: Any = None  # the value when the key is not in the config
    transport: str | None = None  # the head transport it belongs to (Transport.name); None: both

    def applies(self, transport_name: str) -> bool:
        return self.transport in (None, transport_name)

    def allows(self, value: Any) -> bool:
        return value in self.want if isinstance(self.want, tuple) else value == self.want

    def wanted(self) -> str:
        """``= value`` or ``in {a, b}``, the way the messages say it."""
        if isinstance(self.want, tuple):
            return "in {" + ", ".join(map(as_text, self.want)) + "}"
        return f"= {as_text(self.want)}"


def as_text(value: Any) -> str:
    """A config value the way the yaml writes it (true, null, 1.0)."""
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


FULL = "the head needs the full distribution"
#: The hazard of docs/score_centering.md ("In-place cross-entropy"): without entropy verl computes the
#: log-probs with flash-attn's cross-entropy and inplace_backward=True, which overwrites the logits.
IN_PLACE_CE = ("verl's log-prob backward would otherwise run flash-attn's cross-entropy in place over the logits "
               "the correction's backward reads")
#: What a score-centering arm needs of verl's config: for verl's own transport what 8718ca30's config
#: validator, ``RolloutConfig`` and ``RolloutCorrectionConfig`` (plus the project's seam) require, besides
#: :data:`NEWER_KEYS` and :data:`SC_SIDES_AGREE`; for the project's what :mod:`runners.verl_head` relies on.
SC_REQUIRES: tuple[Requirement, ...] = (
    Requirement(f"{ROLLOUT}.name", "vllm", "the head comes from vLLM", transport="verl"),
    Requirement(f"{ROLLOUT}.name", ("vllm", "cpu_hf"), "a rollout server that answers the project's head request "
                "(vLLM, or the CPU rehearsal's runners.verl_cpu)", transport="project"),
    Requirement(f"{ROLLOUT}.agent.agent_loop_manager_class", MANAGER_CLASS,
                "the project's agent-loop manager carries the head", transport="project"),
    Requirement(f"{ROLLOUT}.agent.default_agent_loop", "single_turn_agent", "the project's transport carries "
                "single-turn rollouts (every response token from one request)", transport="project",
                absent="single_turn_agent"),
    Requirement("actor_rollout_ref.actor.calculate_entropy", True, IN_PLACE_CE, project="backend.actor.calculate_entropy"),
    Requirement(f"{ROLLOUT}.calculate_log_probs", True, "the head comes with the sampled log-probs"),
    Requirement(f"{ROLLOUT}.logprobs_mode", "processed_logprobs", "the sampled distribution",
                project="backend.rollout_engine.logprobs_mode"),
    Requirement(f"{ROLLOUT}.top_p", 1.0, FULL, project="rollout.top_p", absent=1.0),
    Requirement(f"{ROLLOUT}.top_k", -1, FULL, project="rollout.top_k", absent=-1),
    Requirement("trainer.use_v1", True, "the V1 trainer carries the head"),
    Requirement("actor_rollout_ref.model.use_remove_padding", True, "verl's slot needs the packed layout",
                project="backend.actor.remove_padding"),
    Requirement("actor_rollout_ref.model.use_fused_kernels", False, "the head gather needs the full logits"),
    Requirement("actor_rollout_ref.actor.strategy", ("fsdp", "fsdp2"), "the slot is in the FSDP engine"),
    Requirement("distillation.enabled", (False, None), "no distillation with score centering", absent=False),
    *(Requirement(f"{DRIVER_RC}.{k}", v, "bypass-mode REINFORCE") for k, v in BYPASS_REINFORCE.items()),
    Requirement(f"{DRIVER_RC}.rollout_is", (None, "token"), "token-level IS only"),
    Requirement(f"{DRIVER_RC}.rollout_is_batch_normalize", (False, None), "token-level IS only", absent=False),
)
#: Keys 8718ca30 compares between the actor and the driver block as written (no defaults filled in).
SC_SIDES_AGREE = ("bypass_mode", "loss_type", "rollout_is", "rollout_is_threshold")


def loss_takes_sc_correction(loss_mode: str) -> bool:
    """Does ``loss_mode`` take the ``sc_correction`` term (how 8718ca30's loss passes it)? Read from
    the arm's declaration (``ablations.losses.arm(..., sc=True)``), like every other arm trait."""
    from ablations.losses import ARM_LOSSES

    spec = ARM_LOSSES.get(loss_mode)
    return spec is not None and spec.sc


def markdown_table() -> str:
    """:data:`NEWER_KEYS` as printed in docs/verl_reference.md."""
    lines = ["| key | since verl commit | allowed | what it does |", "|---|---|---|---|"]
    lines += [f"| `{e.key}` | {e.since[:8]} | {e.allowed} | {e.meaning} |" for e in NEWER_KEYS]
    return "\n".join(lines)


# -- what the project's transport relies on (verl 0.9.1) -----------------------------------------
@dataclasses.dataclass(frozen=True)
class Slot:
    """One thing of the installed verl that :mod:`runners.verl_head` plugs into, and how to tell it is there."""

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
    lines = ["| where (verl 0.9.1) | what the project's transport relies on |", "|---|---|"]
    lines += [f"| `{slot.where}` | {slot.what} |" for slot in PROJECT_SLOTS]
    return "\n".join(lines)


# -- defects of a revision, avoided by the environment ---------------------------------------------
@dataclasses.dataclass(frozen=True)
class EnvironmentFix:
    """A defect found in a verl revision that setting ``env`` in every verl process avoids.

    Applied only where the installed verl still has the defect (:meth:`present` reads the module's
    source, without importing verl), so an upgrade that fixes it drops the setting by itself.
    """

    name: str
    found_in: str  # the revision it was found in
    module: str
    env: dict[str, str]
    why: str

    def present(self) -> bool:
        return bool(logger_calls_with_flush(self.module))


def source_file(module: str) -> Path | None:
    """The ``.py`` file of an installed module, found without importing its package (``None``: absent)."""
    top, *rest = module.split(".")
    spec = importlib.util.find_spec(top)
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location, *rest[:-1], f"{rest[-1]}.py") if rest else None
        if candidate is not None and candidate.is_file():
            return candidate
    return None


def logger_calls_with_flush(module: str) -> list[int]:
    """Lines of ``module`` (an installed module, read as source) that call ``logger.<level>(..., flush=...)``:
    ``logging.Logger`` takes no ``flush``, so each raises ``TypeError`` whenever its level is enabled."""
    import ast

    if (path := source_file(module)) is None:
        return []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "logger"
            and any(k.arg == "flush" for k in node.keywords)]


#: verl 0.9.1's separate_async trainer logs ``logger.info(..., flush=True)`` at init when
#: ``actor_rollout_ref.hybrid_engine=False`` (the reference experiment); its logger's level is
#: ``VERL_LOGGING_LEVEL``, INFO by default, so every such launch died with ``TypeError: Logger._log()
#: got an unexpected keyword argument 'flush'``. WARN keeps that call (and only INFO messages) quiet.
LOGGER_FLUSH = EnvironmentFix("logger flush", PYPI.name, "verl.trainer.ppo.v1.trainer_separate_async",
                              {"VERL_LOGGING_LEVEL": "WARN"},
                              "logger.info(..., flush=True) at separate_async trainer init raises at level INFO")
ENVIRONMENT_FIXES: tuple[EnvironmentFix, ...] = (LOGGER_FLUSH,)


@lru_cache(maxsize=1)
def environment_fixes() -> dict[str, str]:
    """The environment every verl process needs on the installed verl (the fixes whose defect is present)."""
    env: dict[str, str] = {}
    for fix in ENVIRONMENT_FIXES:
        if fix.present():
            env.update(fix.env)
    return env


# -- which revision is installed ------------------------------------------------------------------
class ScoreCenteringUnsupported(ValueError, RuntimeError):
    """The installed verl cannot run an SC arm (a ValueError too: it is found before any compute)."""


@dataclasses.dataclass(frozen=True)
class Transport:
    """How an SC arm's sampler head reaches the trainer's logits."""

    name: str
    summary: str


VERL_TRANSPORT = Transport("verl", f"verl's own (verl {SCORE_CENTERING.name} or later: rollout.topk_log_probs), with "
                           "the project's correction installed in verl's slot (runners.verl_backend.sc_seam)")
PROJECT_TRANSPORT = Transport("project", "the project's, through verl's slots (runners.verl_head: a vLLM server class "
                              "chosen by the replica registry, the agent-loop manager chosen by config, the FSDP "
                              "engine chosen by vendor key), with the project's correction in the engine's "
                              "logits-processor slot")


def transport() -> Transport:
    """The transport an SC arm uses on the installed verl: verl's own where it has :data:`SEAM_MODULE`,
    else the project's (read from the installed files, without importing verl)."""
    return VERL_TRANSPORT if source_file(SEAM_MODULE) is not None else PROJECT_TRANSPORT


@dataclasses.dataclass(frozen=True)
class Support:
    ok: bool
    verl_version: str
    transport: str  # the name of the transport an SC arm uses
    missing: tuple[str, ...]  # what the installed verl lacks of it, in words

    def message(self, what: str = "an SC arm") -> str:
        lacks = "; ".join(self.missing) or "nothing"
        return (f"{what} cannot run on the installed verl {self.verl_version}: it would use the {self.transport} "
                f"head transport, and the installed verl lacks: {lacks}. The project's transport needs verl "
                f"{PYPI.name}'s slots ({PYPI.install}); verl's own needs verl commit {REQUIRED_COMMIT_SHORT} "
                f"({REQUIRED_COMMIT}) or later: {INSTALL_COMMAND}")


def declares(module: str, name: str, field: str) -> bool:
    """Does the installed verl's dataclass ``module.name`` have ``field``?"""
    cls = getattr(importlib.import_module(module), name)
    return field in {f.name for f in dataclasses.fields(cls)}


def known(entry: NewerKey) -> bool:
    """Does the installed verl have this newer key?"""
    return declares(*entry.declared_in)


def _verl_transport_missing() -> list[str]:
    missing: list[str] = []
    module = importlib.import_module(SEAM_MODULE)
    missing += [f"{SEAM_MODULE}.{n}" for n in SEAM_NAMES if not hasattr(module, n)]
    for where in dict.fromkeys(e.declared_in for e in NEWER_KEYS):
        if not declares(*where):
            missing.append(f"{where[1]}.{where[2]}")
    return missing


@lru_cache(maxsize=1)
def check() -> Support:
    """Inspect the installed verl (imports it: slow the first time in a process): the transport an SC
    arm uses and whether the installed verl has what it relies on."""
    import verl

    chosen = transport()
    missing = _verl_transport_missing() if chosen is VERL_TRANSPORT else [
        f"{slot.where} ({slot.what})" for slot in PROJECT_SLOTS if not slot.holds()]
    return Support(ok=not missing, verl_version=str(getattr(verl, "__version__", "unknown")), transport=chosen.name,
                   missing=tuple(missing))


def supported() -> bool:
    return check().ok


def require(what: str = "an SC arm") -> None:
    """Raise :class:`ScoreCenteringUnsupported`, naming what the installed verl lacks, if unsupported."""
    support = check()
    if not support.ok:
        raise ScoreCenteringUnsupported(support.message(what))
