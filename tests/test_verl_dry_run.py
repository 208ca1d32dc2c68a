"""The verl backend up to the GPU boundary, on CPU against the installed verl (0.9.1).

* every arm of ``+experiment=qwen3_4b_sc_repro`` composes into verl's ``ppo_trainer`` and passes
  verl's validator, with the score-centering keys of newer verl checked against the table;
* the override list carries every setting of the reference table (docs/verl_reference.md), arm by
  arm (table-driven);
* ``backend.dry_run=true`` writes the command, overrides and launch script and starts nothing;
* a real launch of an SC arm on verl 0.9.1 fails at once, naming the verl commit and the install
  command; ``validate`` rejects configs that cannot work, naming the key;
* the seam: the project's logits processor reproduces ``centering_term`` on verl's packed layout,
  and ``install`` patches a verl-shaped module so that its loss calls the project's processor.

verl is imported once per test process (module level).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch
import verl  # noqa: F401 - once per process; loads the project's plug-in
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from runners.config import hydra_override as ho
from runners.run import verl_files
from runners.verl_side import backend as verl_backend
from runners.verl_side import head as verl_head
from runners.verl_side.backend import dry_run, launch, sc_seam
from runners.verl_side.backend import overrides as ovr
from runners.verl_side.backend.verl_run import VerlRun
from runners.verl_side.head import correction
from runners.verl_side.revisions import config_facts, installed, newer_keys, project_slots, releases

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
ARMS = ("pg", "tis", "sc", "sc_tis")
SC_ARMS = ("sc", "sc_tis")
EXPERIMENT = "+experiment=qwen3_4b_sc_repro"


def project_cfg(tmp_path: Path, *extra: str, method: str = "sc_tis") -> DictConfig:
    """The launcher's resolved config for one arm of the reference experiment."""
    overrides = [
        EXPERIMENT,
        f"method={method}",
        f"results_root={tmp_path / 'results'}",
        f"data.dir={tmp_path / 'data'}",
        *extra,
    ]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    OmegaConf.resolve(cfg)
    return cfg


def run_dir_of(cfg: DictConfig) -> Path:
    return Path(cfg.results_root) / cfg.sweep / cfg.run_name


def as_dict(overrides: list[str]) -> dict:
    """``key -> value`` of an override list (prefixes dropped; a key set twice is an error)."""
    out = {}
    for item in overrides:
        key, value, _ = ho.parse(item)
        assert key not in out, f"{key} is set twice"
        out[key] = value
    return out


def write_data(cfg: DictConfig) -> None:
    """Minimal parquet files with the data_source names data preparation writes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    train, evals = ovr.data_files(cfg)
    for path, source in [
        (train, "math_dapo"),
        *zip(evals, [s.name for s in cfg.data.eval_sets], strict=True),
    ]:
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist([{"data_source": source, "prompt": "x"}]), path)


# -- the reference table, row by row ----------------------------------------------------------------
def reference_settings(data_dir: Path, run_dir: Path) -> list[tuple[str, str, object]]:
    """(reference-table row, verl key, value) that every arm's overrides must carry."""
    d = data_dir.resolve()
    return [
        ("model", "actor_rollout_ref.model.path", "Qwen/Qwen3-4B"),
        ("model: thinking mode", "data.apply_chat_template_kwargs.enable_thinking", True),
        ("model: FSDP2", "actor_rollout_ref.actor.strategy", "fsdp2"),
        ("model: bf16 (FSDP compute dtype)", "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype", "bfloat16"),
        ("model: full-parameter (no LoRA)", "actor_rollout_ref.model.lora_rank", None),
        ("hardware: 1 node", "trainer.nnodes", 1),
        ("hardware: 4 GPUs train", "trainer.n_gpus_per_node", 4),
        ("hardware: 1 rollout node", "actor_rollout_ref.rollout.nnodes", 1),
        ("hardware: 4 GPUs vLLM", "actor_rollout_ref.rollout.n_gpus_per_node", 4),
        ("hardware: TP 2", "actor_rollout_ref.rollout.tensor_model_parallel_size", 2),
        ("hardware: vLLM", "actor_rollout_ref.rollout.name", "vllm"),
        ("trainer: V1", "trainer.use_v1", True),
        ("trainer: separate_async", "trainer.v1.trainer_mode", "separate_async"),
        ("trainer: standalone rollout", "actor_rollout_ref.hybrid_engine", False),
        ("trainer: weight sync", "actor_rollout_ref.rollout.checkpoint_engine.backend", "nccl"),
        ("trainer: max staleness 4", "trainer.v1.sampler.max_off_policy_threshold", 4),
        ("trainer: older groups dropped", "trainer.v1.sampler.max_off_policy_strategy", "drop"),
        ("data: train file", "data.train_files", [str(d / "dapo_math_17k/train.parquet")]),
        ("data: prompts over 1,024 tokens dropped", "data.filter_overlong_prompts", True),
        ("data: never truncated", "data.truncation", "error"),
        ("batch: 32 prompts", "data.train_batch_size", 32),
        ("batch: 5 responses", "actor_rollout_ref.rollout.n", 5),
        ("batch: one optimizer step", "actor_rollout_ref.actor.ppo_mini_batch_size", 32),
        ("batch: one optimizer step", "trainer.v1.separate_async.parameter_sync_step", 1),
        ("batch: 1 epoch", "actor_rollout_ref.actor.ppo_epochs", 1),
        ("optimizer: AdamW", "actor_rollout_ref.actor.optim.optimizer", "AdamW"),
        ("optimizer: lr 1e-6", "actor_rollout_ref.actor.optim.lr", 1e-6),
        ("optimizer: constant", "actor_rollout_ref.actor.optim.lr_scheduler_type", "constant"),
        ("optimizer: no warm-up", "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio", 0.0),
        ("optimizer: weight decay 0.01", "actor_rollout_ref.actor.optim.weight_decay", 0.01),
        ("optimizer: grad-norm clip 1.0", "actor_rollout_ref.actor.optim.clip_grad", 1.0),
        ("sampling: temperature 1", "actor_rollout_ref.rollout.temperature", 1.0),
        ("sampling: top_p 1", "actor_rollout_ref.rollout.top_p", 1.0),
        ("sampling: top_k -1", "actor_rollout_ref.rollout.top_k", -1),
        ("sampling: prompt <= 1,024", "data.max_prompt_length", 1024),
        ("sampling: response <= 8,192", "data.max_response_length", 8192),
        ("advantage: GRPO", "algorithm.adv_estimator", "grpo"),
        ("advantage: no std division", "algorithm.norm_adv_by_std_in_grpo", False),
        ("advantage: REINFORCE, bypass", "algorithm.rollout_correction.bypass_mode", True),
        ("advantage: REINFORCE, no clip", "algorithm.rollout_correction.loss_type", "reinforce"),
        (
            "advantage: bypass (actor)",
            "actor_rollout_ref.actor.policy_loss.rollout_correction.bypass_mode",
            True,
        ),
        (
            "advantage: REINFORCE (actor)",
            "actor_rollout_ref.actor.policy_loss.rollout_correction.loss_type",
            "reinforce",
        ),
        ("advantage: no KL loss", "actor_rollout_ref.actor.use_kl_loss", False),
        ("advantage: no KL reward", "algorithm.use_kl_in_reward", False),
        ("advantage: no entropy bonus", "actor_rollout_ref.actor.entropy_coeff", 0.0),
        ("loss: token-mean", "actor_rollout_ref.actor.loss_agg_mode", "token-mean"),
        ("reward: math_dapo scorer", "reward.custom_reward_function.path", "pkg://ablations.reward"),
        ("reward: math_dapo scorer", "reward.custom_reward_function.name", "compute_score"),
        ("arms: 500 steps", "trainer.total_training_steps", 500),
        ("arms: seed 42", "data.seed", 42),
        ("arms: seed 42", "actor_rollout_ref.rollout.seed", 42),
        ("arms: seed 42", "actor_rollout_ref.actor.data_loader_seed", 42),
        (
            "eval: AIME 2024 and 2025",
            "data.val_files",
            [str(d / "aime2024/test.parquet"), str(d / "aime2025/test.parquet")],
        ),
        ("eval: 8 samples", "actor_rollout_ref.rollout.val_kwargs.n", 8),
        ("eval: sampled", "actor_rollout_ref.rollout.val_kwargs.do_sample", True),
        ("eval: temperature 1", "actor_rollout_ref.rollout.val_kwargs.temperature", 1.0),
        ("eval: every 20 steps", "trainer.test_freq", 20),
        ("eval: before training", "trainer.val_before_train", True),
        ("checkpoints: every 20 steps", "trainer.save_freq", 20),
        ("checkpoints: absolute dir", "trainer.default_local_dir", str(run_dir.resolve() / "checkpoints")),
        ("resumes: auto", "trainer.resume_mode", "auto"),
        ("logs: file logger", "trainer.logger", ["console", "file"]),
    ]


PER_ARM = {
    # arm: (loss_mode, rollout_is, threshold, score centering); the threshold is written on both
    # sides for every arm (verl 8718ca30 compares the blocks key by key), verl's default without TIS
    "pg": ("ablation_pg", None, 2.0, False),
    "tis": ("ablation_tis", "token", 2.0, False),
    "sc": ("ablation_sc", None, 2.0, True),
    "sc_tis": ("ablation_sc_tis", "token", 2.0, True),
}
ACT_RC = "actor_rollout_ref.actor.policy_loss.rollout_correction"
ALG_RC = "algorithm.rollout_correction"


@pytest.mark.parametrize("arm", ARMS)
def test_overrides_carry_every_reference_setting(tmp_path, arm):
    cfg = project_cfg(tmp_path, method=arm)
    run_dir = run_dir_of(cfg)
    got = as_dict(launch.build_spec(VerlRun.of(cfg), run_dir).overrides)
    for row, key, want in reference_settings(tmp_path / "data", run_dir):
        if key == "actor_rollout_ref.model.lora_rank":  # verl's default (0) is what full-parameter means
            assert key not in got, row
            continue
        assert key in got, f"{row}: {key} not set"
        assert got[key] == want, f"{row}: {key}={got[key]!r}, want {want!r}"

    loss_mode, rollout_is, threshold, sc = PER_ARM[arm]
    assert got["actor_rollout_ref.actor.policy_loss.loss_mode"] == loss_mode
    for side in (ALG_RC, ACT_RC):
        assert got[f"{side}.rollout_is"] == rollout_is
        assert got[f"{side}.rollout_is_threshold"] == threshold
    project_transport = sc and installed.head_carrier() is installed.PROJECT_CARRIES
    if sc and not project_transport:  # verl's own transport: top-128 head from vLLM, verl's slot on at both ends
        assert got["actor_rollout_ref.rollout.topk_log_probs"] == 128
        assert got[f"{ALG_RC}.score_centering"] is True
        assert got[f"{ACT_RC}.score_centering"] is True
    else:
        assert not any(k in got for k in newer_keys.BY_KEY)
    project_keys = {"actor_rollout_ref.rollout.agent.agent_loop_manager_class": verl_head.MANAGER_CLASS,
                    f"actor_rollout_ref.rollout.custom.{verl_head.CUSTOM_KEY}": 128,
                    "actor_rollout_ref.rollout.engine_kwargs.vllm.max_logprobs": 128}
    assert {k: got.get(k) for k in project_keys} == (project_keys if project_transport else dict.fromkeys(project_keys))

    env_key = "ray_kwargs.ray_init.runtime_env.env_vars."
    assert got[env_key + "VERL_FILE_LOGGER_PATH"] == str(verl_files.AttemptPaths(run_dir, 1).file_logger)
    modules = got[env_key + "VERL_USE_EXTERNAL_MODULES"].split(",")
    sc_modules = [verl_head.PLUGIN_MODULE] if project_transport else ["runners.verl_side.backend.sc_hook"] if sc else []
    assert modules == ["ablations.registry", *sc_modules]
    assert got.get(env_key + "VERL_ENGINE_VENDOR") == (verl_head.ENGINE_VENDOR if project_transport else None)


def test_distinct_lowercase_eval_sources(tmp_path):
    cfg = project_cfg(tmp_path)
    names = [s.name for s in cfg.data.eval_sets]
    assert names == ["aime2024", "aime2025"]
    assert cfg.method.top_k == 128 and cfg.sweep == "qwen3_4b_sc_repro"


def test_every_override_round_trips_through_hydra(tmp_path):
    cfg = project_cfg(tmp_path, ho.override("data.dir", tmp_path / "a dir, with: odd=chars"))
    for item in launch.build_spec(VerlRun.of(cfg), run_dir_of(cfg)).overrides:
        key, value, prefix = ho.parse(item)
        assert ho.override(key, value, add=bool(prefix)) == item
    got = as_dict(launch.build_spec(VerlRun.of(cfg), run_dir_of(cfg)).overrides)
    assert got["data.train_files"][0].startswith(str(tmp_path / "a dir, with: odd=chars"))
    for value in [1e-6, 2.0, -1, True, None, "x,y", "it's", "a b", "[1]", "pkg://a.b", "1.5", "null"]:
        assert ho.parse(f"k={ho.format_value(value)}")[1] == value


# -- composition + verl's validator, every arm ------------------------------------------------------
@pytest.mark.parametrize("arm", ARMS)
def test_every_arm_composes_and_validates_against_installed_verl(tmp_path, arm):
    cfg = project_cfg(tmp_path, "backend.dry_run=true", method=arm)
    verl_backend.validate(cfg)
    spec = launch.build_spec(VerlRun.of(cfg), run_dir_of(cfg))
    report = dry_run.check_against_installed_verl(spec.overrides, score_centering=arm in SC_ARMS)
    assert report["status"] == "passed"
    verl_cfg = OmegaConf.create(report["verl_config"])
    assert verl_cfg.actor_rollout_ref.actor.policy_loss.loss_mode == PER_ARM[arm][0]
    rows = {r["key"]: r for r in report["newer_keys"]}
    transport = report["score_centering_transport"]
    if arm in SC_ARMS and installed.head_carrier() is installed.PROJECT_CARRIES:  # verl 0.9.1: no newer key, nothing to install
        assert transport["name"] == "project" and rows == {} and report["seam_installed"] is False
        assert report["score_centering_support"] is True and report["score_centering_missing"] == []
    elif arm in SC_ARMS:
        assert transport["name"] == "verl" and set(rows) == set(newer_keys.BY_KEY) and report["seam_installed"] is True
        assert all(r["status"] == "native" for r in rows.values())
    else:
        assert rows == {} and transport is None


@pytest.mark.parametrize("compile_", [True, False])
def test_the_engine_follows_the_torch_compile_knob(tmp_path, compile_):
    """verl's FSDP engine compiles its entropy function from fsdp_config.use_torch_compile, which does not
    follow actor.use_torch_compile: the knob must reach the engine (found by the rehearsal: it compiled
    with the knob off, 25 s per arm on a CPU)."""
    cfg = project_cfg(tmp_path, "backend.dry_run=true", f"backend.actor.use_torch_compile={compile_}", method="pg")
    report = dry_run.check_against_installed_verl(launch.build_spec(VerlRun.of(cfg), run_dir_of(cfg)).overrides)
    actor = OmegaConf.create(report["verl_config"]).actor_rollout_ref.actor
    assert (actor.use_torch_compile, actor.fsdp_config.use_torch_compile) == (compile_, compile_)


def test_dry_run_writes_command_overrides_and_script_and_starts_nothing(tmp_path, monkeypatch):
    cfg = project_cfg(tmp_path, "backend.dry_run=true", method="sc_tis")
    run_dir = run_dir_of(cfg)
    monkeypatch.setattr(launch, "launch", lambda *a, **k: pytest.fail("a dry run must not launch verl"))
    verl_backend.run(cfg, run_dir)
    out = verl_files.dry_run_dir(run_dir)
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "passed" and report["attempt"] == 1
    spec = launch.build_spec(VerlRun.of(cfg), run_dir)
    assert (out / "overrides.txt").read_text().splitlines() == spec.overrides
    assert (out / "command.txt").read_text().strip() == spec.command_line() == report["command"]
    script = (out / "launch.sh").read_text()
    assert os.access(out / "launch.sh", os.X_OK)
    assert "exec " in script and "-m verl.trainer.main_ppo" in script
    sc_module = verl_head.PLUGIN_MODULE if installed.head_carrier() is installed.PROJECT_CARRIES else "runners.verl_side.backend.sc_hook"
    assert f"export VERL_USE_EXTERNAL_MODULES=ablations.registry,{sc_module}" in script
    assert OmegaConf.load(out / "verl_config.yaml").trainer.total_training_steps == 500
    assert not verl_files.attempts(run_dir), "a dry run must not start an attempt"
    # the script's exec line splits (POSIX shell rules) into exactly the launch's argv
    exec_line = script.split("exec ", 1)[1].replace("\\\n", " ")
    assert shlex.split(exec_line) == spec.argv


def test_the_transports_settings_are_checked(tmp_path):
    """What the arm's head transport needs of verl's config, each broken once: the dry run names it."""
    cfg = project_cfg(tmp_path, "backend.dry_run=true", method="sc_tis")
    good = launch.build_spec(VerlRun.of(cfg), run_dir_of(cfg)).overrides

    def with_change(old_prefix: str, new: str) -> list[str]:
        changed = [new if ho.parse(o)[0] == old_prefix else o for o in good]
        assert changed != good
        return changed

    rollout = "actor_rollout_ref.rollout"
    if installed.head_carrier() is installed.PROJECT_CARRIES:  # built here: its keys exist on this transport only
        project_cases = {  # verl 0.9.1: the project's transport
            f"custom.{verl_head.CUSTOM_KEY} must be an integer >= 1": with_change(
                f"{rollout}.custom.{verl_head.CUSTOM_KEY}", f"++{rollout}.custom.{verl_head.CUSTOM_KEY}=0"),
            "max_logprobs=20 is below the head size 128": [
                o for o in good if ho.parse(o)[0] != f"{rollout}.engine_kwargs.vllm.max_logprobs"],
            "agent_loop_manager_class": with_change(f"{rollout}.agent.agent_loop_manager_class",
                                                    f"++{rollout}.agent.agent_loop_manager_class=verl.NoSuchManager"),
            "single-turn": [*good, f"{rollout}.agent.default_agent_loop=tool_agent"],
            "calculate_entropy": with_change("actor_rollout_ref.actor.calculate_entropy",
                                             "actor_rollout_ref.actor.calculate_entropy=False"),
            "top_p": with_change(f"{rollout}.top_p", f"{rollout}.top_p=0.9"),
            "sc_correction": with_change("actor_rollout_ref.actor.policy_loss.loss_mode",
                                         "actor_rollout_ref.actor.policy_loss.loss_mode=ablation_tis"),
            "belongs to verl as head carrier": [*good, "++algorithm.rollout_correction.score_centering=True"],
        }
        for needle, overrides in project_cases.items():
            with pytest.raises(ValueError, match=needle):
                dry_run.check_against_installed_verl(overrides, score_centering=True)
        return
    bad_cases = {
        "topk_log_probs": with_change(
            "actor_rollout_ref.rollout.topk_log_probs", "++actor_rollout_ref.rollout.topk_log_probs=0"
        ),
        "rollout_is_threshold \\(3.0\\) to match": with_change(
            f"{ACT_RC}.rollout_is_threshold", f"++{ACT_RC}.rollout_is_threshold=3.0"
        ),
        # the actor side left without the key (what the project wrote before): verl fills no default
        "rollout_is_threshold \\(None\\) to match": [
            o for o in good if ho.parse(o)[0] != f"{ACT_RC}.rollout_is_threshold"
        ],
        "both": with_change(f"{ACT_RC}.score_centering", f"++{ACT_RC}.score_centering=False"),
        "top_p": with_change("actor_rollout_ref.rollout.top_p", "actor_rollout_ref.rollout.top_p=0.9"),
        "sc_correction": with_change(
            "actor_rollout_ref.actor.policy_loss.loss_mode",
            "actor_rollout_ref.actor.policy_loss.loss_mode=ablation_tis",
        ),
    }
    for needle, overrides in bad_cases.items():
        with pytest.raises(ValueError, match=needle):
            dry_run.check_against_installed_verl(overrides, score_centering=True)


def test_dry_run_checks_the_data_sources_of_existing_files(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    cfg = project_cfg(tmp_path, "backend.dry_run=true", method="pg")
    overrides = launch.build_spec(VerlRun.of(cfg), run_dir_of(cfg)).overrides
    write_data(cfg)
    report = dry_run.check_against_installed_verl(overrides)
    assert not any("does not exist" in n for n in report["notes"])
    _, evals = ovr.data_files(cfg)
    pq.write_table(
        pa.Table.from_pylist([{"data_source": "aime2024"}]), evals[1]
    )  # the 2025 file, mislabelled
    with pytest.raises(ValueError, match="data_source of its own"):
        dry_run.check_against_installed_verl(overrides)


def test_newer_key_and_slot_tables_are_documented():
    doc = (REPO / "docs" / "verl_reference.md").read_text()
    assert newer_keys.markdown_table() in doc and project_slots.slots_table() in doc
    assert releases.REQUIRED_COMMIT in doc and releases.INSTALL_COMMAND.split(" && ")[1] in doc


# -- validate(): before any compute -----------------------------------------------------------------
@pytest.mark.parametrize(
    "change, key",
    [
        ("rollout.top_p=0.9", "rollout.top_p"),
        ("rollout.top_k=50", "rollout.top_k"),
        ("method.loss_mode=ablation_nope", "method.loss_mode"),
        ("method.top_k=0", "method.top_k"),
        ("method.tis_cap=0", "method.tis_cap"),
        ("rollout.max_staleness=0", "rollout.max_staleness"),
        ("rollout.parameter_sync_step=3", "rollout.parameter_sync_step"),
        ("eval.temperature=0", "eval.temperature"),
        ("trainer.resume=never", "trainer.resume"),
        ("backend.trainer_mode=sync", "backend.trainer_mode"),
        ("backend.placement.rollout_tensor_parallel=3", "backend.placement.rollout_tensor_parallel"),
        ("backend.rollout_engine.checkpoint_engine=naive", "backend.rollout_engine.checkpoint_engine"),
        ("backend.actor.max_token_len_per_gpu=4096", "backend.actor.max_token_len_per_gpu"),
        ("data.eval_sets.1.name=aime2024", "data.eval_sets[].name"),
        ("backend.logger=[console]", "backend.logger"),
        # flash-attn's in-place cross-entropy would overwrite the logits the correction's backward reads
        ("backend.actor.calculate_entropy=false", "backend.actor.calculate_entropy"),
    ],
)
def test_validate_names_the_key(tmp_path, change, key):
    """The launcher's validation (``runners.validate``: the keys every backend reads, then the verl
    backend's own checks) names the key."""
    from runners import validate

    cfg = project_cfg(tmp_path, "backend.dry_run=true", change, method="sc_tis")
    with pytest.raises(ValueError, match=key.replace("[", r"\[").replace("]", r"\]")):
        validate.validate(cfg, OmegaConf.to_yaml(cfg))


def test_validate_requires_data_files_for_a_real_launch(tmp_path):
    cfg = project_cfg(tmp_path, method="pg")
    with pytest.raises(ValueError, match="data.dir"):
        verl_backend.validate(cfg)
    write_data(cfg)
    verl_backend.validate(cfg)  # PG runs on verl 0.9.1


@pytest.mark.parametrize("arm", SC_ARMS)
def test_sc_launch_fails_at_once_where_the_transport_lacks_a_slot(tmp_path, arm, monkeypatch):
    """A verl without something the arm's transport relies on: the backend's validation and the launcher's
    (``runners.validate``, which runs again under the run folder's lock right before the attempt) stop before
    verl starts, naming what is missing and both ways to get a verl that carries the head."""
    from runners import validate
    cfg = project_cfg(tmp_path, method=arm)
    write_data(cfg)
    if installed.head_carrier() is installed.PROJECT_CARRIES:
        monkeypatch.setattr(installed, "PROJECT_SLOTS", tuple(
            project_slots.Slot(s.where, s.what, (lambda: False) if "FullyAsync" in s.where else s.holds) for s in installed.PROJECT_SLOTS))
        lacking = "FullyAsyncLLMServerClient.generate"
    else:
        monkeypatch.setattr(installed, "SEAM_NAMES", (*installed.SEAM_NAMES, "a_name_verl_never_had"))
        lacking = "a_name_verl_never_had"
    installed.check.cache_clear()
    try:
        for step in (verl_backend.validate, lambda c: validate.validate(c, OmegaConf.to_yaml(c, resolve=True))):
            monkeypatch.setattr(launch.subprocess, "Popen", lambda *a, **k: pytest.fail("verl was started"))
            with pytest.raises(installed.ScoreCenteringUnsupported) as err:
                step(cfg)
            assert lacking in str(err.value) and releases.PYPI.install in str(err.value)
            assert releases.INSTALL_COMMAND in str(err.value)
    finally:
        installed.check.cache_clear()
    assert not verl_files.attempts(run_dir_of(cfg))


def test_installed_verl_is_checked_once_per_launch(tmp_path, monkeypatch):
    """``installed.require`` runs in the launch's validation only (``runners.verl_side.backend.checks``), not again
    when the attempt starts: the attempt goes on to start verl without asking the installed verl again."""
    from runners import validate

    cfg = project_cfg(tmp_path, method="sc_tis")
    write_data(cfg)
    calls: list[str] = []
    monkeypatch.setattr(installed, "require", lambda what="an SC arm": calls.append(what))
    validate.validate(cfg, OmegaConf.to_yaml(cfg, resolve=True))
    assert calls == ["method=sc_tis (score centering)"]

    class VerlStarted(Exception):
        pass

    def popen(*args, **kwargs):
        raise VerlStarted

    monkeypatch.setattr(launch.subprocess, "Popen", popen)
    with pytest.raises(VerlStarted):
        verl_backend.run(cfg, run_dir_of(cfg))
    assert calls == ["method=sc_tis (score centering)"]  # the attempt did not ask again


@pytest.mark.skipif(installed.head_carrier() is installed.VERL_CARRIES, reason="the installed verl has the seam (8718ca30)")
def test_sc_hook_stops_every_verl_process_on_a_verl_without_the_seam():
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": ovr.SC_HOOK_MODULE}
    proc = subprocess.run(
        [sys.executable, "-c", "import verl"], env=env, capture_output=True, text=True, cwd=REPO
    )
    # the process dies of the hook's refusal (Python's status 1 for an uncaught exception: this is a verl
    # process, not the launcher, whose refusal is `config error`, status 2, before verl starts), not of
    # another error on the way
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{installed.ScoreCenteringUnsupported.__module__}.ScoreCenteringUnsupported: "), last
    assert releases.REQUIRED_COMMIT in last and "runners.verl_side.head" in last, last


# -- a real launch, with a stand-in for verl -------------------------------------------------------
FAKE_VERL = """\
#!{python}
import json, os, sys
path = os.environ["VERL_FILE_LOGGER_PATH"]
with open(path, "w") as f:
    for step in (1, 2, 3):
        f.write(json.dumps({{"step": step, "data": {{"critic/score/mean": 0.5}}}}) + "\\n")
        print(f"step:{{step}} - critic/score/mean:0.500", flush=True)
print("argv", json.dumps(sys.argv[1:]))
sys.exit(int(os.environ.get("FAKE_VERL_STATUS", "0")))
"""


@pytest.mark.parametrize("status", [0, 3])
def test_launch_runs_verl_with_log_progress_attempts_and_ingestion(tmp_path, monkeypatch, status):
    fake = tmp_path / "fake_python"
    fake.write_text(FAKE_VERL.format(python=sys.executable))
    fake.chmod(0o755)
    cfg = project_cfg(tmp_path, f"backend.python={fake}", "trainer.total_steps=3", method="tis")
    write_data(cfg)
    verl_backend.validate(cfg)
    calls = []
    fake_ingest = types.ModuleType("runners.verl_side.backend.ingest")
    fake_ingest.ingest_run = lambda run_dir, c, **kw: calls.append(
        (Path(run_dir), c.run_name, kw.get("status"))
    )
    monkeypatch.setitem(sys.modules, "runners.verl_side.backend.ingest", fake_ingest)
    monkeypatch.setenv("FAKE_VERL_STATUS", str(status))
    run_dir = run_dir_of(cfg)
    for attempt in (1, 2):
        if status:
            with pytest.raises(RuntimeError, match=f"status {status}"):
                verl_backend.run(cfg, run_dir)
        else:
            verl_backend.run(cfg, run_dir)
        paths = verl_files.AttemptPaths(run_dir, attempt)
        log_text = paths.log_file.read_text()
        assert "step:3" in log_text
        argv = json.loads(log_text.split("argv ", 1)[1].splitlines()[0])
        assert argv[:2] == ["-m", "verl.trainer.main_ppo"]
        assert argv[2:] == launch.build_spec(VerlRun.of(cfg), run_dir, attempt).argv[3:]
        assert paths.file_logger.exists() and paths.launch_script.exists()
        assert calls[-1] == (run_dir, cfg.run_name, "failed" if status else None)
    assert verl_files.attempts(run_dir) == [1, 2]
    assert all(verl_files.AttemptPaths(run_dir, n).file_logger.exists() for n in (1, 2))


# -- the seam ---------------------------------------------------------------------------------------
def packed_batch(lengths: list[int], k: int, vocab: int, seed: int = 0):
    """verl's micro-batch view: nested [B, j, k] sampler heads (real ones, full-vocabulary log-probs)."""
    from tensordict import TensorDict

    g = torch.Generator().manual_seed(seed)
    ids, lps = [], []
    for n in lengths:
        sampler_lp = torch.log_softmax(torch.randn(n, vocab, generator=g), -1)
        top = sampler_lp.topk(k, dim=-1).indices
        ids.append(top.to(torch.int32))
        lps.append(sampler_lp.gather(-1, top))
    nested = lambda xs: torch.nested.as_nested_tensor(xs, layout=torch.jagged)  # noqa: E731
    return TensorDict(
        {"rollout_topk_ids": nested(ids), "rollout_topk_log_probs": nested(lps)}, batch_size=[len(lengths)]
    )


@pytest.mark.parametrize("rollout_is, cap", [(None, None), ("token", 2.0)])
def test_project_processor_is_the_projects_centering_term(actor_config, rollout_is, cap):
    from ablations.score_centering import centering_term

    lengths, k, vocab = [3, 5], 4, 11
    data = packed_batch(lengths, k, vocab)
    logits = torch.randn(1, sum(lengths), vocab, dtype=torch.float64).to(torch.float32).requires_grad_(True)
    config = actor_config("ablation_sc_tis" if cap else "ablation_sc", rollout_is=rollout_is)
    out = sc_seam.project_logits_processor(logits, data, config)
    assert set(out) == {"sc_correction", "sc_sampler_head_mass", "sc_train_head_mass"}
    assert all(v.shape == (1, sum(lengths)) for v in out.values())

    ids = data["rollout_topk_ids"].values().long()
    train_head = torch.log_softmax(logits[0].float(), -1).gather(-1, ids)
    want, q, p = centering_term(train_head, data["rollout_topk_log_probs"].values(), is_cap=cap)
    torch.testing.assert_close(out["sc_correction"][0], want, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out["sc_sampler_head_mass"][0], q)
    torch.testing.assert_close(out["sc_train_head_mass"][0], p, atol=1e-6, rtol=1e-5)
    assert not out["sc_sampler_head_mass"].requires_grad
    (grad,) = torch.autograd.grad(out["sc_correction"].sum(), logits)
    (grad_ref,) = torch.autograd.grad(want.sum(), logits)
    torch.testing.assert_close(grad, grad_ref, atol=1e-6, rtol=1e-5)
    assert correction.is_rule_from(config) == (cap, None)


def test_processor_rejects_what_the_project_cannot_compute(actor_config):
    assert correction.is_rule_from(actor_config("ablation_sc_corrected", rollout_is="token", threshold="0.5_5.0")) \
        == (None, (0.5, 5.0))  # IcePop's band: verl main's weight, which the centering term now composes with
    with pytest.raises(ValueError, match="token-level"):
        correction.is_rule_from(actor_config("ablation_sc_tis", rollout_is="sequence"))
    data = packed_batch([2], 3, 7)
    with pytest.raises(NotImplementedError, match="thd"):
        sc_seam.project_logits_processor(torch.randn(1, 2, 7), data, actor_config(), data_format="bshd")
    with pytest.raises(ValueError, match="line up"):
        sc_seam.project_logits_processor(torch.randn(1, 3, 7), data, actor_config())


def fake_verl_modules():
    """A stand-in shaped like verl 8718ca30's score_centering.py (see sc_seam)."""
    sc = types.ModuleType("fake_verl_score_centering")
    exec(
        textwrap.dedent(
            """
            def score_centering_logits_processor(student_logits, data, config, data_format="thd"):
                return "verl's own correction"

            def score_centering_ppo_loss(config, model_output=None, data=None, dp_group=None,
                                         student_logits=None, data_format="thd"):
                if student_logits is not None:
                    return score_centering_logits_processor(student_logits, data, config, data_format)
                return "ppo_loss"
            """
        ),
        sc.__dict__,
    )
    return sc


def test_install_routes_verls_loss_to_the_project_processor(actor_config):
    sc = fake_verl_modules()
    sc_seam.install(sc)
    sc_seam.install(sc)  # idempotent
    assert sc_seam.installed(sc)
    data = packed_batch([4], 3, 9)
    logits = torch.randn(1, 4, 9)
    out = sc.score_centering_ppo_loss(actor_config("ablation_sc"), student_logits=logits, data=data)
    want = sc_seam.project_logits_processor(logits, data, actor_config("ablation_sc"))
    torch.testing.assert_close(out["sc_correction"], want["sc_correction"])
    assert sc.score_centering_ppo_loss(actor_config("ablation_sc")) == "ppo_loss"



def test_install_refuses_a_changed_seam():
    sc = fake_verl_modules()
    sc.score_centering_ppo_loss = lambda config, **kw: "inlined"  # no longer calls the processor by name
    with pytest.raises(installed.ScoreCenteringUnsupported, match="seam changed"):
        sc_seam.install(sc)
    del sc.score_centering_logits_processor
    with pytest.raises(installed.ScoreCenteringUnsupported, match="lacks"):
        sc_seam.install(sc)


@pytest.mark.skipif(installed.head_carrier() is installed.VERL_CARRIES, reason="the installed verl has the seam (8718ca30)")
def test_install_on_a_verl_without_the_seam_raises_the_clear_error():
    with pytest.raises(installed.ScoreCenteringUnsupported, match=releases.REQUIRED_COMMIT):
        sc_seam.install()


@pytest.mark.skipif(installed.head_carrier() is not installed.VERL_CARRIES,
                    reason="needs verl's own score-centering transport (commit 8718ca30, optional)")
def test_install_on_supporting_verl_patches_the_real_seam():
    import importlib

    sc_seam.install()
    module = importlib.import_module(newer_keys.SEAM_MODULE)
    assert module.score_centering_logits_processor is sc_seam.project_logits_processor


# -- beyond one node --------------------------------------------------------------------------------
def test_slurm_launcher_config_composes(tmp_path):
    # hydra-submitit-launcher is in the test extra: a missing install fails here (as in test_slurm_launcher.py)
    import hydra_plugins.hydra_submitit_launcher  # noqa: F401

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[EXPERIMENT, "method=sc", "hydra/launcher=slurm_8gpu"],
            return_hydra_config=True,
        )
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert (launcher.nodes, launcher.gpus_per_node, launcher.tasks_per_node) == (1, 8, 1)
    assert launcher.array_parallelism >= len(ARMS) and launcher.max_num_timeout > 0
    assert launcher.additional_parameters.exclusive is True


def test_default_threshold_is_verls():
    from verl.trainer.config.algorithm import RolloutCorrectionConfig

    assert RolloutCorrectionConfig().rollout_is_threshold == config_facts.DEFAULT_IS_THRESHOLD


def test_loss_agg_mode_is_one_verl_aggregates(tmp_path):
    """The arms minimise the token mean (ablations/losses.py): verl's agg_loss in the project's mode gives it."""
    from verl.trainer.ppo import core_algos

    mode = project_cfg(tmp_path).trainer.loss_agg_mode
    assert mode == "token-mean"
    loss = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    # token mean (1 + 2 + 3) / 3; the sequence means would give 2.25, the token sum 6
    assert float(core_algos.agg_loss(loss, mask, mode)) == pytest.approx(2.0)


def test_dry_run_calls_the_loss_on_verls_converted_config(tmp_path):
    """A loss that reads the actor-side rollout_correction by attribute (as the TIS arms once did)
    fails inside verl's worker, where that block is a plain mapping: the dry run must say so."""
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, register_policy_loss

    @register_policy_loss("test_attribute_reader")
    def attribute_reader(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, **kw):
        cap = config.policy_loss.rollout_correction.rollout_is_threshold  # AttributeError on a dict
        return (log_prob * cap).sum(), {}

    try:
        cfg = project_cfg(tmp_path, "backend.dry_run=true", method="tis")
        good = launch.build_spec(VerlRun.of(cfg), run_dir_of(cfg)).overrides
        bad = [o if ho.parse(o)[0] != "actor_rollout_ref.actor.policy_loss.loss_mode"
               else "actor_rollout_ref.actor.policy_loss.loss_mode=test_attribute_reader" for o in good]
        with pytest.raises(ValueError, match="fails on verl's converted actor config"):
            dry_run.check_against_installed_verl(bad)
        dry_run.check_against_installed_verl(good)
    finally:
        POLICY_LOSS_REGISTRY.pop("test_attribute_reader", None)
