"""The config schema: one dataclass per config group, registered in Hydra's ConfigStore.

Two halves of one mechanism, both read from the dataclasses below:

* **types** — every group yaml names its schema first in its defaults list (``conf/method/*.yaml``:
  ``- base_method``; ``conf/config.yaml``: ``- base_config`` for seed, sweep, trainer, rollout, eval,
  scenario), so Hydra's composition converts and type-checks every value (``trainer.n=abc`` fails to
  compose; :func:`runners.config.config_checks.compose_checked` words that error);
* **allowed values and ranges** — a field's ``metadata["rule"]`` (a :class:`Rule`, written with
  :func:`choice`, :func:`at_least`, ...), checked by :func:`check`, once, from ``runners.validate``
  before any compute. :func:`check` also merges a node into its schema (the experiment's inline
  ``model``/``data`` have no group yaml), so those are typed too.

A schema's field order is the order of its yaml's keys: the resolved config (``config.yaml`` of a
run folder, whose hash names the run) is the same text as before the schema existed. Keys a code path
reads with a default but no yaml sets (``runners.config.config_checks.OPTIONAL_KEYS``) are not fields: adding
them stays possible (``+model.rms_norm_eps=...``) and the resolved config of a run without them keeps
its text.

**Each key declared once.** The schema is the source of every key's name, type, allowed values and default; a
group yaml (``conf/backend/*.yaml``, ``conf/gpu/``, ``conf/model/``, ``conf/data/``, ``conf/config.yaml``) holds the
values and the comments a user reads. ``tests/test_config_keys.py`` holds the two together: a key in one of them
only, or a yaml value unlike the schema's default, fails there (composition alone rejects only a yaml key the schema
lacks). The schema keeps its defaults (the yaml repeats them, checked equal) because a config without the key
is still checked against it: an old run folder's ``config.yaml`` (``python -m runners.capacity --from-run``) and
an experiment's inline ``model``/``data``. The schema stays the source, not the yaml, because Hydra's ConfigStore
and the rules need Python dataclasses, and a yaml written from them would lose its comments.
Cross-field rules (score centering vs ``rollout.top_p``, ...) live in ``runners.validate``.

:func:`register` runs on ``import runners`` (``runners/__init__.py``), so every composition through
the project's code finds the schemas.
"""

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from typing import Any, Optional  # noqa: UP035 - OmegaConf reads these annotations

from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException, ValidationError

from ablations.arms.arm import IS_LEVELS
from runners.config.config_error import ConfigError


class SchemaError(ConfigError):
    """A value outside its schema; the message names the key and the allowed values."""


@dataclass(frozen=True)
class Rule:
    """Allowed values of one key: ``choices``, or a range (``ge``/``gt``/``le``), plus ``also`` exceptions."""

    choices: tuple[Any, ...] | None = None
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    integer: bool = False
    also: tuple[Any, ...] = ()
    nullable: bool = False

    def allows(self, value: Any) -> bool:
        if value is None:
            return self.nullable
        if value in self.also and not isinstance(value, bool):
            return True
        if self.choices is not None:
            return not isinstance(value, bool) and value in self.choices  # True == 1, False == 0: not choices
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.integer and not isinstance(value, int):
            return False
        if not math.isfinite(value):  # a range means finite numbers: inf >= 0 and nan compare as no number does
            return False
        return ((self.ge is None or value >= self.ge) and (self.gt is None or value > self.gt)
                and (self.le is None or value <= self.le))

    def describe(self, finite: bool = False) -> str:
        """The allowed values in words; ``finite``: say that a number must be finite (for an ``inf`` or ``nan``)."""
        if self.choices is not None:
            text = ", ".join(str(c) for c in self.choices)
        else:
            kind = "an integer" if self.integer else "a finite number" if finite else "a number"
            bounds = [f"{op} {v:g}" for op, v in ((">=", self.ge), (">", self.gt), ("<=", self.le)) if v is not None]
            text = f"{kind} {' and '.join(bounds)}" if bounds else kind
        extra = [*(str(a) for a in self.also), *(["null"] if self.nullable else [])]
        return text + "".join(f" or {e}" for e in extra)


def _field(default: Any, rule: Rule) -> Any:
    return field(default=default, metadata={"rule": rule})


def choice(*allowed: Any, default: Any = MISSING) -> Any:
    """A field whose value must be one of ``allowed``."""
    return _field(default, Rule(choices=tuple(allowed)))


def at_least(minimum: float, default: Any = MISSING, *, integer: bool = True, also: tuple[Any, ...] = (),
             nullable: bool = False) -> Any:
    """A field whose value must be >= ``minimum`` (an integer unless ``integer=False``)."""
    return _field(default, Rule(ge=minimum, integer=integer, also=also, nullable=nullable))


def positive(default: Any = MISSING, *, nullable: bool = False, le: float | None = None) -> Any:
    """A field whose value must be a number > 0 (and <= ``le``)."""
    return _field(default, Rule(gt=0, le=le, nullable=nullable))


def between(low: float, high: float, default: Any = MISSING, *, integer: bool = False) -> Any:
    """A field whose value must be a number (an integer with ``integer=True``) in [low, high]."""
    return _field(default, Rule(ge=low, le=high, integer=integer))


DTYPES = ("float32", "bfloat16", "float16")
WEIGHT_DTYPES = (*DTYPES, "float8_e4m3fn")
KV_BITS = (0, 2, 3, 4, 5, 6, 7, 8)


# -- method: the arm spec ----------------------------------------------------------------------------
@dataclass
class SampledTokenCorrection:
    """``method.rollout_correction``: verl's rollout correction of the sampled token, in verl's keys
    (``RolloutCorrectionConfig``); the thresholds are a number or a ``"lower_upper"`` string, checked by
    verl's own parsers at launch (``runners.config.config_checks.check_arm``)."""

    rollout_is: Optional[str] = _field(None, Rule(choices=IS_LEVELS, nullable=True))  # noqa: UP045
    rollout_is_threshold: Any = None
    rollout_rs: Optional[str] = None  # noqa: UP045
    rollout_rs_threshold: Any = None


@dataclass
class MethodConfig:
    """An arm's ``method`` node, made from its declaration (``ablations/arms/``, one node per arm in the
    ``method`` group) and read through :class:`ablations.arms.ArmSpec`.

    ``loss_mode`` is the policy loss verl looks up; ``tis_cap`` non-null: the project's token-level IS
    weight ``min(p/q, cap)``; ``rollout_correction``: any other correction, in verl's keys;
    ``score_centering``: it needs the sampler's top-``top_k`` head. ``top_k`` is the head size of the
    setup (its vocabulary), set once per setup: ``conf/config.yaml`` (embedded) or the experiment.
    """

    name: str = MISSING
    loss_mode: str = MISSING
    tis_cap: Optional[float] = positive(None, nullable=True)  # noqa: UP045
    score_centering: bool = False
    rollout_correction: Optional[SampledTokenCorrection] = None  # noqa: UP045
    top_k: int = at_least(1)


def method_nodes() -> list[tuple[str, MethodConfig]]:
    """(name, typed method node) of every declared arm, ``top_k`` left to the setup."""
    from ablations.arms import all_arms

    out = []
    for arm in all_arms().values():
        node = arm.method_node()
        rc = node.pop("rollout_correction")
        out.append((arm.name, MethodConfig(**node, rollout_correction=None if rc is None
                                           else SampledTokenCorrection(**rc))))
    return out


# -- the top level of conf/config.yaml ---------------------------------------------------------------
@dataclass
class TrainerConfig:
    total_steps: int = at_least(1)
    prompts_per_step: int = at_least(1)
    n: int = at_least(2)  # GRPO: a group of one has zero advantage
    lr: float = positive()
    weight_decay: float = at_least(0, integer=False)
    grad_clip: float = positive()
    loss_agg_mode: str = choice("token-mean")  # identical for all arms
    test_freq: int = at_least(1)
    save_freq: int = at_least(1)
    resume: str = choice("auto", "disable")


@dataclass
class RolloutConfig:
    temperature: float = positive()
    top_p: float = positive(le=1)
    top_k: int = at_least(1, also=(-1,))
    max_prompt_length: int = at_least(1)
    max_response_length: int = at_least(1)
    max_staleness: int = at_least(1)
    parameter_sync_step: int = at_least(1)


@dataclass
class EvalConfig:
    """``eval``: ``numerics`` is how the embedded evaluation samples (``runners.embedded.evaluate``): ``clean``
    with the trainer's own numerics, ``scenario`` through the scenario's sampler mismatch. It changes the
    scores, so runs that differ in it are scored differently. The verl backend validates through vLLM at
    the rollout engine's dtype and has no scenario numerics (scenarios are embedded-only), so there both
    values evaluate alike."""

    n: int = at_least(1)
    temperature: float = positive()
    top_p: float = positive(le=1)
    repeats: int = at_least(1, 1)
    numerics: str = choice("clean", "scenario", default="clean")


@dataclass
class RunConfig:
    """Keys of ``conf/config.yaml`` itself (the groups are typed by their own schemas).

    ``seed`` is at most 2**32 - 1: the range every generator it seeds accepts (numpy's legacy seed, verl's
    ``data.seed``; torch's generators take ``seed + 3`` and ``seed * 1000003 + step``)."""

    seed: int = between(0, 2**32 - 1, integer=True)
    sweep: str = MISSING
    results_root: str = MISSING
    run_name: str = MISSING
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    scenario: str = "default"
    model: Any = MISSING  # typed by MODELS (a group yaml, or an experiment's inline keys); ??? keeps the group's
    data: Any = MISSING  # typed by DATA


# -- backend ----------------------------------------------------------------------------------------
@dataclass
class EmbeddedSamplerConfig:
    weight_dtype: str = choice(*WEIGHT_DTYPES)
    int8_weights: bool = MISSING
    weight_noise: float = at_least(0, integer=False)
    compute_dtype: str = choice(*DTYPES, default="float32")
    kv_cache_bits: int = choice(*KV_BITS, default=0)
    key_cache_bits: Optional[int] = _field(None, Rule(choices=KV_BITS, nullable=True))  # noqa: UP045
    logits_dtype: str = choice(*DTYPES, default="float32")
    speed: float = at_least(1, integer=False)
    speed_jitter: float = between(0, 10)
    run_ahead_batches: int = at_least(0)


@dataclass
class EmbeddedBackendConfig:
    name: str = choice("embedded", default="embedded")
    device: str = choice("cpu", "cuda")
    threads: int = at_least(1)
    micro_batch_size: int = at_least(1)
    head_chunk_rows: int = at_least(1)
    gradient_diagnostics: bool = False
    keep_checkpoints: int = at_least(1)
    cache_dir: str = MISSING
    logger: list[str] = field(default_factory=list)  # verl's tracker names, as on the verl backend
    project_name: str = MISSING
    sampler: EmbeddedSamplerConfig = field(default_factory=EmbeddedSamplerConfig)


@dataclass
class VerlPlacement:
    nnodes: int = at_least(1)
    trainer_gpus_per_node: int = at_least(1)
    rollout_nnodes: int = at_least(1)
    rollout_gpus_per_node: int = at_least(1)
    rollout_tensor_parallel: int = at_least(1)
    shared_gpu: bool = False


@dataclass
class VerlActor:
    strategy: str = choice("fsdp", "fsdp2")
    dtype: str = choice("bfloat16", "float16", "float32")
    use_dynamic_bsz: bool = MISSING
    max_token_len_per_gpu: int = at_least(1)
    gradient_checkpointing: bool = MISSING
    remove_padding: bool = MISSING
    use_torch_compile: bool = MISSING
    calculate_entropy: bool = MISSING
    entropy_from_logits_with_chunking: bool = MISSING
    entropy_chunk_size: int = at_least(1, 2048)
    entropy_checkpointing: bool = False
    offload_policy: bool = False
    checkpoint_contents: list[str] = field(default_factory=lambda: ["model", "optimizer", "extra"])
    max_ckpt_to_keep: Optional[int] = at_least(1, None, nullable=True)  # noqa: UP045


@dataclass
class VerlRolloutEngine:
    name: str = choice("vllm")
    dtype: str = choice("bfloat16", "float16", "float32")
    gpu_memory_utilization: float = positive(le=1)
    checkpoint_engine: str = MISSING
    agent_workers: int = at_least(1)
    logprobs_mode: str = MISSING
    head_transport: str = choice("flat_logprobs", "logits_processor", default="flat_logprobs")
    log_prob_transport: str = choice("logprobs", "logits_processor", default="logprobs")
    max_num_seqs: int = at_least(1, 256)
    max_num_batched_tokens: int = at_least(1, 8192)


@dataclass
class VerlReward:
    function_path: str = MISSING
    function_name: str = MISSING
    manager_source: str = MISSING
    manager_name: str = MISSING
    manager_module: str = MISSING


@dataclass
class TimeAssumptions:
    """``backend.capacity.time``: the assumptions of the capacity plan's time estimate, one dataclass: the schema
    here and the estimate's argument (:mod:`runners.capacity.timing`). Their values and what each means:
    ``conf/backend/verl.yaml``."""

    mean_prompt_fraction: float = between(0, 1)
    mean_response_fraction: float = between(0, 1)
    train_mfu: float = positive(le=1)
    prefill_mfu: float = positive(le=1)
    decode_bandwidth_efficiency: float = positive(le=1)
    weight_sync_bytes_per_s: float = positive()
    head_transport_bytes_per_s: float = positive()
    host_link_bytes_per_s: float = positive()
    host_optimizer_params_per_s: float = positive()
    response_at_cap_fraction: float = between(0, 1)
    eval_mean_response_fraction: float = between(0, 1)
    eval_response_at_cap_fraction: float = between(0, 1)


@dataclass
class VerlCapacity:
    """``backend.capacity``: the capacity plan's switch and assumptions (``runners.capacity``)."""

    enforce: bool = True
    flash_attn: bool = True
    cuda_context_bytes: float = at_least(0, integer=False)
    trainer_nccl_bytes: float = at_least(0, integer=False)
    fragmentation: float = between(0, 1)
    vllm_outside_torch_bytes: float = at_least(0, integer=False)
    vllm_cuda_graph_bytes: float = at_least(0, integer=False)
    disk_budget_bytes: float = positive()
    internode_bytes_per_s_per_gpu: Optional[float] = None  # noqa: UP045 - null: the GPU preset's (runners/capacity/nodes.py)
    time: TimeAssumptions = field(default_factory=TimeAssumptions)


@dataclass
class VerlBackendConfig:
    name: str = choice("verl", default="verl")
    dry_run: bool = False
    platform: str = choice("gpu", "cpu", default="gpu")
    rehearsal_rollout: str = choice("standin", "vllm", default="standin")  # platform=cpu only (docs/rehearsal.md)
    python: Optional[str] = None  # noqa: UP045
    trainer_mode: str = choice("separate_async")
    num_warmup_batches: int = at_least(0)
    off_policy_strategy: str = choice("drop", "wait")
    ray_address: Optional[str] = None  # noqa: UP045 - null: verl's own Ray; HOST:PORT: join that cluster
    placement: VerlPlacement = field(default_factory=VerlPlacement)
    actor: VerlActor = field(default_factory=VerlActor)
    rollout_engine: VerlRolloutEngine = field(default_factory=VerlRolloutEngine)
    reward: VerlReward = field(default_factory=VerlReward)
    dump_rollouts: bool = MISSING
    logger: list[str] = field(default_factory=lambda: ["console", "file"])
    project_name: str = MISSING
    ingest_interval_s: Any = positive()  # int or float, as written
    capacity: VerlCapacity = field(default_factory=VerlCapacity)
    extra_overrides: list[str] = field(default_factory=list)


@dataclass
class LinkConfig:
    """A link between GPUs (``runners.capacity.timing.Link``): its kind, bytes per second in one direction and the
    latency of one collective step."""

    name: str = MISSING
    bytes_per_s: float = positive()
    latency_s: float = at_least(0, integer=False)


@dataclass
class GpuConfig:
    """``conf/gpu/<name>.yaml``: what one GPU offers, from its vendor's datasheet (the capacity plan reads it)."""

    name: str = MISSING
    memory_bytes: float = positive()
    memory_bandwidth_bytes_per_s: float = positive()
    bf16_dense_flops: float = positive()
    intra_node_link: LinkConfig = field(default_factory=LinkConfig)  # the GPUs of one node (NVLink or PCIe)


# -- model ------------------------------------------------------------------------------------------
@dataclass
class WarmstartConfig:
    steps: int = at_least(0)
    batch_size: int = at_least(1)
    lr: float = positive()
    warmup_steps: int = at_least(0)
    min_lr_ratio: float = between(0, 1)
    weight_decay: float = at_least(0, integer=False)
    grad_clip: float = positive()
    seed: int = at_least(0)


@dataclass
class TinyQwen3Config:
    """``conf/model/tiny_qwen3.yaml``: the embedded backend's policy (``runners/tiny/model.py``)."""

    name: str = MISSING
    hidden_size: int = at_least(1)
    num_hidden_layers: int = at_least(1)
    num_attention_heads: int = at_least(1)
    num_key_value_heads: int = at_least(1)
    head_dim: int = at_least(1)
    intermediate_size: int = at_least(1)
    max_position_embeddings: int = at_least(1)
    tie_word_embeddings: bool = True
    rope_theta: float = positive()
    attn_implementation: str = choice("sdpa", "eager")
    warmstart: WarmstartConfig = field(default_factory=WarmstartConfig)


@dataclass
class HFModelConfig:
    """A Hugging Face checkpoint trained by verl (the experiment's inline ``model``)."""

    name: str = MISSING
    path: str = MISSING
    enable_thinking: bool = False


# -- data -------------------------------------------------------------------------------------------
@dataclass
class ArithEvalSet:
    name: str = MISSING
    size: int = at_least(1)


@dataclass
class SyntheticArithConfig:
    """``conf/data/synthetic_arith.yaml`` (``runners/tiny/arithmetic_task.py`` checks the template and set names)."""

    name: str = MISSING
    digits: int = at_least(1)
    operation: str = choice("add", "sub", "mul")
    seed: int = at_least(0)
    prompt_template: str = MISSING
    eval_sets: list[ArithEvalSet] = field(default_factory=list)


@dataclass
class SumScratchpadConfig:
    """``conf/data/sum_scratchpad.yaml`` (``runners/tiny/scratchpad_task.py`` checks the rest)."""

    name: str = MISSING
    terms: int = between(2, 9, integer=True)
    max_term: int = between(1, 9, integer=True)
    seed: int = at_least(0)
    eval_sets: list[ArithEvalSet] = field(default_factory=list)


@dataclass
class ParquetSplit:
    hf_id: str = MISSING
    hf_config: str = MISSING
    split: str = MISSING
    revision: str = MISSING
    rows: int = at_least(1)
    rows_after_filter: int = at_least(1)
    data_source: str = MISSING
    file: str = MISSING


@dataclass
class ParquetEvalSet:
    name: str = MISSING
    file: str = MISSING
    size: int = at_least(1)


@dataclass
class ParquetDataConfig:
    """Prepared parquet files for verl (the experiment's inline ``data``; ``math_data``)."""

    name: str = MISSING
    dir: str = MISSING
    train: ParquetSplit = field(default_factory=ParquetSplit)
    eval_sets: list[ParquetEvalSet] = field(default_factory=list)


# -- which schema a node has -------------------------------------------------------------------------
BACKENDS: dict[str, type] = {"embedded": EmbeddedBackendConfig, "verl": VerlBackendConfig}
#: The model schema by backend: the embedded backend builds only the tiny Qwen3; verl loads a checkpoint.
MODELS: dict[str, type] = {"embedded": TinyQwen3Config, "verl": HFModelConfig}
#: Data schemas by ``data.name``; another task's keys are checked by its task class only.
DATA: dict[str, type] = {"synthetic_arith": SyntheticArithConfig, "sum_scratchpad": SumScratchpadConfig,
                         "dapo_math_aime": ParquetDataConfig}

#: ConfigStore entries: (group, name, node); group yamls name them in their defaults lists.
STORED: tuple[tuple[str | None, str, type], ...] = (
    (None, "base_config", RunConfig),
    ("method", "base_method", MethodConfig),
    ("backend", "base_embedded", EmbeddedBackendConfig),
    ("backend", "base_verl", VerlBackendConfig),
    ("gpu", "base_gpu", GpuConfig),
    ("model", "base_tiny_qwen3", TinyQwen3Config),
    ("data", "base_synthetic_arith", SyntheticArithConfig),
)


def register() -> None:
    """Store every schema in Hydra's ConfigStore (idempotent)."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    for group, name, node in STORED:
        store.store(group=group, name=name, node=node)
    for name, method in method_nodes():  # method=<arm>: one node per declared arm (ablations/arms/)
        store.store(group="method", name=name, node=method)


def schemas_of(cfg: DictConfig) -> list[tuple[str, type]]:
    """(key, schema) of every node of ``cfg`` that has one."""
    backend = OmegaConf.select(cfg, "backend.name")
    out: list[tuple[str, type]] = [("", RunConfig), ("method", MethodConfig)]
    if backend not in BACKENDS:
        raise SchemaError(f"backend.name={backend!r}; allowed: {', '.join(BACKENDS)}")
    out += [("backend", BACKENDS[backend]), ("model", MODELS[backend])]
    if backend == "verl":
        out.append(("gpu", GpuConfig))
    data = OmegaConf.select(cfg, "data.name")
    if data in DATA:
        out.append(("data", DATA[data]))
    return out


def check(cfg: DictConfig) -> None:
    """Raise :class:`SchemaError` naming the key and its allowed values for the first value outside the schema.

    Every number of the config, with a schema or without (an optional key, an inline group), must be
    finite: ``inf`` and ``nan`` are refused naming the key (by its rule, else by :func:`check_finite`)."""
    for key, schema in schemas_of(cfg):
        node = cfg if not key else OmegaConf.select(cfg, key)
        if node is None:
            raise SchemaError(f"{key} is missing from the config (schema {schema.__name__})")
        try:
            typed = OmegaConf.merge(OmegaConf.structured(schema), _without_extra(node, schema))
        except ValidationError as err:
            raise SchemaError(type_message(err, prefix=key)) from err
        except OmegaConfBaseException as err:
            raise SchemaError(f"{key}: {err}".split("\n")[0]) from err
        _check_rules(typed, schema, key)
    check_finite(cfg)


def check_finite(cfg: Any) -> None:
    """Raise :class:`SchemaError` for the first float of ``cfg`` (every key, lists included) that is ``inf`` or
    ``nan``: no key of the project means anything by an infinite or undefined number."""
    container = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig | ListConfig) else cfg

    def walk(node: Any, key: str) -> None:
        if isinstance(node, float) and not math.isfinite(node):
            raise SchemaError(f"{key}={node!r}: must be a finite number")
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            walk(v, f"{key}.{k}" if key else str(k))

    walk(container, "")


def _without_extra(node: Any, schema: type) -> Any:
    """``node`` as a plain container without keys the schema does not declare (optional keys; see the module doc)."""
    container = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig | ListConfig) else node
    return _prune(container, schema)


def _prune(value: Any, schema: Any) -> Any:
    if not (isinstance(schema, type) and dataclasses.is_dataclass(schema)) or not isinstance(value, dict):
        return value
    types = {f.name: f.type for f in dataclasses.fields(schema)}
    out = {}
    for k, v in value.items():
        if k in types:
            item = _list_item(types[k])
            out[k] = [_prune(x, item) for x in v] if item and isinstance(v, list) else _prune(v, _inner_type(types[k]))
    return out


def _inner_type(annotation: Any) -> Any:
    """The dataclass of a field's type (``Optional[X]`` unwrapped), else None."""
    if typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = args[0] if len(args) == 1 else annotation
    return annotation if isinstance(annotation, type) and dataclasses.is_dataclass(annotation) else None


def _list_item(annotation: Any) -> Any:
    if typing.get_origin(annotation) is list:
        return _inner_type(typing.get_args(annotation)[0])
    return None


def _check_rules(node: Any, schema: type, prefix: str) -> None:
    for f in dataclasses.fields(schema):
        key = f"{prefix}.{f.name}" if prefix else f.name
        if OmegaConf.is_missing(node, f.name):
            raise SchemaError(f"{key} must be set (it is ??? in the config)")
        value = node[f.name]
        if value is None and f.metadata.get("rule") is None:  # an optional node or value left out
            continue
        rule = f.metadata.get("rule")
        if rule is not None and not rule.allows(value):
            how = "; allowed:" if rule.choices is not None else ": must be"
            infinite = isinstance(value, float) and not math.isfinite(value)
            raise SchemaError(f"{key}={value!r}{how} {rule.describe(finite=infinite)}")
        inner, item = _inner_type(f.type), _list_item(f.type)
        if inner is not None:
            _check_rules(value, inner, key)
        elif item is not None:
            for i, entry in enumerate(value):
                _check_rules(entry, item, f"{key}.{i}")


_KINDS = {"Integer": "an integer", "Float": "a number", "Boolean": "true or false", "String": "a string"}


def type_message(err: ValidationError, prefix: str = "") -> str:
    """A composition/merge type error as ``KEY=VALUE: must be KIND`` (KIND from OmegaConf's message)."""
    key = err.full_key or ""
    key = f"{prefix}.{key}" if prefix and key else key or prefix
    first = str(err).splitlines()[0]
    kind = next((words for name, words in _KINDS.items() if f"converted to {name}" in first), None)
    kind = "true or false" if "is not a valid bool" in first else kind
    return f"{key}={getattr(err, 'value', '?')!r}: must be {kind}" if kind else f"{key}: {first}"
