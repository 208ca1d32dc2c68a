"""The rehearsal's parts up to Ray (the whole run is ``tests/integration/test_rehearsal.py``).

* verl 0.9.1's ``logger.info(..., flush=True)`` at separate_async trainer init: found in the installed
  source, raises ``TypeError`` under verl's default level, and the reference experiment's own
  environment (not a rehearsal setting) keeps it quiet;
* the CPU swaps are named, and the dry-run difference from the reference launch holds only them and
  the rehearsal's sizes; bad rehearsal settings fail at the launcher before anything is written;
* the assets: the shipped model as an HF folder, generated data in the DAPO/AIME parquet schema;
* the stand-ins through verl's registries: the platform only when selected, the file weight sync
  round trip, and the CPU rollout's log-probs and top-k head.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
import verl  # noqa: F401 - once per process
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from runners.config.hydra_override import parse
from runners.run import verl_files
from runners.verl_side.backend import dry_run, launch
from runners.verl_side.backend import overrides as ovr
from runners.verl_side.backend.verl_run import VerlRun
from runners.verl_side.platform import rehearsal as verl_cpu
from runners.verl_side.platform.rehearsal import assets, limits
from runners.verl_side.platform.rehearsal import swaps as rehearsal
from runners.verl_side.revisions import config_facts, defects, installed, project_slots

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
#: The known fact, read in the release's source: verl 0.9.1's separate_async trainer calls
#: ``logger.info(..., flush=True)`` at init (the ``hybrid_engine=False`` branch), the call starting at
#: line 181 of verl/trainer/ppo/v1/trainer_separate_async.py. Whether the tests of the defect run is
#: decided by the installed verl's version against this table, not by the detector they test.
TRAINER_MODULE = "verl.trainer.ppo.v1.trainer_separate_async"
HAS_LOGGER_FLUSH_DEFECT = {"0.9.1": [181]}  # verl release -> lines of its logger calls with flush=


def _installed_verl_release() -> str | None:
    """The installed verl's version when it is a release from the index, None for an install from a VCS
    URL (e.g. 8718ca30 over the wheel: its version string says nothing about its source)."""
    dist = importlib.metadata.distribution("verl")
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    return None if "vcs_info" in direct else dist.version


def _defect_lines() -> list[int]:
    """The known defect's lines on the installed verl; skips where this table does not know the installed verl."""
    release = _installed_verl_release()
    if release not in HAS_LOGGER_FLUSH_DEFECT:
        pytest.skip(f"verl {release or 'from a VCS URL'}: not a release whose logger-flush defect is recorded "
                    f"here ({', '.join(HAS_LOGGER_FLUSH_DEFECT)})")
    return HAS_LOGGER_FLUSH_DEFECT[release]


def config(tmp_path: Path, experiment: str, *extra: str, method: str = "pg") -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=[f"+experiment={experiment}", f"method={method}",
                                           f"results_root={tmp_path / 'results'}", *extra])
    OmegaConf.resolve(cfg)
    return cfg


def run_dir(cfg: DictConfig) -> Path:
    return Path(cfg.results_root) / cfg.sweep / cfg.run_name


def _side_by_side(code: str, *envs: dict[str, str]) -> list[subprocess.CompletedProcess]:
    """``python -c code`` in one fresh process per environment, all at once (each imports verl on one core)."""
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for env in envs]
    outputs = [p.communicate(timeout=300) for p in procs]
    return [subprocess.CompletedProcess(p.args, p.returncode, *out) for p, out in zip(procs, outputs, strict=True)]


# -- the init crash of the reference launch --------------------------------------------------------
#: Import verl's separate_async trainer module and make the call its init makes on the ``hybrid_engine=False`` path.
LOG_LIKE_THE_TRAINER = (f"import importlib; m = importlib.import_module({TRAINER_MODULE!r}); "
                        "m.logger.info('hybrid replicas disabled', flush=True); print('survived')")


def test_the_installed_verl_has_the_logger_flush_call():
    lines = _defect_lines()
    assert defects.LOGGER_FLUSH.module == TRAINER_MODULE
    assert defects.logger_calls_with_flush(TRAINER_MODULE) == lines
    assert defects.LOGGER_FLUSH.present()
    assert defects.environment_fixes() == defects.LOGGER_FLUSH.env == {"VERL_LOGGING_LEVEL": "WARN"}


def test_reference_environment_survives_the_call_that_killed_trainer_init(tmp_path):
    _defect_lines()
    base = {k: v for k, v in os.environ.items() if k != "VERL_LOGGING_LEVEL"}
    cfg = config(tmp_path, "qwen3_4b_sc_repro", f"data.dir={tmp_path / 'data'}")
    spec = launch.build_spec(VerlRun.of(cfg), run_dir(cfg))
    broken, fixed = _side_by_side(LOG_LIKE_THE_TRAINER, base, {**base, **spec.env})
    assert broken.returncode != 0 and "unexpected keyword argument 'flush'" in broken.stderr, broken.stderr[-2000:]

    assert spec.env["VERL_LOGGING_LEVEL"] == "WARN"  # the driver
    assert "ray_kwargs.ray_init.runtime_env.env_vars.VERL_LOGGING_LEVEL=WARN" in [o.lstrip("+") for o in spec.overrides]
    assert fixed.returncode == 0 and "survived" in fixed.stdout, fixed.stderr[-2000:]


def test_logger_flush_detection_reads_calls_not_text(tmp_path, monkeypatch):
    package = tmp_path / "fakeverl"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "quiet.py").write_text("logger.info('flush=True in a string')\nprint('x', flush=True)\n")
    (package / "loud.py").write_text("logger.info(\n  f'{len(a())} replicas',\n  flush=True,\n)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert defects.logger_calls_with_flush("fakeverl.quiet") == []
    assert defects.logger_calls_with_flush("fakeverl.loud") == [1]
    assert defects.logger_calls_with_flush("fakeverl.absent") == []


# -- the swaps and the difference from the reference ----------------------------------------------
def _launch_difference(a: DictConfig, b: DictConfig, paths: verl_files.AttemptPaths) -> set[str]:
    """The verl keys (and ``env:`` variables) whose values differ between the launches of ``a`` and ``b``."""
    def values(cfg: DictConfig) -> dict:
        return {key: value for key, value, _ in map(parse, ovr.build_overrides(VerlRun.of(cfg), paths))}

    va, vb = values(a), values(b)
    keys = {k for k in va.keys() | vb.keys() if va.get(k, "<unset>") != vb.get(k, "<unset>")}
    env_a, env_b = ovr.process_env(VerlRun.of(a), paths), ovr.process_env(VerlRun.of(b), paths)
    return keys | {f"env:{k}" for k in env_a.keys() | env_b.keys() if env_a.get(k) != env_b.get(k)}


def test_difference_from_the_reference_is_the_named_swaps_and_the_sizes(tmp_path):
    cfg = config(tmp_path, "rehearsal")
    paths = verl_files.AttemptPaths(run_dir(cfg), 1)
    report = dry_run.reference_difference(VerlRun.of(cfg), paths)
    names = [s["name"] for s in report["swaps"]]
    assert names == ["model", "platform", "rollout", "weight sync", "logical GPUs", "sizes"]
    rows = {r["key"]: r for r in report["difference"]}
    # the rollout is vLLM under the reference's own name, its CPU engine settings set by the rollout swap
    assert "actor_rollout_ref.rollout.name" not in rows
    for key in ("actor_rollout_ref.rollout.enforce_eager", "actor_rollout_ref.rollout.enable_sleep_mode",
                "env:VLLM_CPU_KVCACHE_SPACE", f"env:{verl_cpu.ROLLOUT_ENV}"):
        assert rows[key]["by"] == "rollout", (key, rows.get(key))
    assert rows[f"env:{verl_cpu.ROLLOUT_ENV}"]["rehearsal"] == verl_cpu.VLLM_ROLLOUT
    standin = dry_run.reference_difference(VerlRun.of(config(tmp_path, "rehearsal", "backend.rehearsal_rollout=standin")), paths)
    standin_rows = {r["key"]: r for r in standin["difference"]}
    assert standin_rows["actor_rollout_ref.rollout.name"]["rehearsal"] == verl_cpu.ROLLOUT_NAME
    assert standin_rows["actor_rollout_ref.rollout.name"]["by"] == "rollout"
    assert f"env:{verl_cpu.ROLLOUT_ENV}" not in standin_rows
    assert rows["actor_rollout_ref.rollout.checkpoint_engine.backend"]["rehearsal"] == verl_cpu.WEIGHT_SYNC_BACKEND
    assert rows["env:VERL_PLATFORM"]["rehearsal"] == "cpu"
    assert rows["ray_kwargs.ray_init.num_gpus"]["rehearsal"] == 2  # 1 trainer + 1 rollout logical GPU
    assert "env:VERL_LOGGING_LEVEL" not in rows  # the fix is the reference's own environment
    swapped = {k for s in report["swaps"] for k in s["keys"]}
    by_yaml = {k for k, r in rows.items() if r["by"] == "conf/experiment/rehearsal.yaml"}
    # the rows put down to the yaml are what the yaml alone changes: the same experiment on a GPU (no swap)
    # against the reference launch, less what a swap sets anyway (the model path); a key that a swap sets
    # without naming it would be put down to the yaml and is not in that difference
    on_gpu = config(tmp_path, "rehearsal", "backend.platform=gpu")
    reference = config(tmp_path, "qwen3_4b_sc_repro")
    assert by_yaml == _launch_difference(reference, on_gpu, paths) - swapped
    assert not any(k.startswith("env:") for k in by_yaml)  # the environment differs only by the swaps
    # the loss, the advantage estimator and bypass mode are the reference experiment's
    for key in ("actor_rollout_ref.actor.policy_loss.loss_mode", "algorithm.adv_estimator",
                f"{config_facts.DRIVER_RC}.bypass_mode", "actor_rollout_ref.hybrid_engine", "trainer.v1.trainer_mode"):
        assert key not in rows
    text = rehearsal.difference_text(report)
    assert "[rollout]" in text and "conf/experiment/rehearsal.yaml" in text


def test_overrides_of_a_gpu_launch_carry_no_swap(tmp_path):
    cfg = config(tmp_path, "qwen3_4b_sc_repro", f"data.dir={tmp_path / 'data'}")
    paths = verl_files.AttemptPaths(run_dir(cfg), 1)
    text = "\n".join(ovr.build_overrides(VerlRun.of(cfg), paths))
    assert verl_cpu.ROLLOUT_NAME not in text and "VERL_PLATFORM" not in text and rehearsal.PLUGIN_MODULE not in text


def test_the_vllm_rollout_without_vllms_cpu_build_is_refused_before_anything_is_written(tmp_path, capsys,
                                                                                      monkeypatch):
    monkeypatch.setattr(limits, "vllm_cpu_build_missing", lambda: "no distribution named vllm is installed")
    results = tmp_path / "results"
    status, err = _launch_in_process(["+experiment=rehearsal", "method=pg", f"results_root={results}"], capsys)
    assert status == 2, err
    assert err.startswith("config error: backend.rehearsal_rollout=vllm needs vLLM's CPU build"), err
    assert limits.VLLM_CPU_INSTALL in err and "backend.rehearsal_rollout=standin" in err
    assert not results.exists()
    limits.check(config(tmp_path, "rehearsal", "backend.rehearsal_rollout=standin"))  # the stand-in needs none


def test_the_head_transport_reaches_vllms_engine_arguments_and_is_refused_on_the_standin(tmp_path, capsys):
    from runners.verl_side import logits_processor

    key = "actor_rollout_ref.rollout.engine_kwargs.vllm.logits_processors"
    for method, transport, expected in (("sc", "logits_processor", logits_processor.PROCESSOR),
                                        ("sc", "flat_logprobs", None), ("pg", "logits_processor", None)):
        cfg = config(tmp_path, "rehearsal", f"method={method}", f"backend.rollout_engine.head_transport={transport}")
        found = [o for o in ovr.build_overrides(VerlRun.of(cfg), verl_files.AttemptPaths(run_dir(cfg), 1)) if key in o]
        assert (found[0].split("=", 1)[1] if found else None) == expected, (method, transport, found)
        assert rehearsal.head_files_folder(tmp_path) in rehearsal.leftovers(cfg, tmp_path)
    results = tmp_path / "results"
    status, err = _launch_in_process(["+experiment=rehearsal", "method=sc", "backend.rehearsal_rollout=standin",
                                      "backend.rollout_engine.head_transport=logits_processor",
                                      f"results_root={results}"], capsys)
    assert status == 2 and err.startswith("config error: backend.rollout_engine.head_transport=logits_processor is "
                                          "not allowed with backend.rehearsal_rollout=standin"), err
    assert not results.exists()


def test_the_log_prob_transport_loads_the_processor_for_every_arm_and_is_refused_where_it_cannot_work(tmp_path,
                                                                                                        capsys):
    from runners.verl_side import logits_processor

    processors = "actor_rollout_ref.rollout.engine_kwargs.vllm.logits_processors"
    switch = f"actor_rollout_ref.rollout.custom.{logits_processor.LOG_PROB_CUSTOM_KEY}"
    by_processor = "backend.rollout_engine.log_prob_transport=logits_processor"
    for method, extra in (("pg", []), ("icepop", []), ("sc", ["backend.rollout_engine.head_transport=logits_processor"])):
        cfg = config(tmp_path, "rehearsal", f"method={method}", by_processor, *extra)
        launch = ovr.build_overrides(VerlRun.of(cfg), verl_files.AttemptPaths(run_dir(cfg), 1))
        assert [o.split("=", 1)[1] for o in launch if processors in o] == [logits_processor.PROCESSOR], method
        assert [o.split("=", 1)[1] for o in launch if switch in o] == [logits_processor.LOG_PROBS_BY_PROCESSOR], method
    default = config(tmp_path, "rehearsal", "method=pg")
    assert not [o for o in ovr.build_overrides(VerlRun.of(default), verl_files.AttemptPaths(run_dir(default), 1))
                if switch in o or processors in o]  # opt-in: the default asks vLLM for logprobs=0 as before
    results = tmp_path / "results"
    for argv, message in (
        (["method=pg", "backend.rehearsal_rollout=standin"],
         "config error: backend.rollout_engine.log_prob_transport=logits_processor is not allowed with "
         "backend.rehearsal_rollout=standin"),
        (["method=sc"], "config error: backend.rollout_engine.log_prob_transport=logits_processor needs "
                        "backend.rollout_engine.head_transport=logits_processor for method=sc"),
    ):
        status, err = _launch_in_process(["+experiment=rehearsal", by_processor, *argv, f"results_root={results}"],
                                         capsys)
        assert status == 2 and err.startswith(message), err
        assert not results.exists()


def _launch_in_process(argv: list[str], capsys) -> tuple[int, str]:
    """``python runners/launch.py ARGV``'s exit status and stderr, through the launcher's own ``cli``."""
    from runners import launch as launcher

    status = launcher.cli(argv)
    return status, capsys.readouterr().err


@pytest.mark.parametrize(("override", "key"), [
    ("rollout.max_response_length=100", "rollout.max_response_length"),
    ("rollout.max_prompt_length=8", "rollout.max_prompt_length"),
    ("rollout.max_response_length=4", "rollout.max_response_length"),
    ("backend.placement.rollout_tensor_parallel=2", "backend.placement.rollout_tensor_parallel"),
    ("backend.platform=tpu", "backend.platform"),
])
def test_bad_rehearsal_settings_fail_at_the_launcher_before_anything_is_written(tmp_path, capsys, override, key):
    results = tmp_path / "results"
    status, err = _launch_in_process(["+experiment=rehearsal", "method=pg", f"results_root={results}", override], capsys)
    assert status == 2, err
    assert err.startswith("config error:") and key in err, err
    assert not results.exists()


# -- the assets -------------------------------------------------------------------------------------
def test_assets_are_the_shipped_model_and_parquet_sets_in_the_reference_schema(tmp_path):
    import pyarrow.parquet as pq
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from runners.tiny.base_model import load_shipped

    cfg = config(tmp_path, "rehearsal")
    request = assets.prepare_assets(cfg)
    model_dir, data_dir = Path(request["model"]["path"]), Path(request["data"]["dir"])
    hf = AutoModelForCausalLM.from_pretrained(model_dir)
    shipped = load_shipped(limits.read_yaml(limits.MODEL_YAML))
    for (name, a), b in zip(hf.state_dict().items(), shipped.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    assert hf.generation_config.eos_token_id == tokenizer.eos_token_id

    train = pq.read_table(data_dir / cfg.data.train.file).to_pylist()
    assert len(train) == cfg.data.train.rows
    assert {r["data_source"] for r in train} == {"math_dapo"}
    assert set(train[0]) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    for spec in cfg.data.eval_sets:
        rows = pq.read_table(data_dir / spec.file).to_pylist()
        assert len(rows) == spec.size and {r["data_source"] for r in rows} == {spec.name}
        assert all(r["extra_info"]["problem_id"].startswith(f"{spec.name}-") for r in rows)
    train_problems = {r["prompt"][0]["content"] for r in train}
    held_out = {r["prompt"][0]["content"] for s in cfg.data.eval_sets for r in pq.read_table(data_dir / s.file).to_pylist()}
    assert not train_problems & held_out

    stamp = (model_dir / assets.MANIFEST).stat().st_mtime_ns
    assets.prepare_assets(cfg)  # same request: nothing rewritten
    assert (model_dir / assets.MANIFEST).stat().st_mtime_ns == stamp


# -- the stand-ins through verl's registries ---------------------------------------------------------
def _registered(*envs: dict[str, str]) -> list[dict]:
    code = ("import json, verl; from verl.plugin.platform import PlatformRegistry as P; "
            "from verl.checkpoint_engine.base import CheckpointEngineRegistry as C; "
            "from verl.workers.rollout.replica import RolloutReplicaRegistry as R; "
            "print(json.dumps({'platform': 'cpu' in P._platforms, 'sync': 'cpu_file' in C._registry, "
            "'rollout': 'cpu_hf' in R._registry, "
            "'vllm': R._registry['vllm'].__module__ == 'runners.verl_side.platform.rehearsal.rollout'}))")
    out = []
    for proc in _side_by_side(code, *envs):
        assert proc.returncode == 0, proc.stderr[-3000:]
        out.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return out


def test_the_entry_point_registers_the_cpu_platform_only_when_selected():
    base = {k: v for k, v in os.environ.items() if k not in ("VERL_PLATFORM", "VERL_USE_EXTERNAL_MODULES")}
    plain, cpu = _registered(base, {**base, **verl_cpu.ENVIRONMENT})
    assert plain == {"platform": False, "sync": False, "rollout": False, "vllm": False}
    # on the CPU platform verl's name `vllm` is the CPU stand-in too (what the rehearsal's SC arms use)
    assert cpu == {"platform": True, "sync": True, "rollout": True, "vllm": True}


def test_gloo_backend_string():
    from runners.verl_side.platform.rehearsal.verl_device import gloo_backend

    assert gloo_backend("cpu:gloo,cpu:gloo") == "gloo"
    assert gloo_backend("cpu:gloo,cuda:nccl") == "cpu:gloo,cuda:nccl"
    assert gloo_backend(None) is None


def test_file_weight_sync_round_trip(tmp_path, monkeypatch):
    from runners.verl_side.platform.rehearsal.weight_sync import CpuFileCheckpointEngine

    monkeypatch.setenv(verl_cpu.STATE_DIR_ENV, str(tmp_path))
    sender, receiver = CpuFileCheckpointEngine(1, is_master=True), CpuFileCheckpointEngine(1)
    actor, rollout = CpuFileCheckpointEngine.build_topology(1, 1, [sender.prepare(), receiver.prepare()])
    sender.init_process_group(rank=actor["rank"][0], path=actor["path"][0])
    receiver.init_process_group(rank=rollout["rank"][0], path=rollout["path"][0])
    weights = {"a": torch.arange(6.0).reshape(2, 3), "b": torch.ones(4)}

    async def sync():
        await sender.send_weights(iter(weights.items()))
        return {name: t async for name, t in receiver.receive_weights()}

    got = asyncio.run(sync())
    assert got.keys() == weights.keys() and all(torch.equal(got[k], weights[k]) for k in weights)
    sender.finalize()
    assert not list(tmp_path.glob("weights-*")), "the master removes the file once every receiver has read it"


@pytest.fixture(scope="module")
def cpu_server(tmp_path_factory):
    from runners.verl_side.platform.rehearsal.rollout import CpuHFServer

    folder = tmp_path_factory.mktemp("model")
    assets.write_model(folder)
    config = types.SimpleNamespace(seed=0, response_length=8, topk_log_probs=5)  # the head is asked per request
    return CpuHFServer(config, {"path": str(folder)}, replica_rank=0)


def test_cpu_rollout_log_probs_and_head_are_the_processed_distribution(cpu_server):
    from runners.tiny.tokenizer import build_tokenizer

    tokenizer = build_tokenizer()
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "12+34=? \\boxed{}"}], tokenize=True,
                                           add_generation_prompt=True)
    prompt = list(prompt["input_ids"] if isinstance(prompt, dict) or hasattr(prompt, "keys") else prompt)
    temperature = 0.7
    out = asyncio.run(cpu_server.generate(prompt, {"temperature": temperature, "top_p": 1.0, "top_k": -1,
                                                   "logprobs": True, "max_tokens": 8, "topk_log_probs": 5}, "r0"))
    n = len(out.token_ids)
    assert 1 <= n <= 8 and len(out.log_probs) == n
    ids, head = out.extra_fields["response_topk_ids"], out.extra_fields["response_topk_log_probs"]
    assert ids.shape == (n, 5) and head.shape == (n, 5)
    assert str(ids.dtype) == "int32" and str(head.dtype) == "float32"
    with torch.no_grad():
        logits = cpu_server.model(torch.tensor([prompt + out.token_ids])).logits[0].float()
    expected = torch.log_softmax(logits[len(prompt) - 1: len(prompt) - 1 + n] / temperature, -1)
    sampled = expected.gather(-1, torch.tensor(out.token_ids).unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(torch.tensor(out.log_probs), sampled, atol=1e-4)
    top = expected.topk(5)
    assert torch.allclose(torch.from_numpy(head), top.values, atol=1e-4)
    assert (torch.from_numpy(ids).long() == top.indices).all()
    assert out.extra_fields["global_steps"] is None  # no weights synced yet


def test_cpu_rollout_returns_a_head_only_where_the_request_asks(cpu_server):
    # verl 0.9.1 never asks; 8718ca30's agent loop asks on training rollouts only, not on validation
    # ones, even with rollout.topk_log_probs set (as in this server's config)
    for params in ({"temperature": 1.0, "logprobs": False, "max_tokens": 3},
                   {"temperature": 1.0, "logprobs": False, "max_tokens": 3, "topk_log_probs": 0}):
        out = asyncio.run(cpu_server.generate([1, 4, 7], params, "r1"))
        assert out.log_probs is None and "response_topk_ids" not in out.extra_fields
    out = asyncio.run(cpu_server.generate([1, 4, 7], {"temperature": 1.0, "max_tokens": 3, "topk_log_probs": 3}, "r2"))
    assert out.extra_fields["response_topk_ids"].shape == (len(out.token_ids), 3)


STANDIN = "backend.rehearsal_rollout=standin"


def test_an_sc_arm_uses_the_rollout_name_its_transport_needs(tmp_path):
    """On the stand-in: verl 8718ca30 takes the sampler head from rollout.name=vllm only (RolloutConfig, validate_config), which
    the CPU platform maps to the stand-in; the project's transport (verl 0.9.1) asks the CPU rollout under its
    own name (a difference from the reference launch, set by the rollout swap)."""
    sc = config(tmp_path, "rehearsal", STANDIN, method="sc")
    want = verl_cpu.HEAD_ROLLOUT_NAME if installed.head_carrier() is installed.VERL_CARRIES else verl_cpu.ROLLOUT_NAME
    assert rehearsal.rollout_name(sc) == want
    assert rehearsal.rollout_name(config(tmp_path, "rehearsal", STANDIN)) == verl_cpu.ROLLOUT_NAME
    report = dry_run.reference_difference(VerlRun.of(sc), verl_files.AttemptPaths(run_dir(sc), 1))
    rows = {r["key"]: r for r in report["difference"]}
    if want == "vllm":
        assert "actor_rollout_ref.rollout.name" not in rows
    else:
        assert (rows["actor_rollout_ref.rollout.name"]["rehearsal"], rows["actor_rollout_ref.rollout.name"]["by"]) == (
            want, "rollout")
    rollout = next(s for s in report["swaps"] if s["name"] == "rollout")
    assert "actor_rollout_ref.rollout.name" in rollout["keys"] and "head" in rollout["why"]


def test_sc_arm_stops_before_anything_starts_where_the_transport_lacks_a_slot(tmp_path, capsys, monkeypatch):
    """The project's transport on a verl whose FSDP engine no longer opens the logits-processor slot: the
    launch stops with one line naming it, before anything is written."""
    if installed.head_carrier() is not installed.PROJECT_CARRIES:
        pytest.fail("the pinned verl 0.9.1 uses the project's head transport")
    monkeypatch.setattr(installed, "PROJECT_SLOTS", tuple(
        project_slots.Slot(s.where, s.what, (lambda: False) if "prepare_model_outputs" in s.where else s.holds)
        for s in installed.PROJECT_SLOTS))
    installed.check.cache_clear()
    results = tmp_path / "results"
    try:
        status, err = _launch_in_process(["+experiment=rehearsal", "method=sc", f"results_root={results}", STANDIN],
                                         capsys)
    finally:
        installed.check.cache_clear()
    assert status == 2, err
    assert "prepare_model_outputs" in err and "logits-processor slot" in err and "Traceback" not in err
    assert not results.exists()
