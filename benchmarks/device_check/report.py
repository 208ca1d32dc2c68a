"""The device check's outputs: ``device_check.json`` (the report as measured) and ``device_check.md``.

:func:`write` (re)writes both after every part, so a check stopped from outside still leaves the
parts it finished. :func:`not_run` lists one line per part, arm or row that could not run, with its
reason, and per budget note.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

GIB = 1024**3
JSON_NAME, MARKDOWN_NAME = "device_check.json", "device_check.md"


def _num(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.{digits}f}"


def _gib(value: int | None) -> str:
    return "-" if value is None else f"{value / GIB:.2f}"


def _sci(value: float | None) -> str:
    return "-" if value is None else f"{value:.1e}"


def not_run(report: dict) -> list[str]:
    """One line per part, arm or row that did not run, and per budget note."""
    lines = []
    for name, part in report["parts"].items():
        if part["status"] in ("skipped", "failed", "running"):
            lines.append(f"{name}: {part['status']}: {part['reason']}")
        result = part.get("result") or {}
        for row in result.get("rows", []):
            if row.get("skipped"):
                what = row.get("arm") or f"{row.get('model')} at {row.get('tokens')} tokens"
                lines.append(f"{name}: {what}: {row['skipped']}")
        lines += [f"{name}: {note}" for note in result.get("notes", [])]
    return lines


def _head(result: dict) -> list[str]:
    s = result["sizes"]
    lines = [f"N = {s['tokens']} tokens x V = {s['vocab']}, k = {s['k']}, {s['logits_dtype']} logits, chunk "
             f"{s['chunk_rows']} rows; median of the timed repeats after {s['warmup']} warm-up rounds.", "",
             "| arm | forward ms | backward ms | total ms | x PG time | peak GiB | x PG peak "
             "| peak above inputs GiB | x PG above inputs | repeats |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(f"| {r['label']} | {_num(r['forward_ms'])} | {_num(r['backward_ms'])} | {_num(r['total_ms'])} "
                     f"| {_num(r['time_ratio_to_pg'])} | {_gib(r['peak_bytes'])} | {_num(r['memory_ratio_to_pg'])} "
                     f"| {_gib(r['extra_peak_bytes'])} | {_num(r['extra_memory_ratio_to_pg'])} | {r['repeats']} |")
    return lines


def _numerics(result: dict) -> list[str]:
    s = result["sizes"]
    lines = [f"{s['rows']} {s['logits_dtype']} rows x V = {s['vocab']}, k = {s['k']}; fp32 over all rows in "
             f"{_num(result['fp32_ms'])} ms; fp64 on {s['fp64_rows_per_group']} rows per group, the gradient on "
             f"{s['grad_rows_per_group']}. Tolerance ratio = max |fp32 - fp64| / (atol + rtol |fp64|) with the "
             f"repository test's rtol {s['rtol']:g}, atol {s['atol']:g} (gradient {s['grad_rtol']:g}, "
             f"{s['grad_atol']:g}): <= 1 passes.", "",
             "| tail 1-P | offset | cap | mean abs lse | fp64 tail | mean abs C | C max rel err | C tol ratio "
             "| log(1-P) max abs err | grad max rel err | grad tol ratio | engine log_softmax row shift "
             "| 1-P from engine head, max rel err |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        cap = "SC" if r["cap"] is None else f"SC+TIS {r['cap']:g}"
        lines.append(f"| {r['target_tail']:g} | {r['offset']:g} | {cap} | {_num(r['mean_abs_lse'], 1)} "
                     f"| {_sci(r['fp64_tail_mean'])} | {_sci(r['mean_abs_c'])} | {_sci(r['c_max_rel_err'])} "
                     f"| {_num(r['c_tolerance_ratio'], 3)} | {_sci(r['log_tail_max_abs_err'])} "
                     f"| {_sci(r['grad_max_rel_err'])} | {_num(r['grad_tolerance_ratio'], 3)} "
                     f"| {_sci(r['engine_log_softmax_shift'])} | {_sci(r['engine_tail_max_rel_err'])} |")
    return lines


def _model(result: dict) -> list[str]:
    s = result["sizes"]
    lines = [f"{s['precision']}, {s['optimizer']}, gradient checkpointing, dp_size {s['dp_size']}; one packed "
             f"sequence per step, median of {s['repeats']} steps after {s['warmup']} warm-up.", "",
             "| model | params | tokens | model states GiB | static GiB | peak fwd+bwd GiB | peak optimizer step GiB "
             "| activations (peak - static) GiB | fwd ms | bwd ms | step ms |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        if r.get("skipped"):
            lines.append(f"| {r['model']} | {r['parameters'] / 1e9:.2f} B | {r['tokens']} | not run: {r['skipped']} "
                         "| | | | | | | |")
            continue
        lines.append(f"| {r['model']} | {r['parameters'] / 1e9:.3f} B | {r['tokens']} | {_gib(r['model_state_bytes'])} "
                     f"| {_gib(r['static_bytes'])} | {_gib(r['peak_forward_backward_bytes'])} "
                     f"| {_gib(r['peak_optimizer_step_bytes'])} | {_gib(r['activation_peak_bytes'])} "
                     f"| {_num(r['forward_ms'])} | {_num(r['backward_ms'])} | {_num(r['step_ms'])} |")
    return lines


def _capacity(result: dict) -> list[str]:
    lines = ["| model | tokens | plan total GiB | measured peak GiB | plan / measured | plan model states GiB "
             "| measured states GiB | plan terms GiB |", "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in result["rows"]:
        if r.get("skipped"):
            lines.append(f"| {r['model']} | {r['tokens']} | not run: {r['skipped']} | | | | | |")
            continue
        terms = ", ".join(f"{k} {v / GIB:.2f}" for k, v in r["plan_terms_bytes"].items())
        lines.append(f"| {r['model']} | {r['tokens']} | {_gib(r['plan_total_bytes'])} ({r['plan_total_from']}) "
                     f"| {_gib(r['measured_peak_bytes'])} | {_num(r['plan_total_over_measured_peak'])} "
                     f"| {_gib(r.get('plan_model_states_bytes'))} | {_gib(r.get('measured_model_state_bytes'))} "
                     f"| {terms} |")
    return lines


SECTIONS = {
    "head_cost": ("SC and SC+TIS against PG: trainer cost of the head gather and centering term", _head),
    "numerics": ("The correction in fp32 against fp64", _numerics),
    "model_memory": ("Trainer memory of a Qwen3 model from its config (random weights)", _model),
    "capacity_plan": ("Capacity plan's trainer terms against the measured peaks", _capacity),
}


def markdown(report: dict) -> str:
    """The report as markdown: a header, one section per part, the lines of what did not run."""
    m = report["meta"]
    out = ["# Device check", "",
           f"{m['device']}; torch {m['torch']}, CUDA {m['cuda']}, transformers {m['transformers']}, Python "
           f"{m['python']}; mode {m['mode']}; started {m['started']}; wall {_num(m.get('wall_s'), 1)} s.", ""]
    for name, (title, table) in SECTIONS.items():
        part = report["parts"].get(name)
        out += [f"## {title} ({name})", ""]
        if part is None:
            out += ["not reached", ""]
        elif part.get("result"):
            out += [*table(part["result"]), ""]
        else:
            out += [part["reason"] if part["reason"].startswith("capacity plan") else
                    f"{part['status']}: {part['reason']}", ""]
    lines = not_run(report)
    out += ["## Not run", ""] + ([f"- {line}" for line in lines] or ["everything ran"]) + [""]
    return "\n".join(out)


def write(report: dict, out: Path) -> None:
    """Write ``device_check.json`` and ``device_check.md`` into ``out`` (created if missing)."""
    out.mkdir(parents=True, exist_ok=True)
    report["not_run"] = not_run(report)
    (out / JSON_NAME).write_text(json.dumps(report, indent=2, allow_nan=True) + "\n")
    (out / MARKDOWN_NAME).write_text(markdown(report))
