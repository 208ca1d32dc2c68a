"""verl config keys the harness sets that exist only in newer verl, and how the dry run checks them.

The score-centering arms need three keys that verl 0.9.1 (the PyPI pin) does not have; they
arrived with verl commit 8718ca30 (PR #8010). Composing them into verl 0.9.1's config would fail
("key not in struct"), so the dry run takes them out of the composition when the installed verl
lacks them and checks them against :data:`TABLE` instead: each value against its allowed values,
and the whole score-centering setting against the rules newer verl itself enforces (its config
validator and ``RolloutConfig``/``RolloutCorrectionConfig`` checks, as read from the PR's files),
adapted to the project's losses. When the installed verl has the keys, they are composed like any
other key and verl validates them; the table checks run as well. The same table is printed in
docs/verl_reference.md (a test keeps the two in step).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from runners.verl_backend import overrides as ovr
from runners.verl_backend import sc_support

_MISSING = object()


def _has_field(module: str, name: str, field: str) -> Callable[[], bool]:
    def known() -> bool:
        return field in sc_support._dataclass_fields(module, name)

    return known


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _bool(value: Any) -> bool:
    return isinstance(value, bool)


@dataclasses.dataclass(frozen=True)
class NewerKey:
    key: str  # override key, without a leading "+"
    since: str  # verl commit that introduced it
    allowed: str  # allowed values, in words
    meaning: str
    value_ok: Callable[[Any], bool]
    known_by_installed_verl: Callable[[], bool]


TABLE: tuple[NewerKey, ...] = (
    NewerKey(
        key="actor_rollout_ref.rollout.topk_log_probs",
        since=sc_support.REQUIRED_COMMIT,
        allowed="integer >= 1 (= method.top_k); needs rollout.name=vllm, calculate_log_probs=True, "
        "top_p=1, top_k=-1, logprobs_mode=processed_logprobs",
        meaning="vLLM returns the sampler's top-k log-probs per generated token (the head H)",
        value_ok=_positive_int,
        known_by_installed_verl=_has_field("verl.workers.config.rollout", "RolloutConfig", "topk_log_probs"),
    ),
    NewerKey(
        key="algorithm.rollout_correction.score_centering",
        since=sc_support.REQUIRED_COMMIT,
        allowed="true; needs bypass_mode=True, loss_type=reinforce, rollout_is in {null, token}, "
        "rollout_is_batch_normalize=False, and the same flag on the actor side",
        meaning="the driver carries the sampler head to the trainer",
        value_ok=_bool,
        known_by_installed_verl=_has_field(
            "verl.trainer.config.algorithm", "RolloutCorrectionConfig", "score_centering"
        ),
    ),
    NewerKey(
        key="actor_rollout_ref.actor.policy_loss.rollout_correction.score_centering",
        since=sc_support.REQUIRED_COMMIT,
        allowed="true, equal to the driver flag; actor and driver rollout_correction agree on "
        "bypass_mode, loss_type, rollout_is, rollout_is_threshold; loss_mode takes sc_correction",
        meaning="the FSDP engine computes the correction from the trainer logits and passes "
        "sc_correction= to the policy loss",
        value_ok=_bool,
        known_by_installed_verl=_has_field(
            "verl.trainer.config.algorithm", "RolloutCorrectionConfig", "score_centering"
        ),
    ),
)

BY_KEY = {entry.key: entry for entry in TABLE}


@dataclasses.dataclass(frozen=True)
class Deferred:
    """An override held out of the composition because the installed verl lacks its key."""

    entry: NewerKey
    override: str
    value: Any


def split(overrides: list[str]) -> tuple[list[str], list[Deferred]]:
    """``(composable, deferred)``: table keys the installed verl does not know are deferred."""
    native: list[str] = []
    deferred: list[Deferred] = []
    for item in overrides:
        key, value, _ = ovr.parse(item)
        entry = BY_KEY.get(key)
        if entry is not None and not entry.known_by_installed_verl():
            deferred.append(Deferred(entry, item, value))
        else:
            native.append(item)
    return native, deferred


def with_deferred(cfg: DictConfig, deferred: list[Deferred]) -> DictConfig:
    """A copy of the composed verl config with the deferred values set (for the table checks)."""
    view = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    with open_dict(view):
        for item in deferred:
            OmegaConf.update(view, item.entry.key, item.value, force_add=True)
    return view


def _get(cfg: DictConfig, key: str, default: Any = None) -> Any:
    value = OmegaConf.select(cfg, key, default=_MISSING)
    return default if value is _MISSING else value


def loss_takes_sc_correction(loss_mode: str) -> bool:
    """Is ``loss_mode`` a registered verl policy loss with an ``sc_correction`` parameter?"""
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

    fn = POLICY_LOSS_REGISTRY.get(loss_mode)
    return fn is not None and "sc_correction" in inspect.signature(fn).parameters


def score_centering_problems(cfg: DictConfig) -> list[str]:
    """What newer verl (plus the project's seam) would reject in this score-centering setting."""
    alg_rc = "algorithm.rollout_correction"
    act_rc = "actor_rollout_ref.actor.policy_loss.rollout_correction"
    rollout = "actor_rollout_ref.rollout"
    on_driver = bool(_get(cfg, f"{alg_rc}.score_centering", False))
    on_actor = bool(_get(cfg, f"{act_rc}.score_centering", False))
    if not (on_driver or on_actor):
        return []
    problems: list[str] = []
    if not (on_driver and on_actor):
        problems.append(
            f"score centering must be on in both {alg_rc}.score_centering and {act_rc}.score_centering"
        )
    topk = _get(cfg, f"{rollout}.topk_log_probs", 0)
    if not _positive_int(topk):
        problems.append(f"{rollout}.topk_log_probs must be an integer >= 1, got {topk!r}")
    expected = {
        f"{rollout}.name": "vllm",
        f"{rollout}.calculate_log_probs": True,
        f"{rollout}.logprobs_mode": "processed_logprobs",
        "trainer.use_v1": True,
        "actor_rollout_ref.model.use_remove_padding": True,
        "actor_rollout_ref.model.use_fused_kernels": False,
        f"{alg_rc}.bypass_mode": True,
        f"{alg_rc}.loss_type": "reinforce",
    }
    for key, want in expected.items():
        got = _get(cfg, key)
        if got != want:
            problems.append(f"score centering needs {key}={want!r}, got {got!r}")
    if float(_get(cfg, f"{rollout}.top_p", 1.0)) != 1.0 or int(_get(cfg, f"{rollout}.top_k", -1)) > 0:
        problems.append(
            f"score centering needs the full sampling distribution: {rollout}.top_p=1 and top_k=-1"
        )
    strategy = _get(cfg, "actor_rollout_ref.actor.strategy")
    if strategy not in ("fsdp", "fsdp2"):
        problems.append(
            f"score centering runs in the FSDP engine: actor_rollout_ref.actor.strategy must be fsdp or fsdp2, got {strategy!r}"
        )
    if bool(_get(cfg, "distillation.enabled", False)):
        problems.append("score centering cannot be combined with distillation.enabled=True")
    rollout_is = _get(cfg, f"{alg_rc}.rollout_is")
    if rollout_is not in (None, "token"):
        problems.append(
            f"score centering composes with token-level IS only: {alg_rc}.rollout_is in {{null, token}}, got {rollout_is!r}"
        )
    if bool(_get(cfg, f"{alg_rc}.rollout_is_batch_normalize", False)):
        problems.append(f"score centering needs {alg_rc}.rollout_is_batch_normalize=False")
    # verl 8718ca30 compares the two blocks key by key as written (no defaults filled in): a key set
    # on one side only is a mismatch there, so it is one here too.
    for name in ("bypass_mode", "loss_type", "rollout_is", "rollout_is_threshold"):
        a, b = _get(cfg, f"{act_rc}.{name}"), _get(cfg, f"{alg_rc}.{name}")
        if a != b:
            problems.append(
                f"score centering requires {act_rc}.{name} ({a!r}) to match {alg_rc}.{name} ({b!r})"
            )
    if rollout_is == "token":
        threshold = _get(cfg, f"{alg_rc}.rollout_is_threshold", 2.0)
        try:
            ok = float(threshold) > 0
        except (TypeError, ValueError):
            ok = False
        if not ok:
            problems.append(
                f"the project's SC+TIS correction needs a single TIS cap > 0 in {alg_rc}.rollout_is_threshold, got {threshold!r}"
            )
    loss_mode = _get(cfg, "actor_rollout_ref.actor.policy_loss.loss_mode")
    if loss_mode != "bypass_mode" and not loss_takes_sc_correction(str(loss_mode)):
        problems.append(
            f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode!r} is not a registered policy loss that takes sc_correction"
        )
    return problems


def check(cfg: DictConfig, overrides: list[str], deferred: list[Deferred]) -> list[dict[str, Any]]:
    """Check every table key set in ``overrides``; raise ``ValueError`` listing all problems.

    Returns one row per table key set: key, value, since, status ("table" when the installed
    verl lacks it, "native" when it was composed).
    """
    view = with_deferred(cfg, deferred)
    deferred_keys = {d.entry.key for d in deferred}
    rows, problems = [], []
    for item in overrides:
        key, value, _ = ovr.parse(item)
        entry = BY_KEY.get(key)
        if entry is None:
            continue
        if not entry.value_ok(value):
            problems.append(f"{key}={value!r}: allowed {entry.allowed}")
        rows.append(
            {
                "key": key,
                "value": value,
                "since": entry.since,
                "status": "table" if key in deferred_keys else "native",
            }
        )
    problems += score_centering_problems(view)
    if problems:
        raise ValueError("verl config check failed (keys of newer verl):\n  - " + "\n  - ".join(problems))
    return rows


def markdown_table() -> str:
    """The table as printed in docs/verl_reference.md."""
    lines = ["| key | since verl commit | allowed | what it does |", "|---|---|---|---|"]
    for e in TABLE:
        lines.append(f"| `{e.key}` | {e.since[:8]} | {e.allowed} | {e.meaning} |")
    return "\n".join(lines)
