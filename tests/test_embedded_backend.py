"""The embedded default end to end: config errors, the four-arm multirun, resume, determinism, sampler fidelity."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from runners import validate as runners_validate
from runners.config import config_checks
from runners.embedded.backend import SEED_FIXES, EmbeddedRun
from runners.embedded.replay_buffer import Group, ReplayBuffer
from runners.embedded.sampler import Sampler
from runners.embedded.trainer import response_logits
from runners.run.contract_check import check_run_dir
from runners.run.provenance import config_sha256

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = [sys.executable, str(ROOT / "runners" / "launch.py")]
ARMS = ("pg", "tis", "sc", "sc_tis")


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("warmstart_cache")


def small(results: Path, cache: Path, steps: int = 4) -> list[str]:
    """Overrides for a seconds-long run: small batches, a short warm start, frequent eval/checkpoints."""
    return [
        f"results_root={results}", f"backend.cache_dir={cache}", f"trainer.total_steps={steps}",
        "trainer.prompts_per_step=8", "trainer.n=4", "backend.micro_batch_size=16", "trainer.test_freq=2",
        "trainer.save_freq=2", "eval.n=2", "model.warmstart.steps=30", "backend.sampler.run_ahead_batches=2",
        "backend.threads=1",  # conftest.py: one thread a process beside the other worker
    ]


def composed(overrides: list[str]):
    with initialize_config_dir(config_dir=str(config_checks.CONF_DIR), version_base=None):
        return compose(config_name="config", overrides=overrides)


def validate(overrides: list[str]) -> None:
    cfg = composed(overrides)
    runners_validate.validate(cfg, OmegaConf.to_yaml(cfg, resolve=True))


# -- validation -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["method=sc", "rollout.top_p=0.9"], r"rollout\.top_p=0\.9.*allowed: rollout\.top_p=1\.0"),
        (["method=sc_tis", "rollout.top_k=20"], r"rollout\.top_k=20"),
        (["method.top_k=0"], r"method\.top_k=0: must be an integer >= 1"),
        (["rollout.max_staleness=0"], r"rollout\.max_staleness=0: must be an integer >= 1"),
        (["backend.micro_batch_size=7"], r"backend\.micro_batch_size=7 must divide .* = 160"),
        (["method.name=foo"], r"method\.name='foo' is unknown; allowed: pg, tis, sc, sc_tis, icepop"),
        (["method.loss_mode=nope"], r"method\.loss_mode='nope' is not arm pg's loss; allowed: method\.loss_mode=ablation_pg"),
        (["method=tis", "method.tis_cap=null"], r"method\.tis_cap is null"),
        (["trainer.n=1"], r"trainer\.n=1: must be an integer >= 2"),
        (["trainer.resume=maybe"], r"trainer\.resume='maybe'; allowed: auto, disable"),
        (["backend.sampler.weight_dtype=int4"], r"backend\.sampler\.weight_dtype='int4'; allowed: float32"),
        (["rollout.max_response_length=5"], r"rollout\.max_response_length=5 is shorter"),
        (["data.digits=0"], r"data\.digits"),
    ],
)
def test_bad_configs_name_the_key(overrides, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        validate([f"results_root={tmp_path}", *overrides])


def test_run_folder_holding_another_config_is_refused(tmp_path):
    good = [f"results_root={tmp_path}"]
    validate(good)
    run_dir = tmp_path / "embedded_default" / "pg-seed42"
    run_dir.mkdir(parents=True)
    cfg = composed(good)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    record = {"schema_version": 1, "run": {}, "train": [{"step": 1}]}  # a completed step (a readable record)
    (run_dir / "metrics.json").write_text(json.dumps(record))
    validate(good)  # same config: a resume
    validate([*good, "trainer.resume=disable"])  # resume-insensitive key
    with pytest.raises(ValueError, match=r"trainer\.lr: 0\.0002 -> 0\.001.*nothing was changed"):
        validate([*good, "trainer.lr=1e-3"])


def test_cli_rejects_a_bad_sweep_before_any_compute(tmp_path):
    """The fourth job's error stops the sweep before the first job starts."""
    out = subprocess.run(
        [*LAUNCH, "-m", "method=pg,tis,sc,sc_tis", "rollout.top_p=0.5", f"results_root={tmp_path}"],
        capture_output=True, text=True, timeout=180, cwd=ROOT,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert "config error" in out.stderr and "rollout.top_p=0.5" in out.stderr
    assert not any(tmp_path.iterdir())  # nothing written
    unknown = subprocess.run([*LAUNCH, "-m", "method=pg,bogus", f"results_root={tmp_path}"],
                             capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert unknown.returncode != 0
    assert "bogus" in unknown.stderr and "Available options in 'method'" in unknown.stderr
    assert not any(tmp_path.iterdir())


# -- replay buffer ----------------------------------------------------------------------------
def _group(version: int) -> Group:
    return Group(problem=None, version=version, rollout=None, scores=[1.0, -1.0], accs=[1, 0])


def test_replay_buffer_is_fifo_and_evicts_by_staleness():
    buffer = ReplayBuffer(max_staleness=2)
    buffer.push([_group(v) for v in (0, 0, 1, 2, 3)])
    dropped = buffer.evict_stale(trainer_version=3)
    assert [g.version for g in dropped] == [0, 0]
    assert [g.version for g in buffer.pop(2)] == [1, 2]
    assert len(buffer) == 1
    with pytest.raises(ValueError, match="holds 1 groups, 2 requested"):
        buffer.pop(2)
    with pytest.raises(ValueError, match="max_staleness must be >= 1"):
        ReplayBuffer(0)


def test_checkpoints_keep_the_newest_and_a_resume_loads_the_newest(tmp_path):
    from runners.embedded.checkpoint import checkpoint_dir, list_checkpoints, load_latest, save_checkpoint

    assert load_latest(tmp_path) is None
    for step in (3, 6, 9, 12):
        save_checkpoint(tmp_path, step, {"step": step, "w": torch.full((2,), float(step))}, keep=2)
    assert [step for step, _ in list_checkpoints(tmp_path)] == [9, 12]
    (checkpoint_dir(tmp_path) / ".step_000015.pt.k3x9.tmp").write_bytes(b"")  # a save killed midway
    step, state = load_latest(tmp_path)
    assert step == 12 and state["step"] == 12 and torch.equal(state["w"], torch.full((2,), 12.0))


# -- sampler fidelity -------------------------------------------------------------------------
def test_sampler_log_probs_and_head_match_a_trainer_recomputation():
    from runners.tiny.model import build_model
    from runners.tiny.tokenizer import build_tokenizer

    cfg = composed(["backend.sampler.weight_dtype=float32"])
    tok = build_tokenizer()
    torch.manual_seed(0)
    model = build_model(cfg.model, tok).eval()
    sampler = Sampler(model, tok, cfg.backend.sampler, top_k=8)
    sampler.sync(model, 0, torch.Generator().manual_seed(0))
    prompts = [tok("<|im_start|>user\n12+34=?<|im_end|>\n<|im_start|>assistant\n")["input_ids"],
               tok("<|im_start|>user\n7+5=?<|im_end|>\n<|im_start|>assistant\n")["input_ids"]]  # unequal lengths
    rollout = sampler.generate(prompts, n=3, max_new_tokens=10, temperature=1.0,
                               generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        log_p = torch.log_softmax(response_logits(model, rollout, tok.pad_token_id, 1.0), -1)
    mask = rollout.response_mask.bool()
    recomputed = log_p.gather(-1, rollout.response_ids[..., None]).squeeze(-1)
    torch.testing.assert_close(recomputed[mask], rollout.log_probs[mask], atol=1e-5, rtol=0)
    head = log_p.gather(-1, rollout.head_ids)
    torch.testing.assert_close(head[mask], rollout.head_log_probs[mask], atol=1e-5, rtol=0)
    assert torch.equal(log_p.topk(8, -1).indices[mask].sort(-1).values, rollout.head_ids[mask].sort(-1).values)
    assert torch.isinf(rollout.head_log_probs[~mask]).all()


# -- end to end -------------------------------------------------------------------------------
def read_train(run_dir: Path) -> list[dict]:
    rows = json.loads((run_dir / "metrics.json").read_text())["train"]
    return [{k: v for k, v in r.items() if not k.startswith("timing_s/")} for r in rows]


def test_four_arm_multirun_writes_valid_run_directories(tmp_path, cache_dir):
    out = subprocess.run([*LAUNCH, "-m", "method=pg,tis,sc,sc_tis", "seed=3", *small(tmp_path, cache_dir)],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    sweep = tmp_path / "embedded_default"
    for arm in ARMS:
        run_dir = sweep / f"{arm}-seed3"
        assert check_run_dir(run_dir) == [], arm
        record = json.loads((run_dir / "metrics.json").read_text())
        assert record["run"]["status"] == "finished" and record["run"]["method"] == arm
        assert [r["step"] for r in record["train"]] == [1, 2, 3, 4]
        assert [r["step"] for r in record["val"]] == [0, 2, 4]
        assert (run_dir / "run.log").read_text().count("finished") >= 1
        assert OmegaConf.load(run_dir / "config.yaml").method.name == arm
        staleness = [r["training/off_policy/trajectory_staleness/mean"] for r in record["train"]]
        assert max(staleness) > 0  # the sampler really runs ahead
    sc = json.loads((sweep / "sc-seed3" / "metrics.json").read_text())["train"][-1]
    assert 0 < sc["actor/sc_sampler_head_mass"] <= 1 and "actor/sc_correction" in sc


def test_same_seed_gives_identical_train_metrics(tmp_path, cache_dir):
    rows = []
    for sweep in ("a", "b"):
        cfg = composed([*small(tmp_path, cache_dir, steps=3), "method=sc_tis", f"sweep={sweep}"])
        run_dir = runners_validate.run_dir_of(cfg)
        run_dir.mkdir(parents=True)
        EmbeddedRun(cfg, run_dir, config_sha256("x")).run()
        rows.append(read_train(run_dir))
        seed_fixes = json.loads((run_dir / "metrics.json").read_text())["run"]["seed_fixes"]
        assert seed_fixes == SEED_FIXES  # what the seed fixes, recorded (checked: tests/test_contract.py)
    assert rows[0] == rows[1]
    other = composed([*small(tmp_path, cache_dir, steps=3), "method=sc_tis", "sweep=c", "seed=7"])
    run_dir = runners_validate.run_dir_of(other)
    run_dir.mkdir(parents=True)
    EmbeddedRun(other, run_dir, config_sha256("x")).run()
    assert read_train(run_dir) != rows[0]


def test_sigkill_and_resume_continues_exactly(tmp_path, cache_dir):
    steps = 10
    args = [*LAUNCH, "method=sc", *small(tmp_path, cache_dir, steps=steps), "trainer.save_freq=3"]
    run_dir = tmp_path / "embedded_default" / "sc-seed42"
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            if json.loads((run_dir / "metrics.json").read_text())["run"]["last_step"] >= 5:
                break
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            pass
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = json.loads((run_dir / "metrics.json").read_text())["run"]["last_step"]
    assert 5 <= killed_at < steps

    resumed = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert check_run_dir(run_dir) == []
    record = json.loads((run_dir / "metrics.json").read_text())
    assert [r["step"] for r in record["train"]] == list(range(1, steps + 1))
    attempts = record["run"]["attempts"]
    assert [a["status"] for a in attempts] == ["killed", "finished"]
    assert attempts[1]["start_step"] in (3, 6, 9) and attempts[1]["start_step"] <= killed_at

    reference = composed([*small(tmp_path, cache_dir, steps=steps), "method=sc", "trainer.save_freq=3",
                          "sweep=uninterrupted"])
    ref_dir = runners_validate.run_dir_of(reference)
    ref_dir.mkdir(parents=True)
    EmbeddedRun(reference, ref_dir, config_sha256("x")).run()
    assert read_train(run_dir) == read_train(ref_dir)
    ref_val = json.loads((ref_dir / "metrics.json").read_text())["val"]
    assert record["val"] == ref_val
