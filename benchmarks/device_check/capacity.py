"""Part "capacity_plan": the capacity plan's trainer memory terms against the measured model rows.

The plan (``runners.capacity.trainer_memory``) is imported here and nowhere
else, inside a try block: in a tree without it, or where it needs a package the machine lacks, the
part reports ``capacity plan: not available in this tree (<reason>)`` and the measured peaks of
``.model`` stand alone. Its expected interface, and all this module relies on:

* ``trainer_terms(shape, tokens, *, gradient_checkpointing, dp_size, ...) -> dict[str, int]`` (bytes);
* a ``ModelShape`` (in ``runners.capacity.trainer_memory`` or ``runners.capacity``) built from a Qwen3
  config dict by a classmethod (``from_config``, ``from_hf_config``, ``from_config_dict``,
  ``from_dict``) or by its constructor.

Compared per measured row: the plan's ``total`` (the sum of its terms where it has no ``total``)
against the measured peak, and its ``model_states`` (where present) against the state bytes counted
from the tensors; every term is reported as the plan gave it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .measure import PartSkipped, ratio

PLAN_MODULE = "runners.capacity.trainer_memory"
SHAPE_FACTORIES = ("from_config", "from_hf_config", "from_config_dict", "from_dict")


def load_plan() -> tuple[ModuleType | None, str]:
    """``(plan module, "")``, or ``(None, reason)`` when it cannot be imported or lacks ``trainer_terms``."""
    try:
        plan = importlib.import_module(PLAN_MODULE)
    except Exception as exc:  # absent, or importing something this machine lacks
        return None, f"{type(exc).__name__}: {exc}"
    if not callable(getattr(plan, "trainer_terms", None)):
        return None, f"{PLAN_MODULE} has no trainer_terms"
    return plan, ""


def model_shape(plan: ModuleType, config: dict) -> object:
    """The plan's ``ModelShape`` for a Qwen3 config dict."""
    cls = getattr(plan, "ModelShape", None)
    if cls is None:
        cls = getattr(importlib.import_module(PLAN_MODULE.rpartition(".")[0]), "ModelShape", None)
    if cls is None:
        raise AttributeError(f"no ModelShape in {PLAN_MODULE} or its package")
    for name in SHAPE_FACTORIES:
        factory = getattr(cls, name, None)
        if callable(factory):
            return factory(dict(config))
    return cls(dict(config))


def compare(plan: ModuleType, row: dict) -> dict:
    """One measured row against the plan's terms for its shape and token count."""
    terms = plan.trainer_terms(model_shape(plan, row["shape"]), row["tokens"], gradient_checkpointing=True,
                               dp_size=1)
    terms = {str(key): int(value) for key, value in terms.items()}
    total_from = "total" if "total" in terms else "sum of terms"
    total = terms["total"] if "total" in terms else sum(terms.values())
    out = {"model": row["model"], "tokens": row["tokens"], "plan_terms_bytes": terms,
           "plan_total_bytes": total, "plan_total_from": total_from,
           "measured_peak_bytes": row.get("peak_bytes"),
           "plan_total_over_measured_peak": ratio(total, row.get("peak_bytes"))}
    if "model_states" in terms:
        out["plan_model_states_bytes"] = terms["model_states"]
        out["measured_model_state_bytes"] = row.get("model_state_bytes")
        out["plan_model_states_over_measured"] = ratio(terms["model_states"], row.get("model_state_bytes"))
    return out


def run(model_rows: list[dict] | None) -> dict:
    """The plan's terms against each measured row (rows that did not run are listed as skipped)."""
    plan, reason = load_plan()
    if plan is None:
        raise PartSkipped(f"capacity plan: not available in this tree ({reason})")
    if not model_rows:
        raise PartSkipped("capacity plan: present, but no model row was measured to compare with")
    rows = []
    for row in model_rows:
        if "skipped" in row:
            rows.append({"model": row["model"], "tokens": row["tokens"], "skipped": row["skipped"]})
            continue
        try:
            rows.append(compare(plan, row))
        except Exception as exc:  # the plan's interface differs from the one this module expects
            rows.append({"model": row["model"], "tokens": row["tokens"],
                         "skipped": f"capacity plan call failed: {type(exc).__name__}: {exc}"})
    return {"plan_module": PLAN_MODULE, "rows": rows, "notes": []}
