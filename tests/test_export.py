"""Checkpoint retention and export on a tiny Qwen3 model in verl's FSDP checkpoint layout.

The export runs verl's real merger (``verl.model_merger`` ``main``, in-process with the exact argv
the subprocess would get: one ``import verl`` for the module) on a single-rank checkpoint built
here, then checks ``verification.json`` against the files and the model.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from runners.run import verl_files
from runners.verl_side.checkpoints.export_check import tensor_summary
from runners.verl_side.checkpoints.store import (
    TEST_SET_SELECTION,
    CheckpointError,
    apply_retention,
    export_checkpoint,
    merger_command,
    plan_retention,
)
from runners.verl_side.checkpoints.store import main as ckpt_main

EVAL = {0: (0.1, 0.1), 2: (0.3, 0.3), 4: (0.6, 0.4), 6: (0.5, 0.5)}  # step -> (aime2024, aime2025) mean@8


def in_process_merger(cmd: list[str], log_path: Path) -> None:
    """Run ``python -m verl.model_merger ...`` in this process (same argv, same code)."""
    from verl.model_merger.__main__ import main

    assert cmd[1:3] == ["-m", "verl.model_merger"]
    old = sys.argv
    sys.argv = ["verl.model_merger", *cmd[3:]]
    try:
        main()
    finally:
        sys.argv = old
    log_path.write_text("merged in-process\n")


def save_tiny_tokenizer(path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<eos>": 1, **{w: i + 2 for i, w in enumerate(["1", "+", "=", "2"])}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>", pad_token="<eos>"
    ).save_pretrained(path)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> tuple[Path, int, int]:
    """A run with checkpoints at steps 2, 4, 6, 8 (only 4 holds real weights) and evals at 0..6."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    run = tmp_path_factory.mktemp("runs") / "pg-seed42"
    ckpt = verl_files.checkpoints_dir(run)
    config = Qwen3Config(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        architectures=["Qwen3ForCausalLM"],
        eos_token_id=1,
        pad_token_id=1,
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    n_tensors = len(model.state_dict())
    for step in (2, 4, 6, 8):
        actor = ckpt / f"global_step_{step}" / "actor"
        (actor / "huggingface").mkdir(parents=True)
        if step != 4:
            (actor / "placeholder").write_text("not a real checkpoint")
            continue
        config.save_pretrained(actor / "huggingface")
        save_tiny_tokenizer(actor / "huggingface")
        torch.save(
            {k: v.float() for k, v in model.state_dict().items()}, actor / "model_world_size_1_rank_0.pt"
        )
        torch.save({"state": {0: {"exp_avg": torch.zeros(3)}}}, actor / "optim_world_size_1_rank_0.pt")
        (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    (ckpt / "latest_checkpointed_iteration.txt").write_text("8")
    val = [
        {"step": s, "val-core/aime2024/acc/mean@8": a, "val-core/aime2025/acc/mean@8": b}
        for s, (a, b) in EVAL.items()
    ]
    (run / "metrics.json").write_text(json.dumps({"schema_version": 1, "run": {}, "train": [], "val": val}))
    (run / "config.yaml").write_text("seed: 42\n")
    return run, n_params, n_tensors


def test_retention_keeps_latest_best_and_resume_point(tiny_run, tmp_path):
    run, _, _ = tiny_run
    plan = plan_retention(run, keep_latest=1, keep_best=1)
    assert plan.keep == {
        4: ["best #1 by eval average (test-set selection)"],
        8: ["latest", "resume point (latest_checkpointed_iteration.txt)"],
    }
    assert plan.delete == [2, 6]
    assert plan.best == [
        {"rank": 1, "step": 4, "avg": pytest.approx(0.5), "per_set": {"aime2024": 0.6, "aime2025": 0.4}}
    ]
    assert plan.selection == TEST_SET_SELECTION and "test set" in plan.selection
    # the tie between step 4 and step 6 (both 0.5) goes to the earlier step, as analysis picks "best"
    two = plan_retention(run, keep_latest=1, keep_best=2)
    assert [b["step"] for b in two.best] == [4, 6] and two.delete == [2]
    with pytest.raises(CheckpointError, match="keep_latest must be >= 1"):
        plan_retention(run, keep_latest=0, keep_best=1)

    # apply on a copy (the module fixture is shared); the dry-run CLI deletes nothing
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    assert ckpt_main(["retain", str(copy), "--keep-latest", "1", "--keep-best", "1"]) == 0
    assert (verl_files.checkpoints_dir(copy) / "global_step_2").exists()
    removed = apply_retention(plan_retention(copy, keep_latest=1, keep_best=1))
    assert sorted(p.name for p in removed) == ["global_step_2", "global_step_6"]
    left = sorted(p.name for p in verl_files.checkpoints_dir(copy).glob("global_step_*"))
    assert left == ["global_step_4", "global_step_8"]
    record = json.loads((verl_files.checkpoints_dir(copy) / "retention.json").read_text())
    assert record["delete"] == [2, 6] and "test-set" in record["selection"]


def test_export_best_with_verl_merger(tiny_run):
    run, n_params, n_tensors = tiny_run
    assert merger_command(Path("/c/actor"), Path("/o"))[1:] == [
        "-m",
        "verl.model_merger",
        "merge",
        "--backend",
        "fsdp",
        "--local_dir",
        "/c/actor",
        "--target_dir",
        "/o",
    ]
    path = export_checkpoint(run, "best", runner=in_process_merger, load_check="cpu")
    assert path == run / "export" / "verification.json"
    report = json.loads(path.read_text())
    assert report["source"]["step"] == 4 and report["source"]["selection"] == TEST_SET_SELECTION
    assert report["source"]["checkpoint"].endswith("global_step_4/actor")
    assert report["parameters"] == n_params and report["all_bf16"] and set(report["dtypes"]) == {"BF16"}
    assert report["optimizer_state"] is False
    names = {f["path"] for f in report["files"]}
    assert "model.safetensors" in names and "config.json" in names and "verification.json" not in names
    assert not any(n.endswith(".pt") or "optim" in n for n in names)
    for f in report["files"]:
        data = (run / "export" / f["path"]).read_bytes()
        assert f["bytes"] == len(data) and f["sha256"] == hashlib.sha256(data).hexdigest()
    assert report["config_sha256"] == hashlib.sha256(b"seed: 42\n").hexdigest()
    assert {"project", "verl", "torch", "transformers"} <= set(report["versions"])
    check = report["load_and_generate"]
    assert check["status"] == "passed" and check["device"] == "cpu" and check["logits_finite"]
    assert check["num_parameters"] == n_params and check["parameter_dtype"] == "torch.bfloat16"
    assert len(check["new_token_ids"]) > 0
    assert report["tensors"] == tensor_summary(run / "export")["tensors"] == n_tensors

    # an existing export is not replaced silently; with force it is, and without a GPU the check is skipped
    with pytest.raises(CheckpointError, match="exists and is not empty"):
        export_checkpoint(run, 4, runner=in_process_merger)
    report = json.loads(export_checkpoint(run, 4, runner=in_process_merger, force=True).read_text())
    import torch

    if not torch.cuda.is_available():
        assert report["load_and_generate"] == {
            "status": "skipped",
            "reason": "no GPU: torch.cuda.is_available() is False",
        }
    assert report["source"]["selection"] == "chosen by step number"


def test_export_failures_leave_no_export(tiny_run, tmp_path):
    run, _, _ = tiny_run
    out = tmp_path / "exp"

    def failing(cmd, log_path):
        log_path.write_text("boom\n")
        raise CheckpointError("merger failed")

    with pytest.raises(CheckpointError, match="merger failed"):
        export_checkpoint(run, 4, out_dir=out, runner=failing)
    assert not out.exists() and not (tmp_path / ".exp.tmp").exists()
    with pytest.raises(CheckpointError, match=r"no checkpoint at step 5 \(have \[2, 4, 6, 8\]\)"):
        export_checkpoint(run, 5, out_dir=out, runner=failing)

    def leaks_optimizer(cmd, log_path):
        in_process_merger(cmd, log_path)
        target = Path(cmd[cmd.index("--target_dir") + 1])
        (target / "optim_world_size_1_rank_0.pt").write_bytes(b"x")

    with pytest.raises(CheckpointError, match="training state files"):
        export_checkpoint(run, 4, out_dir=out, runner=leaks_optimizer, load_check="skip")
    assert not out.exists()


def test_tensor_summary_reads_headers_and_rejects_a_broken_file(tmp_path):
    import torch
    from safetensors.torch import save_file

    save_file({"a": torch.zeros(2, 3, dtype=torch.bfloat16), "b": torch.zeros(4, dtype=torch.bfloat16)},
              str(tmp_path / "model.safetensors"))
    summary = tensor_summary(tmp_path)
    assert (summary["tensors"], summary["parameters"], summary["all_bf16"]) == (2, 10, True)
    (tmp_path / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        tensor_summary(tmp_path)
