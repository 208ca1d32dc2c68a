"""Ingestion of synthetic verl outputs: two attempts with a resume in the middle, a run still going,
torn lines, gaps and dumps the reward did not enrich. No verl import: the inputs are files.

The synthetic run (cap 16 tokens, n=2 samples, two sets of two problems, eval every 4 steps):

    attempt-001: val@0, train 1..6 (val@4 on the step-4 line), then a torn line; checkpoint at 4
    attempt-002: val@4 (re-evaluation on resume), train 5..8 (val@8)

Attempt 1's steps 5 and 6 died with it; attempt 2's re-evaluation of step 4 wins.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from runners.run import verl_files
from runners.verl_side.backend.ingest import IngestError, ingest_run
from runners.verl_side.backend.ingest import main as ingest_main
from runners.verl_side.backend.verl_run import VerlRun

CAP = 16
PROBLEMS = {"aime2024": ["aime2024-00", "aime2024-01"], "aime2025": ["aime2025-00", "aime2025-01"]}


#: The backend keys a verl run is resolved from (runners.verl_side.backend.verl_run.VerlRun.of), besides the platform.
RESOLVED_BACKEND = {"placement": {"nnodes": 1, "trainer_gpus_per_node": 1, "rollout_nnodes": 1, "rollout_gpus_per_node": 1,
                                  "rollout_tensor_parallel": 1, "shared_gpu": False},
                    "rollout_engine": {"head_transport": "flat_logprobs", "log_prob_transport": "logprobs"}}


def make_cfg(total_steps: int = 8) -> dict:
    return {
        "run_name": "sc_tis-seed42",
        "seed": 42,
        "method": {"name": "sc_tis"},
        "trainer": {"total_steps": total_steps},
        "rollout": {"max_response_length": CAP},
        "eval": {"n": 2},
    }


def train_data(step: int, attempt: int, *, longest: int = 10, clip: float = 0.125) -> dict:
    """One train step's verl metrics; ``critic/score/mean`` encodes (step, attempt)."""
    return {
        "critic/score/mean": step + attempt / 10,
        "response_length/mean": 8.0,
        "response_length/max": longest,
        "response_length/clip_ratio": clip,  # verl's: share at the *batch* maximum
        "actor/entropy_loss": 0.5,
        "actor/pg_loss": -0.1,
        "actor/grad_norm": 1.5,
        "actor/ppo_kl": 0.001,
        "actor/tis_clip_fraction": 0.01,
        "actor/tis_weight_mean": 0.99,
        "actor/sc_correction": 0.02,
        "actor/sc_sampler_head_mass": 0.97,
        "actor/sc_train_head_mass": 0.96,
        "training/off_policy/trajectory_staleness/mean": 1.0,
        "timing_s/step": 10.0,
        "timing_s/gen": 2.0,
        "timing_s/update_actor": 5.0,
        "perf/throughput": 123.0,
        "training/global_step": step,
    }


def val_data(acc: float) -> dict:
    out = {}
    for ds in PROBLEMS:
        out[f"val-core/{ds}/acc/mean@2"] = acc
        out[f"val-aux/{ds}/reward/mean@2"] = 2 * acc - 1
        out[f"val-aux/{ds}/response_length/mean@2"] = 9.0
    return out


def write_log(path: Path, lines: list[tuple[int, dict]], torn: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps({"step": s, "data": d}) + "\n" for s, d in lines)
    path.write_text(text + (torn or ""))


def write_dump(
    run_dir: Path,
    step: int,
    correct: dict[str, list[int]],
    lengths: dict[str, list[int]],
    *,
    enriched: bool = True,
    drop_last: bool = False,
) -> None:
    """verl's validation dump format: uid ``<prompt uid>_<session>_<output>``, reward extra info."""
    lines = []
    for ds, pids in PROBLEMS.items():
        for j, pid in enumerate(pids):
            for session in (1, 0):  # not in session order: ingestion orders by session id
                acc = correct[pid][session]
                entry = {
                    "input": f"prompt {pid}",
                    "output": "... Answer: 1",
                    "gts": "1",
                    "score": 2.0 * acc - 1,
                    "step": step,
                    "reward": 2.0 * acc - 1,
                    "acc": float(acc),
                    "pred": "1",
                    "uid": f"uuid-{ds}-{j}_{session}_0",
                }
                if enriched:
                    entry.update(data_source=ds, problem_id=pid, response_length=lengths[pid][session])
                lines.append(json.dumps(entry))
    if drop_last:
        lines = lines[:-1]
    path = verl_files.validation_dump_dir(run_dir) / f"{step}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


ALL_RIGHT = {pid: [1, 1] for pids in PROBLEMS.values() for pid in pids}
HALF = {pid: [1, 0] for pids in PROBLEMS.values() for pid in pids}
SHORT = {pid: [5, 6] for pids in PROBLEMS.values() for pid in pids}
HIT_CAP = {pid: [CAP, 3] for pids in PROBLEMS.values() for pid in pids}


def make_run(tmp_path: Path, *, attempt2_upto: int = 8) -> Path:
    run = tmp_path / "sc_tis-seed42"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(make_cfg())))
    a1 = [(0, val_data(0.25))]
    for s in range(1, 7):
        d = train_data(s, 1)
        if s == 4:
            d.update(val_data(0.4))  # overwritten by attempt 2's re-evaluation
        a1.append((s, d))
    write_log(verl_files.AttemptPaths(run, 1).file_logger, a1, torn='{"step": 7, "data": {"critic/sc')
    a2 = [(4, val_data(0.5))]
    for s in range(5, attempt2_upto + 1):
        d = train_data(s, 2, longest=CAP if s == 6 else 10, clip=0.25 if s == 6 else 0.125)
        if s == 8:
            d.update(val_data(1.0))
        a2.append((s, d))
    write_log(verl_files.AttemptPaths(run, 2).file_logger, a2)
    ckpt = verl_files.checkpoints_dir(run)
    ckpt.mkdir(parents=True)
    (ckpt / "latest_checkpointed_iteration.txt").write_text("4")
    write_dump(run, 0, {pid: [0, 1] if pid.endswith("0") else [0, 0] for pid in ALL_RIGHT}, SHORT)
    write_dump(run, 4, HALF, HIT_CAP)
    write_dump(run, 8, ALL_RIGHT, SHORT)
    rollouts = verl_files.verl_dir(run) / "rollouts"
    rollouts.mkdir(parents=True)
    # step 5: groups u1 (all -1: zero variance) and u2 (mixed) -> 0.5
    (rollouts / "5.jsonl").write_text(
        "".join(
            json.dumps({"uid": f"{u}_{k}_0", "score": sc}) + "\n"
            for u, scores in (("u1", [-1, -1, -1]), ("u2", [1, -1, 1]))
            for k, sc in enumerate(scores)
        )
    )
    return run


def check_contract(run: Path) -> list[str]:
    from runners.run.contract_check import check_run_dir

    return check_run_dir(run)


def test_resume_merge_finished_run(tmp_path):
    run = make_run(tmp_path)
    path = ingest_run(run, OmegaConf.load(run / "config.yaml"), status="finished")
    metrics = json.loads(path.read_text())
    train, val, info = metrics["train"], metrics["val"], metrics["run"]
    assert [r["step"] for r in train] == list(range(1, 9))
    # steps 1..4 from attempt 1, 5..8 from attempt 2 (attempt 1's 5 and 6 are gone)
    assert [r["critic/score/mean"] for r in train] == pytest.approx([1.1, 2.1, 3.1, 4.1, 5.2, 6.2, 7.2, 8.2])
    assert [r["step"] for r in val] == [0, 4, 8]
    by_step = {r["step"]: r for r in val}
    # the re-evaluation at step 4 (attempt 2) wins; the contract's mean@2 comes from the dump
    assert by_step[4]["val-aux/aime2024/reward/mean@2"] == pytest.approx(0.0)
    assert by_step[4]["val-core/aime2024/acc/mean@2"] == pytest.approx(0.5)
    assert by_step[4]["val-aux/aime2025/truncation_ratio"] == pytest.approx(
        0.5
    )  # one of 2 samples at the cap
    assert by_step[4]["val-aux/aime2025/response_length/mean"] == pytest.approx((CAP + 3) / 2)
    assert by_step[0]["val-core/aime2025/acc/mean@2"] == pytest.approx(0.25)  # logged 0.25, dump agrees
    assert by_step[8]["val-aux/aime2024/truncation_ratio"] == 0.0

    # name mapping
    r5, r6 = train[4], train[5]
    assert r6["response/truncation_ratio"] == 0.25  # max reached the cap: verl's clip ratio is the share
    assert r5["response/truncation_ratio"] == 0.0  # max below the cap: verl's 0.125 is batch-relative
    assert r5["actor/entropy"] == 0.5 and r5["training/off_policy/evicted_samples"] == 0
    assert r5["batch/zero_variance_group_ratio"] == 0.5 and r6["batch/zero_variance_group_ratio"] is None
    assert r5["perf/throughput"] == 123.0  # other verl metrics keep their names
    assert not any(k.startswith("val-") for r in train for k in r)

    assert info["status"] == "finished" and info["last_step"] == 8 and info["backend"] == "verl"
    assert (info["name"], info["method"], info["seed"], info["total_steps"]) == (
        "sc_tis-seed42",
        "sc_tis",
        42,
        8,
    )
    a1, a2 = info["attempts"]
    assert (a1["start_step"], a1["end_step"], a1["status"]) == (0, 6, "killed") and a1["ended"]
    assert (a2["start_step"], a2["end_step"], a2["status"]) == (4, 8, "finished") and a2["ended"]
    assert set(info["versions"]) >= {"project", "verl", "torch", "rollout"}
    assert info["versions"]["rollout"].startswith("vllm")  # no platform: vLLM on GPUs

    lines = [json.loads(x) for x in (run / "val" / "step_000004.jsonl").read_text().splitlines()]
    assert len(lines) == 8 and set(lines[0]) == {
        "data_source",
        "problem_id",
        "sample",
        "score",
        "acc",
        "response_length",
        "truncated",
    }
    first = [x for x in lines if x["problem_id"] == "aime2024-00"]
    assert [(x["sample"], x["acc"], x["response_length"], x["truncated"]) for x in first] == [
        (0, 1, CAP, True),
        (1, 0, 3, False),
    ]
    assert check_contract(run) == []

    # idempotent: a second pass gives the same record
    before = path.read_text()
    ingest_run(run, make_cfg(), status="finished")
    assert json.loads(path.read_text())["train"] == json.loads(before)["train"]


def test_partial_run_is_running_and_skips_an_unfinished_dump(tmp_path):
    run = make_run(tmp_path, attempt2_upto=6)
    path = ingest_run(run)  # config read from run/config.yaml
    metrics = json.loads(path.read_text())
    assert metrics["run"]["status"] == "running" and metrics["run"]["last_step"] == 6
    assert [r["step"] for r in metrics["val"]] == [0, 4]
    assert not (run / "val" / "step_000008.jsonl").exists()
    last = metrics["run"]["attempts"][-1]
    assert last["ended"] is None and last["end_step"] is None and last["start_step"] == 4
    assert check_contract(run) == []

    # a third attempt has started but logged nothing: it resumes from the checkpoint marker
    verl_files.AttemptPaths(run, 3).attempt_dir.mkdir(parents=True)
    metrics = json.loads(ingest_run(run).read_text())
    a1, a2, a3 = metrics["run"]["attempts"]
    assert (a2["status"], a2["end_step"], a2["ended"] is not None) == ("killed", 6, True)
    assert (a3["status"], a3["start_step"], a3["ended"]) == ("running", 4, None)
    assert metrics["run"]["last_step"] == 6 and check_contract(run) == []

    # verl logged step 8 but its dump is still being written: the evaluation waits, the train row does not
    run2 = make_run(tmp_path / "b")
    write_dump(run2, 8, ALL_RIGHT, SHORT, drop_last=True)
    metrics = json.loads(ingest_run(run2).read_text())
    assert metrics["run"]["last_step"] == 8 and [r["step"] for r in metrics["val"]] == [0, 4]
    assert metrics["run"]["status"] == "finished"  # all steps logged, no explicit status
    with pytest.raises(IngestError, match=r"8.jsonl: problems without exactly 2 samples"):
        ingest_run(run2, status="finished")


def test_gap_between_attempts_is_an_error(tmp_path):
    run = make_run(tmp_path)
    a2 = [(s, train_data(s, 2)) for s in range(8, 9)]  # resumes at 7, attempt 1 stopped at 6
    write_log(verl_files.AttemptPaths(run, 2).file_logger, a2)
    with pytest.raises(
        IngestError, match=r"train steps \[7\] \(1\) are in no attempt's log.*attempt 1.*1\.\.6"
    ):
        ingest_run(run, status="running")
    assert ingest_main([str(run)]) == 2


def test_torn_line_in_the_middle_and_missing_enrichment(tmp_path):
    run = make_run(tmp_path)
    path = verl_files.AttemptPaths(run, 1).file_logger
    lines = path.read_text().splitlines()
    lines.insert(2, '{"step": 2, "da')
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(IngestError, match=r"metrics.jsonl:3: not a file-logger line"):
        ingest_run(run, status="running")

    run = make_run(tmp_path / "b")
    write_dump(run, 0, ALL_RIGHT, SHORT, enriched=False)
    with pytest.raises(IngestError, match=r"0.jsonl:1: dump line lacks .*LengthAwareRewardManager"):
        ingest_run(run, status="running")


def test_train_response_longer_than_cap_is_an_error(tmp_path):
    run = make_run(tmp_path)
    cfg = make_cfg()
    cfg["rollout"]["max_response_length"] = CAP - 1  # the project's cap and verl's disagree
    with pytest.raises(IngestError, match="response_length/max 16 exceeds the configured cap 15"):
        ingest_run(run, cfg, status="running")


def test_cli_prints_status(tmp_path, capsys):
    run = make_run(tmp_path)
    assert ingest_main([str(run), "--status", "finished"]) == 0
    assert "finished, step 8/8, 2 attempt(s)" in capsys.readouterr().out


def test_the_record_says_what_verls_seed_fixes(tmp_path):
    """run.seed_fixes: verl's seed fixes the prompt order (a valid seed pair) but not vLLM's sampling."""
    from runners.run.run_contract import PAIRING_STREAM, seed_pairing
    from runners.verl_side.backend.ingest import SEED_FIXES

    run = make_run(tmp_path)
    fixes = json.loads(ingest_run(run, OmegaConf.load(run / "config.yaml")).read_text())["run"]["seed_fixes"]
    assert fixes == SEED_FIXES and check_contract(run) == []
    assert PAIRING_STREAM in fixes["streams"] and fixes["reproducible"] is False
    assert {"sampler", "evaluation"} <= set(fixes["not_fixed"]) and "sampler" not in fixes["streams"]
    assert seed_pairing(fixes, fixes) is None


def test_a_rehearsals_record_says_the_cpu_rollout_samples(tmp_path):
    """run.seed_fixes of a rehearsal (backend.platform=cpu) names what samples there: the CPU rollout's
    per-replica torch.Generator, not vLLM; the streams (and so seed pairing) are those of a GPU run."""
    from runners.run.run_contract import seed_pairing
    from runners.verl_side.backend.ingest import REHEARSAL_SEED_FIXES, SEED_FIXES

    run = make_run(tmp_path)
    cfg = OmegaConf.merge(OmegaConf.load(run / "config.yaml"), {"backend": {"platform": "cpu"}})
    fixes = json.loads(ingest_run(run, cfg).read_text())["run"]["seed_fixes"]
    assert fixes == REHEARSAL_SEED_FIXES and check_contract(run) == []
    assert fixes["streams"] == SEED_FIXES["streams"] and seed_pairing(fixes, fixes) is None
    texts = [*fixes["how"].values(), *fixes["not_fixed"].values()]
    assert not [t for t in texts if "vLLM" in t and "standing in for vLLM" not in t]
    assert fixes["how"]["rollout_engine"] == ("actor_rollout_ref.rollout.seed: the torch.Generator of each CPU "
                                             "rollout replica (runners/verl_side/platform/rehearsal/rollout.py), seeded with seed + "
                                             "replica rank")
    assert fixes["not_fixed"]["sampler"].startswith("the CPU rollout (an HF model on the CPU standing in for vLLM)")
    assert fixes["reproducible"] is False


def test_a_run_stopped_by_the_user_stays_stopped_until_another_attempt(tmp_path):
    """Ctrl-C closes verl's attempt as ``stopped`` (runners.verl_side.backend.launch); a later pass over the same
    logs keeps it, and a new attempt (the same command again) runs it on."""
    run = make_run(tmp_path, attempt2_upto=6)
    metrics = json.loads(ingest_run(run, status="stopped").read_text())
    assert metrics["run"]["status"] == "stopped" and metrics["run"]["attempts"][-1]["status"] == "stopped"
    assert check_contract(run) == []
    assert json.loads(ingest_run(run).read_text())["run"]["status"] == "stopped"
    verl_files.AttemptPaths(run, 3).attempt_dir.mkdir(parents=True)
    metrics = json.loads(ingest_run(run).read_text())
    assert metrics["run"]["status"] == "running"
    assert [a["status"] for a in metrics["run"]["attempts"]] == ["killed", "stopped", "running"]


def test_ctrl_c_during_verl_records_the_attempt_as_stopped(tmp_path, monkeypatch):
    """The launcher's interrupt path: Ctrl-C stops verl's group and ingests with status ``stopped``; any other
    interruption leaves the attempt open (as a kill does)."""
    from runners.verl_side.backend import launch as verl_launch

    calls: list[tuple[bool, str | None]] = []

    class Proc:
        pid, returncode, stdout = 0, None, None

        def __init__(self, raised: type[BaseException]):
            self.raised = raised

        def poll(self):
            raise self.raised()

    class Nothing:
        def __init__(self, *a, **k): pass
        def start(self): pass
        def join(self, timeout=None): pass
        def close(self): pass

    class Spec:
        argv, cwd, env = ["true"], str(tmp_path), {}

        class paths:
            attempt, attempt_dir = 1, tmp_path / "attempt-1"
            launch_script, log_file = tmp_path / "launch.sh", tmp_path / "verl.log"
            cpu_state = tmp_path / "attempt-1" / "cpu"

        @staticmethod
        def script(title: str) -> str:
            return "#!/bin/sh\n"

    monkeypatch.setattr(verl_launch, "build_spec", lambda cfg, run_dir: Spec)
    monkeypatch.setattr(verl_launch.resume_point, "align", lambda run_dir, attempt: None)
    monkeypatch.setattr(verl_launch, "show_capacity", lambda cfg, attempt_dir: None)
    monkeypatch.setattr(verl_launch, "GroupReaper", Nothing)
    monkeypatch.setattr(verl_launch, "OutputFollower", Nothing)
    monkeypatch.setattr(verl_launch, "stop_group", lambda proc: None)
    monkeypatch.setattr(verl_launch, "_ingest", lambda run_dir, cfg, *, final, status=None: calls.append((final, status)))
    cfg = OmegaConf.create({"method": {"name": "pg", "score_centering": False}, "trainer": {"total_steps": 4},
                            "run_name": "pg-seed1", "backend": {"ingest_interval_s": 60, **RESOLVED_BACKEND}})
    for raised, status in ((KeyboardInterrupt, "stopped"), (SystemExit, None)):
        calls.clear()
        monkeypatch.setattr(verl_launch.subprocess, "Popen", lambda *a, _r=raised, **k: Proc(_r))
        with pytest.raises(raised):
            verl_launch._attempt(VerlRun.of(cfg), tmp_path, lock_fd=0)
        assert calls == [(False, status)]


@pytest.mark.parametrize(("backend", "engine"), [
    ({"platform": "cpu"}, "standin (runners/verl_side/platform/rehearsal/rollout.py"),
    ({"platform": "cpu", "rehearsal_rollout": "standin"}, "standin (runners/verl_side/platform/rehearsal/rollout.py"),
    ({"platform": "cpu", "rehearsal_rollout": "vllm"}, "vllm"),
    ({}, "vllm"),
])
def test_the_record_names_the_rollout_engine_and_its_seed_fixes(backend, engine):
    from runners.verl_side.backend.ingest import (
        REHEARSAL_SEED_FIXES,
        SEED_FIXES,
        rollout_engine,
        seed_fixes_of,
    )

    cfg = OmegaConf.create({**make_cfg(), "backend": backend})
    assert rollout_engine(cfg).startswith(engine)
    assert seed_fixes_of(cfg) == (REHEARSAL_SEED_FIXES if engine.startswith("standin") else SEED_FIXES)


def test_vllms_socket_folder_is_removed_after_an_attempt(tmp_path, monkeypatch):
    """vLLM's CPU engine leaves its IPC socket files in a folder under the temporary folder; the launcher
    removes it once the attempt has ended (the stand-in has none)."""
    from runners.verl_side.platform import platform_for
    from runners.verl_side.platform.rehearsal import swaps as rehearsal

    monkeypatch.setattr(rehearsal.tempfile, "gettempdir", lambda: str(tmp_path))
    state = tmp_path / "run" / "verl" / "attempt-1" / "cpu"
    folder = rehearsal.vllm_rpc_folder(state)
    for rollout, kept in (("standin", True), ("vllm", False)):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "socket-left-by-vllm").write_text("")
        cfg = OmegaConf.create({"backend": {"platform": "cpu", "rehearsal_rollout": rollout}})
        platform_for(cfg).tidy_after_attempt(state)
        assert folder.exists() is kept


def test_the_same_command_starts_no_verl_attempt_for_a_finished_run(tmp_path, monkeypatch):
    """docs/resuming.md: finished arms are left alone; an unfinished, stopped or extended run starts verl."""
    import runners.verl_side.backend as verl_backend
    from runners.verl_side.backend import launch as verl_launch

    run = make_run(tmp_path)
    ingest_run(run, status="finished")  # steps 1..8 of 8
    started: list[Path] = []
    monkeypatch.setattr(verl_launch, "launch", lambda run, run_dir, plan: started.append(run_dir))
    monkeypatch.setattr(verl_backend, "_launch_plan", lambda run: None)  # the plan needs a whole config

    def cfg(total: int):
        return OmegaConf.create({**make_cfg(total), "backend": {"dry_run": False, "platform": "gpu", **RESOLVED_BACKEND}})

    verl_backend.run(cfg(8), run)
    assert started == []
    verl_backend.run(cfg(10), run)  # extended
    assert started == [run]
    ingest_run(run, status="stopped")
    verl_backend.run(cfg(8), run)
    assert started == [run, run]
