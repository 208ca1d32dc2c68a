"""The device check (benchmarks/device_check/device_check.sh) runs where only torch and transformers are installed.

The main test runs ``bash benchmarks/device_check/device_check.sh --cpu-small`` as on the borrowed GPU machine:
``python3`` from ``PATH`` (a shim running this interpreter), the script's own ``PYTHONPATH``, and
verl, Ray, vLLM, Hydra and OmegaConf hidden by ``tests/fixtures/torch_only/sitecustomize.py`` (every
import finder wrapped so those names are not found, wherever they are installed). It checks the JSON:
every part present, the measured numbers finite, the ratios to PG computed, nothing forbidden loaded.
The other tests drive the parts' bookkeeping in-process: a capacity plan with the expected interface,
a part that fails, no CUDA.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TORCH_ONLY = ROOT / "tests" / "fixtures" / "torch_only"
HIDDEN = ("verl", "ray", "vllm", "hydra", "omegaconf")


def torch_only_env(tmp_path: Path) -> dict[str, str]:
    """An environment whose ``python3`` is this interpreter with the hidden packages not importable."""
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (shim / "python3").chmod(0o755)
    return {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}", "PYTHONPATH": str(TORCH_ONLY),
            "OMP_NUM_THREADS": "1", "OUT": str(tmp_path / "out")}


def finite(value) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def test_cpu_small_runs_without_the_gpu_stack(tmp_path):
    env = torch_only_env(tmp_path)
    for name in HIDDEN:  # the hook is active: each of them fails as if not installed
        probe = subprocess.run(["python3", "-c", f"import {name}"], env=env, capture_output=True, text=True)
        assert probe.returncode == 1 and f"No module named '{name}'" in probe.stderr, (name, probe.stderr)
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "device_check" / "device_check.sh"), "--cpu-small"], env=env,
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "out" / "device_check.json").read_text())
    assert (tmp_path / "out" / "device_check.md").read_text().startswith("# Device check")
    assert report["meta"]["mode"] == "cpu-small" and report["meta"]["loaded_forbidden"] == []
    parts = report["parts"]
    assert set(parts) == {"head_cost", "numerics", "model_memory", "capacity_plan"}
    assert all(parts[name]["status"] == "ok" for name in ("head_cost", "numerics", "model_memory")), parts

    head = {row["arm"]: row for row in parts["head_cost"]["result"]["rows"]}
    assert set(head) == {"pg", "pg_torch", "sc", "sc_tis"}
    for row in head.values():
        assert row["skipped"] is None and row["repeats"] >= 1
        for key in ("forward_ms", "backward_ms", "total_ms", "peak_bytes", "extra_peak_bytes",
                    "time_ratio_to_pg", "memory_ratio_to_pg", "extra_memory_ratio_to_pg"):
            assert finite(row[key]) and row[key] > 0, (row["arm"], key, row[key])
    assert head["pg"]["time_ratio_to_pg"] == 1.0

    numerics = parts["numerics"]["result"]["rows"]
    assert len(numerics) == 16  # 4 tails x 2 offsets x (SC, SC+TIS)
    for row in numerics:
        for key in ("c_max_rel_err", "c_tolerance_ratio", "log_tail_max_abs_err", "grad_tolerance_ratio"):
            assert finite(row[key]), (key, row)
        assert row["c_tolerance_ratio"] <= 1 and row["grad_tolerance_ratio"] <= 1, row  # the unit test's tolerance

    model_rows = parts["model_memory"]["result"]["rows"]
    assert [row["tokens"] for row in model_rows] == [64, 128]
    for row in model_rows:
        # fp32 weights, grads, two AdamW moments (and AdamW's scalar step per tensor)
        assert row["model_state_bytes"] == pytest.approx(4 * row["param_bytes"], rel=1e-4)
        assert all(finite(row[key]) for key in ("peak_bytes", "forward_ms", "backward_ms", "step_ms"))

    capacity = parts["capacity_plan"]
    if (ROOT / "runners" / "capacity").is_dir():
        assert capacity["status"] in ("ok", "partial"), capacity
    else:
        assert capacity["status"] == "skipped"
        assert capacity["reason"].startswith("capacity plan: not available in this tree (")
        assert any(line.startswith("capacity_plan: skipped: capacity plan: not available") for line in report["not_run"])


@pytest.fixture
def bench(monkeypatch):
    """The device check's modules (the package ``benchmarks.device_check``, from the repository root)."""
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks.device_check import capacity, check

    return types.SimpleNamespace(check=check, capacity=capacity)


def test_capacity_plan_terms_are_compared_with_the_measured_rows(bench, monkeypatch):
    plan = types.ModuleType("fake_capacity_trainer")

    class ModelShape:
        def __init__(self, hidden: int) -> None:
            self.hidden = hidden

        @classmethod
        def from_config(cls, config: dict) -> ModelShape:
            return cls(config["hidden_size"])

    def trainer_terms(shape, tokens, *, gradient_checkpointing, dp_size):
        assert gradient_checkpointing and dp_size == 1
        return {"model_states": 16 * shape.hidden, "activations": tokens, "total": 16 * shape.hidden + tokens}

    plan.ModelShape, plan.trainer_terms = ModelShape, trainer_terms
    monkeypatch.setitem(sys.modules, "fake_capacity_trainer", plan)
    monkeypatch.setattr(bench.capacity, "PLAN_MODULE", "fake_capacity_trainer")
    measured = {"model": "m", "shape": {"hidden_size": 10}, "tokens": 40, "peak_bytes": 400, "model_state_bytes": 160}
    result = bench.capacity.run([measured, {"model": "m", "tokens": 80, "skipped": "out of memory: x"}])
    first, second = result["rows"]
    assert first["plan_total_bytes"] == 200 and first["plan_total_over_measured_peak"] == 0.5
    assert first["plan_model_states_over_measured"] == 1.0 and first["plan_total_from"] == "total"
    assert second["skipped"] == "out of memory: x"

    from benchmarks.device_check import report as device_report

    meta = {"device": "d", "torch": "t", "cuda": None, "transformers": "x", "python": "3", "mode": "gpu", "started": "s"}
    report = {"meta": meta, "parts": {"capacity_plan": {"status": "ok", "reason": "", "result": result}}}
    text = device_report.markdown(report)
    assert "| m | 40 | 0.00 (total) | 0.00 | 0.50 |" in text and "| m | 80 | not run: out of memory: x |" in text
    assert device_report.not_run(report) == ["capacity_plan: m at 80 tokens: out of memory: x"]


def test_a_failing_part_is_recorded_and_the_others_still_run(bench, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("a bug in the part")

    monkeypatch.setattr(bench.check.device_numerics, "run", broken)
    rc = bench.check.main(["--cpu-small", "--out", str(tmp_path), "--parts", "numerics", "capacity_plan"])
    report = json.loads((tmp_path / "device_check.json").read_text())
    assert rc == 1
    assert report["parts"]["numerics"]["status"] == "failed"
    assert "ValueError: a bug in the part" in report["parts"]["numerics"]["traceback"]
    assert report["parts"]["capacity_plan"]["status"] in ("ok", "skipped")
    assert "numerics: failed: ValueError: a bug in the part" in (tmp_path / "device_check.md").read_text()


def test_without_cuda_each_gpu_part_says_so(bench, tmp_path, monkeypatch):
    monkeypatch.setattr(bench.check.torch.cuda, "is_available", lambda: False)
    rc = bench.check.main(["--out", str(tmp_path), "--parts", "head_cost", "numerics", "model_memory"])
    report = json.loads((tmp_path / "device_check.json").read_text())
    assert rc == bench.check.NO_DEVICE == 3  # issue 47: a machine whose GPU is not visible does not pass
    for name in ("head_cost", "numerics", "model_memory"):
        assert report["parts"][name]["status"] == "skipped"
        assert report["parts"][name]["reason"].startswith("no CUDA device")
    assert len(report["not_run"]) == 3


def test_an_arm_above_the_memory_limit_is_skipped_and_a_spent_budget_stops_the_repeats(bench):
    import torch

    from benchmarks.device_check.head import estimate_bytes, run
    from benchmarks.device_check.measure import Budget, PartSkipped

    sizes = {"tokens": 64, "vocab": 1000, "k": 8, "chunk_rows": 32}
    limit = estimate_bytes("pg_torch", 64, 1000, 8, 32) - 1
    result = run(torch.device("cpu"), **sizes, warmup=0, repeats=2, budget=Budget(60), limit_bytes=limit)
    rows = {row["arm"]: row for row in result["rows"]}
    assert "exceeds" in rows["pg_torch"]["skipped"] and rows["pg_torch"]["total_ms"] is None
    assert rows["sc"]["repeats"] == 2 and rows["sc"]["time_ratio_to_pg"] > 0
    with pytest.raises(PartSkipped, match="time budget of 0 s spent before any timed repeat"):
        run(torch.device("cpu"), **sizes, warmup=0, repeats=2, budget=Budget(0), limit_bytes=limit)
