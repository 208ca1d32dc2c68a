"""The capacity CLI as strict as the launcher, the fixes it proposes, the time's long tail and evaluation, the disk,
the requests in flight, the model configs, and the plan replanned from a run's first steps (issue 33).

Each test fails on the code before issue 33: the CLI then composed without checks (tracebacks, status 1 for
both a traceback and "does not fit"), proposed fixes no launch accepts, decoded for the mean response only,
planned no disk and no requests in flight, read a truncated config.json as "no config", and had no --from-run.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from runners.capacity import __main__ as cli
from runners.capacity import calibrate, disk, launch_checks, timing
from runners.capacity import plan as capacity
from runners.config.model_shapes import PUBLISHED, ModelConfigError, ModelShape, shape_of

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = "+experiment=qwen3_4b_sc_repro"
N = PUBLISHED["Qwen/Qwen3-4B"].parameters
QWEN3_14B = {"vocab_size": 151_936, "hidden_size": 5_120, "intermediate_size": 17_408, "num_hidden_layers": 40,
             "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": False}


def composed(*overrides: str):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides))
    OmegaConf.resolve(cfg)
    return cfg


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    out = capsys.readouterr()
    return status, out.out, out.err


# -- 1. the CLI is as strict as the launcher ---------------------------------------------------------------
@pytest.mark.parametrize(("override", "wanted"), [
    ("gpu=b200", "config error: gpu=b200: no such option; allowed: a100_80gb, h100_80gb, h200_141gb, rtx4090_24gb"),
    ("gpu.bf16_dense_flops=0", "config error: gpu.bf16_dense_flops=0"),
    ("backend.capacity.time.train_mfu=0", "config error: backend.capacity.time.train_mfu=0"),
    ("gpu.memory_bytes=0", "config error: gpu.memory_bytes=0"),
    ("gpu.memory_bytes=-80e9", "config error: gpu.memory_bytes=-8"),
    ("gpu.memory_bandwidth_bytes_per_s=-1", "config error: gpu.memory_bandwidth_bytes_per_s=-1"),
    ("backend.capacity.cuda_context_bytes=-1", "config error: backend.capacity.cuda_context_bytes=-1"),
    ("backend.placement.rollout_tensor_parallel=8", "config error: backend.placement.rollout_tensor_parallel=8"),
    ("backend.placement.rollout_tensor_parallel=3", "config error: backend.placement.rollout_tensor_parallel=3"),
    ("backend.rollout_engine.gpu_memory_utilization=1.5",
     "config error: backend.rollout_engine.gpu_memory_utilization=1.5"),
    ("backend.capacity.time.response_at_cap_fraction=0.9",
     "config error: backend.capacity.time.response_at_cap_fraction=0.9 with backend.capacity.time.mean_response_fraction"),
    ("nosuch=1", "config error: nosuch=1: nosuch is not a key"),
    ("backend=embedded", "config error: backend=embedded: the capacity plan is of a verl launch"),
])
def test_bad_input_is_one_config_error_line_with_status_2(capsys, override, wanted):
    extra = [] if override.startswith("backend=") else [REFERENCE]
    status, out, err = run_cli(capsys, *extra, override)
    assert status == cli.CONFIG_ERROR == 2
    assert err.startswith(wanted) and err.count("\n") == 1 and "Traceback" not in err
    assert out == ""  # nothing planned


def test_an_unknown_option_is_one_line_too(capsys):
    status, _, err = run_cli(capsys, "--bogus")
    assert status == 2 and err.startswith("config error: python -m runners.capacity: unrecognized arguments: --bogus")


def test_fits_is_0_and_does_not_fit_is_its_own_status(capsys):
    status, out, err = run_cli(capsys, REFERENCE, "method=pg")
    assert status == 0 and "**Fits.**" in out and err == ""
    status, out, err = run_cli(capsys, REFERENCE, "method=pg", "gpu=rtx4090_24gb")
    assert status == cli.DOES_NOT_FIT == 5 and status not in (1, 2)
    assert "**Does not fit.**" in out and err.startswith("does not fit: the capacity plan of pg-seed42 does not fit")


# -- 1-2. every proposed fix passes the launch checks; the fixes a researcher would try ------------------------
def _all_proposals(p: dict) -> list[dict]:
    out = []
    for side in ("trainer", "rollout"):
        s = p[side]
        out += [f["changes"] for f in s.get("fixes", []) if f["refused"] is None]
        if s.get("combined_fix"):
            out.append({c["key"]: c["value"] for c in s["combined_fix"]["changes"]})
    return out


@pytest.mark.parametrize("overrides", [
    ("method=sc", "gpu=rtx4090_24gb"),
    ("method=pg", "gpu=rtx4090_24gb"),
    ("method=pg", "model.path={q14}"),
    ("method=pg", "gpu=rtx4090_24gb", "backend.rollout_engine.gpu_memory_utilization=0.3"),
], ids=["sc-24gb", "pg-24gb", "14b-a100", "rollout-24gb"])
def test_every_proposed_fix_passes_the_launch_checks_and_keeps_the_node(tmp_path, overrides):
    (tmp_path / "q14").mkdir()
    (tmp_path / "q14" / "config.json").write_text(json.dumps(QWEN3_14B))
    cfg = composed(REFERENCE, *(o.format(q14=tmp_path / "q14") for o in overrides))
    p = capacity.plan(cfg)
    assert not p["fits"]
    proposals = _all_proposals(p)
    assert proposals
    for changes in proposals:
        changed = launch_checks.with_changes(cfg, changes)
        assert launch_checks.refused(changed) is None, changes
        assert changed.backend.rollout_engine.gpu_memory_utilization <= 1
        place = changed.backend.placement  # no node larger than the preset's: more nodes, never more per node
        assert place.trainer_gpus_per_node == cfg.backend.placement.trainer_gpus_per_node
        assert place.rollout_gpus_per_node == cfg.backend.placement.rollout_gpus_per_node


def test_a_14b_model_gets_more_trainer_nodes_of_the_same_size(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_14B))
    p = capacity.plan(composed(REFERENCE, "method=pg", f"model.path={tmp_path}"))
    more = {f["name"]: f for f in p["trainer"]["fixes"]}["more trainer nodes"]
    assert more["changes"] == {"backend.placement.nnodes": 2} and more["fits"]


def test_the_entropy_metric_off_only_where_the_arms_guard_allows_it():
    pg = capacity.plan(composed(REFERENCE, "method=pg", "gpu=rtx4090_24gb"))
    entropy = {f["name"]: f for f in pg["trainer"]["fixes"]}["the entropy metric off"]
    assert entropy["refused"] is None and "actor/entropy is no longer logged" in entropy["effect"]
    combined = pg["trainer"]["combined_fix"]  # the full 8,192-token reference on 24 GB, the same experiment
    assert combined["same_experiment"] and {c["key"]: c["value"] for c in combined["changes"]} == {
        "backend.actor.calculate_entropy": False, "backend.actor.offload_policy": True}
    for method in ("sc", "sc_tis"):
        p = capacity.plan(composed(REFERENCE, f"method={method}", "gpu=rtx4090_24gb"))
        refused = {f["name"]: f for f in p["trainer"]["fixes"]}["the entropy metric off"]["refused"]
        assert "backend.actor.calculate_entropy" in refused and "score centering" in refused
    tis = capacity.plan(composed(REFERENCE, "method=tis", "gpu=rtx4090_24gb"))
    assert {f["name"]: f for f in tis["trainer"]["fixes"]}["the entropy metric off"]["refused"] is None


def test_shorter_responses_come_last_and_are_labelled_a_different_experiment():
    # three trainer GPUs: no Ulysses SP 2 (it must divide them), so only shorter responses make SC fit
    p = capacity.plan(composed(REFERENCE, "method=sc", "gpu=rtx4090_24gb", "backend.placement.trainer_gpus_per_node=3"))
    combined = p["trainer"]["combined_fix"]
    assert combined["fixes"][-1] == "shorter responses" and not combined["same_experiment"]
    assert "a different experiment" in capacity.markdown(p)


def test_ulysses_sp_multiplies_the_token_budget_and_changes_the_plan():
    """verl packs max_token_len_per_gpu x SP tokens into a micro-batch (verl/workers/engine/utils.py): SP 2 with
    4,608 tokens a GPU holds a 9,216-token sequence; the launcher's check and the plan both know it."""
    sp2 = "backend.extra_overrides=['actor_rollout_ref.actor.ulysses_sequence_parallel_size=2']"
    half = "backend.actor.max_token_len_per_gpu=4608"
    refused = launch_checks.refused(composed(REFERENCE, "method=sc_tis", half))
    assert refused.startswith("backend.actor.max_token_len_per_gpu=4608 is not allowed: >= rollout.max_prompt_length")
    assert launch_checks.refused(composed(REFERENCE, "method=sc_tis", half, sp2)) is None
    odd = launch_checks.refused(composed(REFERENCE, "method=sc_tis", "backend.actor.max_token_len_per_gpu=4000", sp2))
    assert "4608" in odd and "ulysses_sequence_parallel_size=2" in odd
    plain, split = (capacity.plan(composed(REFERENCE, "method=sc_tis", *extra)) for extra in ((), (half, sp2)))
    assert split["trainer"]["per_gpu_bytes"]["total"] < plain["trainer"]["per_gpu_bytes"]["total"] - 10e9
    assert split["time"]["sequence_parallel"] == 2 and split["time"]["sequence_parallel_seconds"] > 0
    assert plain["time"]["sequence_parallel_seconds"] == 0


# -- 3. time: the long tail, evaluation's own length, verl's FLOP convention, the range ------------------------
def test_a_step_decodes_until_its_longest_response():
    lengths = timing.Lengths(8_192, 0.5, 0.0)  # uniform on [0, 8192]: the longest of many is near the cap
    assert lengths.longest(1_000) == pytest.approx(8_192 * 1_000 / 1_001)
    assert timing.Lengths(8_192, 0.5, 0.3).longest(160) == pytest.approx(8_192)  # 30% at the cap
    assert timing.Lengths(100, 0.5, 0.0).mean_square_sequence(0) == pytest.approx(50 ** 2 + 100 ** 2 / 12)
    # a decoded token's mean context: (P m + E[r^2] / 2) / m; uniform on [0, 100]: (10 x 50 + 10,000 / 6) / 50
    assert timing.Lengths(100, 0.5, 0.0).decode_context(10) == pytest.approx((10 * 50 + 100 ** 2 / 3 / 2) / 50)
    assert timing.Lengths(100, 0.5, 0.5).decode_context(10) == pytest.approx(10 + 100 / 2)  # all at 100 or 0
    with pytest.raises(ValueError, match="needs a mean of at least"):
        timing.Lengths(100, 0.2, 0.3)
    shape = PUBLISHED["Qwen/Qwen3-0.6B"]
    hw = timing.Hardware(bandwidth_bytes_per_s=1e12, bf16_flops=1e15, trainer_gpus=1, rollout_gpus=1,
                         tensor_parallel=1, shared_gpu=False, weights_bytes_per_rank=1e9, kv_bytes_per_token=1e5,
                         kv_capacity_tokens=10**9, max_num_seqs=1_000,
                         intra_node_link=timing.Link("nvlink", 300e9, 3e-6))
    ta = timing.TimeAssumptions(0.25, 0.5, 0.3, 0.5, 0.6, 1e10, 1e9, 2e10, 5e8, 0.0, 0.5, 0.0)
    mean_only = timing.generation(shape, 100, 100, 1_000, hw, ta)
    tail = timing.generation(shape, 100, 100, 1_000, hw, ta, longest=2_000)
    assert mean_only["decode_iterations"] == 1_000 and tail["decode_iterations"] == 2_000
    assert tail["decode_seconds"] > mean_only["decode_seconds"]


def test_train_mfu_is_in_verls_flop_convention():
    flops_counter = pytest.importorskip("verl.utils.flops_counter")
    from transformers import Qwen3Config

    shape = PUBLISHED["Qwen/Qwen3-4B"]
    seqlens = [1_000, 3_000, 9_216]
    verl_tflops = flops_counter._estimate_qwen2_flops(Qwen3Config(**shape.as_dict()), sum(seqlens), seqlens, 1.0)
    ours = timing.verl_flops(shape, sum(seqlens), sum(s * s for s in seqlens))
    assert ours == pytest.approx(verl_tflops * 1e12, rel=1e-12)
    # without the recomputation: 6 N, where the hardware executes 8 N with gradient checkpointing
    assert timing.training_flops(shape, 1, 1_000, checkpointing=True) > ours * 1_000 / sum(seqlens)


def test_the_plan_shows_the_tail_the_evaluation_and_the_range():
    p = capacity.plan(composed(REFERENCE, "method=sc_tis"))
    t = p["time"]
    # separate_async decodes continuously (the next steps' requests fill the slots): no drain of the longest
    assert t["generation"]["pipelined"] and t["longest_response_tokens"] == t["mean_response_tokens"]
    assert t["generation"]["requests_per_replica"] == p["rollout"]["in_flight"]["requests_per_replica"]
    shared = capacity.plan(composed("+experiment=qwen3_0p6b_1gpu", "method=sc_tis"))["time"]
    assert not shared["generation"]["pipelined"]  # one shared GPU: a batch lasts until its longest response
    assert shared["longest_response_tokens"] > shared["mean_response_tokens"]
    assert t["eval_mean_response_tokens"] == 0.75 * 8_192  # evaluation's own length, not training's
    assert t["range"]["low_gpu_hours_per_arm"] < t["gpu_hours_per_arm"] < t["range"]["high_gpu_hours_per_arm"]
    assert t["bill"]["saves"] == 25 and t["bill"]["checkpoint_write_seconds"] == pytest.approx(
        25 * 12 * N / timing.ENGINE.checkpoint_write_bytes_per_s)
    text = capacity.markdown(p)
    assert "Range: " in text and "perf/mfu/actor" in text and "TP all-reduces over nvlink3" in text


def test_lengths_over_training_move_from_the_early_shape_to_the_configs():
    """The experiment's steps follow timing.LengthTrajectory: the first settle_steps move linearly from the early
    shape to the config's (evaluated at RAMP_POINTS midpoints), the rest at the config's."""
    cfg = composed(REFERENCE, "method=pg")
    i = capacity.inputs_of(cfg)
    r = capacity.rollout_side(i)
    hw = estimate_hardware(i, r)
    fixed = timing.step_and_experiment(i.shape, i.workload, hw, i.time, trajectory=None)
    moving = timing.step_and_experiment(i.shape, i.workload, hw, i.time)
    assert fixed["train_steps_seconds"] == pytest.approx(500 * fixed["step_seconds"])
    assert moving["step_seconds"] == fixed["step_seconds"]  # a step at the config's lengths either way
    early = timing.TRAJECTORY
    ramp = 0.0
    for k in range(timing.RAMP_POINTS):
        w = (k + 0.5) / timing.RAMP_POINTS
        t = dataclasses.replace(i.time, mean_response_fraction=0.7 + (0.5 - 0.7) * w,
                                response_at_cap_fraction=0.46 + (0.1 - 0.46) * w)
        ramp += early.settle_steps / timing.RAMP_POINTS * timing.step_and_experiment(
            i.shape, i.workload, hw, t, trajectory=None)["step_seconds"]
    assert moving["train_steps_seconds"] == pytest.approx(ramp + (500 - early.settle_steps) * fixed["step_seconds"])
    assert moving["early_step_seconds"] > moving["step_seconds"]  # 46% at the cap early: longer steps
    assert moving["gpu_hours_per_arm"] > fixed["gpu_hours_per_arm"]


def estimate_hardware(i, rollout) -> timing.Hardware:
    from runners.capacity.estimate import _hardware

    return _hardware(i, rollout["per_gpu_bytes"]["weights"], rollout["kv_bytes_per_token"], rollout["kv_capacity_tokens"])


# -- 4-5. disk and requests in flight ---------------------------------------------------------------------
def test_disk_of_the_reference_warns_and_names_the_fix():
    p = capacity.plan(composed(REFERENCE, "method=sc_tis"))
    d = p["disk"]
    assert d["checkpoint_bytes"] == 12 * N and d["saves"] == 25 and d["kept"] == 25  # save_freq 20, 500 steps
    assert d["export_bytes"] == 2 * N and d["per_sweep_bytes"] == 4 * d["per_arm_bytes"]
    assert d["over_budget"] and d["fix"]["key"] == "backend.actor.max_ckpt_to_keep"
    kept = capacity.plan(composed(REFERENCE, "method=sc_tis", f"backend.actor.max_ckpt_to_keep={d['fix']['value']}"))
    assert not kept["disk"]["over_budget"] and kept["disk"]["kept"] == d["fix"]["value"]
    assert disk.saves(500, 20) == 25 and disk.saves(510, 20) == 26 and disk.saves(10, 0) == 0


def test_requests_in_flight_against_the_kv_cache():
    p = capacity.plan(composed(REFERENCE, "method=sc_tis"))
    f = p["rollout"]["in_flight"]
    assert f["requests_per_replica"] == 256 and f["full_length_sequences_held"] == 90 and f["preempts"]
    assert f["fix"] == {"key": "backend.rollout_engine.max_num_seqs", "value": 90}
    assert "vLLM would preempt" in capacity.markdown(p)
    fixed = capacity.plan(composed(REFERENCE, "method=sc_tis", "backend.rollout_engine.max_num_seqs=90"))
    assert not fixed["rollout"]["in_flight"]["preempts"]


# -- issue 35 item 5: model configs named for what they are --------------------------------------------
@pytest.mark.parametrize(("content", "wanted"), [
    (None, "config.json is missing"),
    ("", "is empty"),
    ('{"vocab_size": 151936, "hidden_', "is not valid JSON (truncated or malformed"),
    ("[1, 2]", "holds a JSON list, not an object"),
    (json.dumps({**QWEN3_14B, "hidden_size": "5120"}), "hidden_size='5120'"),
    (json.dumps({**QWEN3_14B, "num_hidden_layers": 0}), "num_hidden_layers=0"),
    (json.dumps({k: v for k, v in QWEN3_14B.items() if k != "vocab_size"}), "lacks vocab_size"),
])
def test_a_model_config_that_cannot_serve_is_named(tmp_path, capsys, content, wanted):
    if content is not None:
        (tmp_path / "config.json").write_text(content)
    with pytest.raises(ModelConfigError, match=wanted.replace("(", r"\(").replace("[", r"\[")):
        shape_of(str(tmp_path))
    status, _, err = run_cli(capsys, REFERENCE, "method=pg", f"model.path={tmp_path}")
    assert status == 2 and err.startswith("config error: ") and wanted in err and err.count("\n") == 1
    assert ModelShape.from_config(QWEN3_14B).num_hidden_layers == 40


# -- 6. calibration from a run's first steps -------------------------------------------------------------
def write_run(run: Path, cfg, lines: list[dict]) -> Path:
    (run / "verl" / "attempt-001").mkdir(parents=True)
    (run / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    (run / "verl" / "attempt-001" / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return run


def test_from_run_replans_the_experiment_from_a_synthetic_record(tmp_path, capsys):
    cfg = composed(REFERENCE, "method=pg", f"results_root={tmp_path}")
    lines = [{"step": 0, "data": {"val-aux/aime2024/response_length/mean@8": 8_000.0,
                                  "val-aux/aime2025/response_length/mean@8": 7_000.0}}]
    for step in range(1, 13):
        lines.append({"step": step, "data": {
            "timing_s/step": 100.0 + step, "timing_s/gen": 80.0, "timing_s/update_actor": 40.0,
            "response_length/mean": 2_048.0, "response_length/max": 8_192, "response_length/clip_ratio": 0.05,
            "perf/mfu/actor": 0.2, **({"timing_s/testing": 600.0} if step == 10 else {})}})
    run = write_run(tmp_path / "pg-seed42", cfg, lines)
    c = calibrate.calibrate(run, steps=10)
    assert c["steps"] == list(range(1, 11))
    assert c["measured"]["seconds"]["step"] == pytest.approx(105.5)  # the median of 101..110
    assert c["assumptions_replaced"] == {"mean_response_fraction": 0.25, "response_at_cap_fraction": 0.05,
                                         "train_mfu": 0.2, "eval_mean_response_fraction": 7_500 / 8_192}
    evaluations = 500 // 20 + 1  # before training and every test_freq steps
    bill = c["fitted"]["bill_seconds"]  # start-ups, restarts, checkpoint writes (timing.bill_seconds)
    assert c["projection"]["total_hours"] == pytest.approx((500 * 105.5 + evaluations * 600.0 + bill) / 3600)
    assert c["projection"]["gpu_hours_per_arm"] == pytest.approx(c["projection"]["total_hours"] * 8)
    assert c["first_over_measured"]["step"] == pytest.approx(c["first"]["step_seconds"] / 105.5)
    assert c["calibrated"]["step_seconds"] != c["first"]["step_seconds"]
    status, out, err = run_cli(capsys, "--from-run", str(run))
    assert status == 0 and "How far the first estimate was" in out and "backend.capacity.time.train_mfu=0.2" in out
    changed = calibrate.calibrate(run, ["trainer.total_steps=1000"], steps=10)
    assert changed["projection"]["total_hours"] > c["projection"]["total_hours"]


# -- issue 43: three synthetic records of verl 0.9.1's V1 separate_async timers -------------------------------
def synthetic_run(tmp_path: Path, *, mean: float, at_cap: float, step: float, wait: float, train: float,
                  name: str) -> Path:
    """Ten steps of the reference's PG arm as verl's file logger writes them: ``timing_s/gen`` the trainer's wait
    for the replay buffer, the trainer's own timers, the weight sync, lengths and MFU."""
    cfg = composed(REFERENCE, "method=pg", f"results_root={tmp_path}")
    lines = [{"step": s, "data": {
        "timing_s/step": step, "timing_s/gen": wait, "timing_s/old_log_prob": 0.1, "timing_s/adv": 0.1,
        "timing_s/update_actor": train - 0.2, "timing_s/update_weights": 0.8, "perf/mfu/actor": 0.225,
        "response_length/mean": mean * 8_192, "response_length/max": 8_192 if at_cap else 8_000,
        "response_length/clip_ratio": at_cap}} for s in range(1, 11)]
    return write_run(tmp_path / name, cfg, lines)


def planned(cfg, **time: float) -> dict:
    i = capacity.inputs_of(cfg)
    return capacity.evaluate(dataclasses.replace(i, time=dataclasses.replace(i.time, **time)))["time"]


def test_from_run_as_planned_changes_nothing(tmp_path, capsys):
    plan = planned(composed(REFERENCE, "method=pg"))  # trainer-bound on A100s: the rollout keeps up
    run = synthetic_run(tmp_path, mean=0.5, at_cap=0.1, step=plan["step_seconds"], wait=0.5,
                        train=plan["train_seconds"], name="as-planned")
    c = calibrate.calibrate(run)
    assert not c["measured"]["rollout_bound"] and c["fitted_decode_bandwidth_efficiency"] is None
    assert c["slower_than_planned"] is None and c["first_over_measured"]["step"] == pytest.approx(1, rel=0.02)
    assert c["recommendation"]["gpu_hours_per_arm"] == pytest.approx(c["first"]["gpu_hours_per_arm"], rel=0.05)
    status, out, _ = run_cli(capsys, "--from-run", str(run))
    assert status == 0 and "WARNING" not in out and "`timing_s/gen`: not generation" in out


def test_from_run_4_5x_slower_with_short_responses_warns_and_never_budgets_less(tmp_path, capsys):
    cfg = composed(REFERENCE, "method=pg")
    short = planned(cfg, mean_response_fraction=0.25, response_at_cap_fraction=0.0)
    step = 4.5 * short["step_seconds"]
    run = synthetic_run(tmp_path, mean=0.25, at_cap=0.0, step=step, wait=step - short["train_seconds"] - 0.8,
                        train=short["train_seconds"], name="slow-short")
    c = calibrate.calibrate(run)
    assert c["slower_than_planned"] == pytest.approx(4.5, rel=0.02) and c["measured"]["rollout_bound"]
    eff = c["fitted_decode_bandwidth_efficiency"]
    assert eff < 0.6 and c["fit_exact"]
    # the fitted plan at the measured lengths reproduces the measured rollout
    fitted = planned(cfg, mean_response_fraction=0.25, response_at_cap_fraction=0.0, decode_bandwidth_efficiency=eff)
    assert fitted["generation"]["seconds"] == pytest.approx(c["measured"]["rollout_seconds"], rel=0.01)
    # never more optimistic than the measurement, nor than the first plan at the config's (longer) lengths
    assert c["recommendation"]["gpu_hours_per_arm"] >= c["projection"]["gpu_hours_per_arm"]
    assert c["recommendation"]["gpu_hours_per_arm"] > c["first"]["gpu_hours_per_arm"]
    assert "mean_response_fraction" not in c["recommendation"]["overrides"]  # short first lengths are not copied
    status, out, _ = run_cli(capsys, "--from-run", str(run))
    assert status == 0 and out.splitlines()[2].startswith("**WARNING: the first steps took 4.5x")
    assert "backend.capacity.time.decode_bandwidth_efficiency=" in out


def test_from_run_where_generation_waits_dominate_fits_the_rollout(tmp_path, capsys):
    plan = planned(composed(REFERENCE, "method=pg"))
    step = 2 * plan["step_seconds"]
    run = synthetic_run(tmp_path, mean=0.5, at_cap=0.1, step=step, wait=0.7 * step, train=plan["train_seconds"],
                        name="waits")
    c = calibrate.calibrate(run)
    assert c["measured"]["rollout_bound"] and c["measured"]["rollout_seconds"] == pytest.approx(step)
    assert c["measured"]["seconds"]["sample_wait"] == pytest.approx(0.7 * step)
    assert c["fitted"]["rollout_seconds"] == pytest.approx(step, rel=0.01)  # lengths as assumed: the fit itself
    assert c["first_over_measured"]["rollout"] == pytest.approx(c["first"]["rollout_seconds"] / step)
    assert c["timers"]["sample_wait"] == "timing_s/gen" and c["timers"]["weight_sync"] == "timing_s/update_weights"
    status, out, _ = run_cli(capsys, "--from-run", str(run))
    assert status == 0 and "the rollout bounds the step" in out


def test_from_run_replans_onto_another_gpu_and_refuses_another_arm(tmp_path, capsys):
    plan = planned(composed(REFERENCE, "method=pg"))
    run = synthetic_run(tmp_path, mean=0.5, at_cap=0.1, step=2 * plan["step_seconds"], wait=plan["step_seconds"],
                        train=plan["train_seconds"], name="gpu")
    c = calibrate.calibrate(run, ["gpu=h100_80gb"])
    assert c["gpu"] == "h100_80gb" and c["measured_gpu"] == "a100_80gb" and c["projection"] is None
    assert c["fitted"]["step_seconds"] < calibrate.calibrate(run)["fitted"]["step_seconds"]  # a faster GPU
    status, out, _ = run_cli(capsys, "--from-run", str(run), "gpu=h100_80gb")
    assert status == 0 and "replanned onto h100_80gb" in out
    before = calibrate.calibrate(run)["fitted"]["step_seconds"]
    old = OmegaConf.load(run / "config.yaml")  # a run folder written before gpu.intra_node_link existed
    del old.gpu["intra_node_link"]
    (run / "config.yaml").write_text(OmegaConf.to_yaml(old))
    assert calibrate.calibrate(run)["fitted"]["step_seconds"] == pytest.approx(before)  # the preset's link
    for change, wanted in (("method=sc", "method is a config group"), ("gpu=nope", "gpu=nope: no such option")):
        status, out, err = run_cli(capsys, "--from-run", str(run), change)
        assert status == 2 and err.startswith("config error: ") and wanted in err and err.count("\n") == 1 and out == ""


def test_from_run_on_a_rehearsal_record(tmp_path):
    """The file-logger lines of a real rehearsal run (pg, 4 steps; tests/fixtures/capacity), with its config."""
    cfg = composed("+experiment=rehearsal", "method=pg", f"results_root={tmp_path}")
    lines = [json.loads(x) for x in (ROOT / "tests/fixtures/capacity/rehearsal_pg_metrics.jsonl").read_text().splitlines()]
    run = write_run(tmp_path / "pg-seed42", cfg, lines)
    c = calibrate.calibrate(run)
    assert c["steps"] == [1, 2, 3, 4] and c["rehearsal"]
    assert c["measured"]["seconds"]["step"] > 0 and c["measured"]["seconds"]["evaluation"] > 0
    assert set(c["assumptions_replaced"]) == {"mean_response_fraction", "response_at_cap_fraction", "train_mfu",
                                              "eval_mean_response_fraction"}
    assert "CPU rehearsal" in calibrate.markdown(c)
    ratios = calibrate.markdown(c).split("How far the first estimate was (estimate / measured): ")[1].split(".\n")[0]
    assert "0.00x" not in ratios and all(float(r.split()[-1].rstrip("x")) > 0 for r in ratios.split(", "))


@pytest.mark.parametrize("damage", ["no-config", "no-steps", "bad-change"])
def test_from_run_refuses_what_it_cannot_read_in_one_line(tmp_path, capsys, damage):
    run = tmp_path / "run"
    if damage != "no-config":
        write_run(run, composed(REFERENCE, "method=pg"), [{"step": 0, "data": {"val-core/x/acc/mean@8": 0.1}}]
                  if damage == "no-steps" else [{"step": 1, "data": {"timing_s/step": 1.0}}])
    extra = ["nosuch.key=3"] if damage == "bad-change" else []
    status, out, err = run_cli(capsys, "--from-run", str(run), *extra)
    assert status == 2 and err.startswith("config error: ") and err.count("\n") == 1 and out == ""
