"""The project's head transport on verl 0.9.1 (runners/verl_side/head), piece by piece on a CPU.

What runs end to end through verl's trainer is the rehearsal (tests/integration/test_rehearsal.py) and
verl's actor worker (tests/integration/test_verl_worker.py); here each piece's contract: the layout,
the client across resumed segments (verl's own FullyAsyncLLMServerClient loop, with a scripted server),
the agent-loop output's fields, the engine's guards, and the vLLM piece on stand-ins of vLLM's objects
(and on vLLM's own classes where they import).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import math

import numpy as np
import pytest
import torch
import verl  # noqa: F401 - once per process
from omegaconf import OmegaConf

from runners.verl_side.head import (
    REQUEST_KEY,
    SEQUENCE_IDS,
    SEQUENCE_LOG_PROBS,
    TOKEN_IDS,
    TOKEN_LOG_PROBS,
    head_layout,
)
from runners.verl_side.head.vllm_head import (
    HeadCapturingEngine,
    ask_for_head,
    requested_k,
    sampled_only,
    split_flat,
)

K = 3


def head(rows: int, k: int = K, offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    ids = (np.arange(rows * k).reshape(rows, k) + offset).astype(np.int32)
    return ids, -np.linspace(0.1, 2.0, rows * k, dtype=np.float32).reshape(rows, k)


# -- layout -----------------------------------------------------------------------------------
def test_bytes_per_token():
    assert head_layout.bytes_per_token(128) == 1024  # int32 ids + float32 log-probs


def test_sequence_head_puts_response_token_r_at_row_prompt_minus_one_plus_r():
    ids, lps = head(5)
    seq_ids, seq_lps = head_layout.sequence_head(ids, lps, prompt_length=4, response_length=4)  # a 5th row: cut
    assert seq_ids.shape == (8, K) and seq_lps.dtype == torch.float32
    for r in range(4):
        assert seq_ids[3 + r].tolist() == ids[r].tolist()
        assert seq_lps[3 + r].tolist() == pytest.approx(lps[r].tolist())
    for row in (0, 1, 2, 7):  # prompt positions and the last token (which predicts nothing)
        assert seq_ids[row].tolist() == list(range(K))
        assert seq_lps[row].exp().sum().item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="head for 5 tokens but the response has 6"):
        head_layout.sequence_head(ids, lps, prompt_length=4, response_length=6)


def test_concatenate_checks_rows_against_tokens():
    a, b = head(2), head(3, offset=100)
    ids, lps = head_layout.concatenate([(*a, 2), (*b, 3)], K)
    assert ids.shape == (5, K) and ids[2].tolist() == b[0][0].tolist()
    assert head_layout.concatenate([], K)[0].shape == (0, K)
    with pytest.raises(ValueError, match="segment 1 of a partial rollout has 3 head rows for 2 tokens"):
        head_layout.concatenate([(*a, 2), (*b, 2)], K)


def _nested(parts: list[torch.Tensor]) -> torch.Tensor:
    return torch.nested.nested_tensor(parts, layout=torch.jagged)


def test_packed_head_lines_up_with_the_tokens_and_pads_only_samples_that_train_on_nothing():
    seqs = [torch.arange(5), torch.arange(3)]
    heads = [head_layout.sequence_head(*head(2), 3, 2), head_layout.sequence_head(*head(1), 2, 1)]
    ids, lps = head_layout.packed_head(_nested([h[0] for h in heads]), _nested([h[1] for h in heads]), _nested(seqs),
                                  _nested([torch.ones(2), torch.ones(1)]))
    assert ids.shape == (8, K) and torch.equal(ids[:5], heads[0][0])
    # verl's padding sample for data-parallel balance: a template copied from a real sample (wrong length), mask 0
    seqs.append(torch.arange(7))
    heads.append(heads[0])
    ids, lps = head_layout.packed_head(_nested([h[0] for h in heads]), _nested([h[1] for h in heads]), _nested(seqs),
                                  _nested([torch.ones(2), torch.ones(1), torch.zeros(1)]))
    assert ids.shape == (15, K) and torch.equal(ids[8:], torch.arange(K, dtype=ids.dtype).expand(7, K))
    with pytest.raises(ValueError, match="sample 2 .* 5 rows for a sequence of 7 tokens"):
        head_layout.packed_head(_nested([h[0] for h in heads]), _nested([h[1] for h in heads]), _nested(seqs),
                           _nested([torch.ones(2), torch.ones(1), torch.ones(1)]))


# -- the client: verl's resume loop with the head kept ----------------------------------------
def _client_config():
    return OmegaConf.create({"actor_rollout_ref": {"rollout": {"response_length": 8, "name": "vllm"}}})


def test_client_joins_the_head_of_resumed_segments(monkeypatch):
    """A request aborted by a weight sync after 2 tokens, resumed from prompt + 2 tokens, completed
    after 3 more: verl's own loop rebuilds the response; the project's client keeps both heads."""
    from verl.workers.rollout import llm_server
    from verl.workers.rollout.replica import TokenOutput

    from runners.verl_side.head.client import HeadLLMServerClient

    segments = [([5, 6], "aborted", 0, 3), ([7, 8, 9], "completed", 100, 4)]
    calls = []

    async def server(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        tokens, stop, offset, version = segments[len(calls)]
        calls.append((list(prompt_ids), dict(sampling_params)))
        extra = {"global_steps": version}
        if requested_k(sampling_params):
            extra[TOKEN_IDS], extra[TOKEN_LOG_PROBS] = head(len(tokens), offset=offset)
        return TokenOutput(token_ids=tokens, log_probs=[-0.5] * len(tokens), stop_reason=stop, extra_fields=extra)

    async def no_wait(*_args):  # verl's client waits 1 s before resuming an aborted request
        return None

    monkeypatch.setattr(llm_server.LLMServerClient, "generate", server)
    monkeypatch.setattr(llm_server.asyncio, "sleep", no_wait)
    verl_client = llm_server.FullyAsyncLLMServerClient(config=_client_config(), load_balancer_handle=None)
    client = HeadLLMServerClient.of(verl_client)
    params = {"temperature": 1.0, "logprobs": True, "extra_args": {REQUEST_KEY: K}}
    out = asyncio.run(client.generate("r1", prompt_ids=[1, 2], sampling_params=params))
    assert out.token_ids == [5, 6, 7, 8, 9] and calls[1][0] == [1, 2, 5, 6]
    assert out.extra_fields["min_global_steps"] == 3 and out.extra_fields["max_global_steps"] == 4
    ids = out.extra_fields[TOKEN_IDS]
    assert ids.shape == (5, K) and ids[:2].tolist() == head(2)[0].tolist() and ids[2:].tolist() == head(3, offset=100)[0].tolist()

    calls.clear()  # without the request: verl's behaviour, no head
    plain = asyncio.run(client.generate("r2", prompt_ids=[1], sampling_params={"logprobs": True}))
    assert TOKEN_IDS not in plain.extra_fields and plain.token_ids == [5, 6, 7, 8, 9]

    async def ignoring_server(self, request_id, **kwargs):
        return TokenOutput(token_ids=[1], stop_reason="completed")

    # a server that ignores the request is an error, not a silent PG run
    monkeypatch.setattr(llm_server.LLMServerClient, "generate", ignoring_server)
    with pytest.raises(RuntimeError, match="returned no sampler head"):
        asyncio.run(client.generate("r3", prompt_ids=[1], sampling_params=params))
    with pytest.raises(TypeError, match="FullyAsyncLLMServerClient"):
        HeadLLMServerClient.of(llm_server.LLMServerClient(config=_client_config()))


# -- the agent-loop output: the head beside the tokens ----------------------------------------
def _output(response_mask=None, with_head=True):
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

    extra = {"global_steps": 2}
    if with_head:
        extra[TOKEN_IDS], extra[TOKEN_LOG_PROBS] = head(3)
    return AgentLoopOutput(prompt_ids=[1, 2, 3, 4], response_ids=[7, 8, 9], response_mask=response_mask or [1, 1, 1],
                           response_logprobs=[-0.1, -0.2, -0.3], num_turns=2, metrics=AgentLoopMetrics(),
                           extra_fields=extra)


def test_lifted_output_stores_the_head_per_sequence_position_and_nothing_else_changes():
    from runners.verl_side.head.agent_loop import HeadAgentLoopOutput, with_head_request

    original = _output()
    lifted = HeadAgentLoopOutput.lift(original)
    out, plain = lifted.as_dict(), _output(with_head=False).as_dict()
    assert set(out) - set(plain) == {SEQUENCE_IDS, SEQUENCE_LOG_PROBS}
    assert TOKEN_IDS not in out["extra_fields"] and TOKEN_IDS in original.extra_fields  # the original is untouched
    assert out[SEQUENCE_IDS].shape == (7, K) and out[SEQUENCE_IDS][3].tolist() == head(3)[0][0].tolist()
    for key in plain:
        if isinstance(plain[key], torch.Tensor):
            assert torch.equal(out[key], plain[key]), key
    with pytest.raises(ValueError, match="single-turn"):
        HeadAgentLoopOutput.lift(_output(response_mask=[1, 0, 1])).as_dict()
    with pytest.raises(RuntimeError, match="without the sampler's head"):
        HeadAgentLoopOutput.lift(_output(with_head=False)).as_dict()
    asked = with_head_request({"temperature": 1.0, "extra_args": {"other": 1}}, 128)
    assert asked["extra_args"] == {"other": 1, REQUEST_KEY: 128}


def test_head_size_comes_from_verls_rollout_custom_block():
    from runners.verl_side.head import CUSTOM_KEY
    from runners.verl_side.head.agent_loop import head_size

    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"custom": {CUSTOM_KEY: 128}}}})
    assert head_size(config) == 128
    with pytest.raises(ValueError, match=f"custom.{CUSTOM_KEY} >= 1"):
        head_size(OmegaConf.create({"actor_rollout_ref": {"rollout": {"custom": None}}}))


# -- the engine's guards ----------------------------------------------------------------------
def test_engine_refuses_flash_attn_in_place_cross_entropy_without_entropy(monkeypatch):
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.utils import torch_functional

    from runners.verl_side.head.engine import actor_config_of, check_no_inplace_cross_entropy

    batch = TensorDict({"x": torch.zeros(2)}, batch_size=[2])
    tu.assign_non_tensor(batch, calculate_entropy=False)
    monkeypatch.setattr(torch_functional, "FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE", False)
    check_no_inplace_cross_entropy(batch)  # no flash-attn (a CPU): verl's torch path, nothing in place
    monkeypatch.setattr(torch_functional, "FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE", True)
    with pytest.raises(RuntimeError, match="backend.actor.calculate_entropy=true"):
        check_no_inplace_cross_entropy(batch)
    monkeypatch.setenv("VERL_DISABLE_FLASH_ATTN_CE", "1")
    check_no_inplace_cross_entropy(batch)
    monkeypatch.delenv("VERL_DISABLE_FLASH_ATTN_CE")
    tu.assign_non_tensor(batch, calculate_entropy=True)
    check_no_inplace_cross_entropy(batch)
    assert actor_config_of(functools.partial(print, config="c")) == "c"
    with pytest.raises(TypeError, match="functools.partial"):
        actor_config_of(print)


def test_engine_is_verls_registered_engine_for_the_vendor_key(monkeypatch):
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    import runners.verl_side.head.plugin  # noqa: F401 - what VERL_USE_EXTERNAL_MODULES imports in every process
    from runners.verl_side.head import ENGINE_VENDOR
    from runners.verl_side.head.engine import HeadEngine

    monkeypatch.setenv("VERL_ENGINE_DEVICE", "cuda")
    monkeypatch.setenv("VERL_ENGINE_VENDOR", ENGINE_VENDOR)
    assert EngineRegistry.get_engine_cls("language_model", "fsdp2") is HeadEngine
    monkeypatch.delenv("VERL_ENGINE_VENDOR")
    assert EngineRegistry.get_engine_cls("language_model", "fsdp2") is FSDPEngineWithLMHead


# -- the vLLM piece on stand-ins of vLLM's objects --------------------------------------------
# (the README's install, vLLM's CPU build included, runs them; without it they skip for this reason, which
# `CI_WITHOUT_VLLM=1 .ci/run` lists)
NO_VLLM = "vLLM is not installed (the [gpu] extra)"


@dataclasses.dataclass
class StandInLogprob:  # vllm.logprobs.Logprob
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclasses.dataclass
class StandInFlat:  # vllm.logprobs.FlatLogprobs: k + 1 entries per position, the sampled token first
    start_indices: list
    end_indices: list
    token_ids: list
    logprobs: list


@dataclasses.dataclass
class StandInParams:  # the SamplingParams fields the piece reads and sets
    extra_args: dict | None = None
    logprobs: int | None = 0
    flat_logprobs: bool = False
    detokenize: bool = True
    stop: list | None = None
    max_tokens: int | None = 8

    def clone(self):
        return dataclasses.replace(self, extra_args=dict(self.extra_args or {}))


def flat(token_ids: list[int], k: int, vocab: int = 20) -> tuple[StandInFlat, np.ndarray]:
    rng = np.random.default_rng(0)
    ids, lps = [], []
    full = np.log(rng.dirichlet(np.ones(vocab), size=len(token_ids)))
    for position, token in enumerate(token_ids):
        order = np.argsort(-full[position])[:k]
        ids += [token, *order.tolist()]
        lps += [float(full[position, token]), *full[position, order].tolist()]
    n = len(token_ids)
    return StandInFlat([i * (k + 1) for i in range(n)], [(i + 1) * (k + 1) for i in range(n)], ids, lps), full


def test_split_flat_reads_the_sampled_token_and_the_head():
    tokens = [3, 7, 7, 1]
    logprobs, full = flat(tokens, K)
    sampled, ids, lps = split_flat(logprobs, tokens, K)
    assert ids.dtype == np.int32 and lps.dtype == np.float32 and ids.shape == (4, K)
    for position, token in enumerate(tokens):
        assert sampled[position] == pytest.approx(full[position, token], abs=1e-6)
        assert ids[position].tolist() == np.argsort(-full[position])[:K].tolist()
    light = sampled_only(tokens, sampled, StandInLogprob)
    assert [light[i][t].logprob for i, t in enumerate(tokens)] == pytest.approx(sampled.tolist())  # verl's read
    logprobs.end_indices[1] -= 1
    with pytest.raises(ValueError, match="k \\+ 1 = 4 entries"):
        split_flat(logprobs, tokens, K)
    with pytest.raises(ValueError, match="start each position with the sampled token"):
        split_flat(flat(tokens, K)[0], [3, 7, 7, 2], K)


def test_ask_for_head_keeps_the_request_and_skips_detokenising_only_without_stop_strings():
    base = StandInParams(extra_args={REQUEST_KEY: K})
    asked = ask_for_head(base, K)
    assert (asked.logprobs, asked.flat_logprobs, asked.detokenize) == (K, True, False) and base.logprobs == 0
    assert ask_for_head(StandInParams(extra_args={REQUEST_KEY: K}, stop=["</s>"]), K).detokenize is True
    assert requested_k(base) == K and requested_k(StandInParams()) == 0 and requested_k({"extra_args": None}) == 0


@dataclasses.dataclass
class StandInCompletion:
    token_ids: list
    logprobs: object
    finish_reason: str | None = None


@dataclasses.dataclass
class StandInRequestOutput:
    outputs: list
    finished: bool


class ScriptedEngine:
    """An AsyncLLM stand-in: streams cumulative outputs of a scripted token list, records what it was asked."""

    def __init__(self, tokens: list[int], finish: bool = True):
        self.tokens, self.finish, self.asked = tokens, finish, []
        self.model_config = "forwarded"

    async def generate(self, prompt, sampling_params, request_id, **kwargs):
        self.asked.append(sampling_params)
        for n in range(1, len(self.tokens) + 1):
            logprobs = flat(self.tokens[:n], K)[0] if sampling_params.flat_logprobs else None
            done = n == len(self.tokens) and self.finish
            yield StandInRequestOutput([StandInCompletion(self.tokens[:n], logprobs)], finished=done)


def _drain(engine: HeadCapturingEngine, params, request_id: str):
    async def run():
        last = None
        async for output in engine.generate("prompt", params, request_id):
            last = output
        return last
    return asyncio.run(run())


@pytest.mark.parametrize("finish", [True, False], ids=["finished", "aborted"])
def test_capturing_engine_takes_the_head_and_leaves_verl_the_sampled_token(finish):
    tokens = [4, 9, 2]
    inner = ScriptedEngine(tokens, finish=finish)
    engine = HeadCapturingEngine(inner, StandInLogprob)
    last = _drain(engine, StandInParams(extra_args={REQUEST_KEY: K}), "req")
    assert inner.asked[0].logprobs == K and inner.asked[0].flat_logprobs
    completion = last.outputs[0]
    assert isinstance(completion.logprobs, list) and [len(d) for d in completion.logprobs] == [1, 1, 1]
    ids, lps = engine.pop_head("req", 3, K)
    assert ids.shape == (3, K) and math.isclose(float(np.exp(lps[0]).sum()) <= 1.0 + 1e-6, True)
    with pytest.raises(RuntimeError, match="no head was captured"):
        engine.pop_head("req", 3, K)  # popped once
    assert engine.pop_head("never-generated", 0, K)[0].shape == (0, K)
    assert engine.model_config == "forwarded"  # everything else is the engine's own

    plain = ScriptedEngine(tokens)
    _drain(HeadCapturingEngine(plain, StandInLogprob), StandInParams(), "other")
    assert plain.asked[0].flat_logprobs is False  # a request without the head is passed through unchanged


class ScriptedFileEngine(ScriptedEngine):
    """A stand-in for vLLM running the head's logits processor: writes row r of the request's head file
    (ids r..r+K-1, log-probs -(0..K-1) - 10 r) as it generates token r, and returns the sampled token's
    log-prob per position as vLLM does for ``logprobs=0`` (the tokens are r + 1: index 1 of row r).
    ``shift=1`` writes row r + 1's content at row r: a head a row off its tokens."""

    def __init__(self, tokens: int, finish: bool = True, shift: int = 0):
        super().__init__([r + 1 for r in range(tokens)], finish)
        self.shift = shift

    async def generate(self, prompt, sampling_params, request_id, **kwargs):
        from runners.verl_side.logits_processor.head_file import FILE_KEY, open_rows

        path = (sampling_params.extra_args or {}).get(FILE_KEY)
        rows = open_rows(path, K, sampling_params.max_tokens) if path else None
        n = 0
        async for output in super().generate(prompt, sampling_params, request_id, **kwargs):
            if rows is not None:
                row = n + self.shift
                rows[0][n], rows[1][n] = np.arange(K) + row, -np.arange(K, dtype=np.float32) - 10 * row
            completion = output.outputs[0]
            completion.logprobs = [{t: StandInLogprob(-1.0 - 10 * r)} for r, t in enumerate(completion.token_ids)]
            n += 1
            yield output


@pytest.mark.parametrize("finish", [True, False], ids=["finished", "aborted"])
def test_capturing_engine_reads_the_head_from_the_logits_processors_file(tmp_path, finish):
    from runners.verl_side.logits_processor.head_file import FILE_KEY

    inner = ScriptedFileEngine(3, finish=finish)
    engine = HeadCapturingEngine(inner, StandInLogprob, head_files=str(tmp_path))
    params = StandInParams(extra_args={REQUEST_KEY: K})
    last = _drain(engine, params, "req")
    asked = inner.asked[0]
    assert asked.extra_args[FILE_KEY] == f"{tmp_path}/req.head" and asked.extra_args[REQUEST_KEY] == K
    assert asked.logprobs == 0 and not asked.flat_logprobs  # the request keeps what verl asked: the sampled token's
    assert params.extra_args == {REQUEST_KEY: K}  # the caller's params are not changed
    assert [list(d) for d in last.outputs[0].logprobs] == [[1], [2], [3]]  # vLLM's own output, untouched
    ids, lps = engine.pop_head("req", 3, K)
    assert ids[:, 0].tolist() == [0, 1, 2] and lps[2, 1] == -21.0
    assert not list(tmp_path.iterdir()), "the head file is removed once taken"


def test_capturing_engine_refuses_a_head_off_its_tokens_and_a_missing_file(tmp_path):
    engine = HeadCapturingEngine(ScriptedFileEngine(3, shift=1), StandInLogprob, head_files=str(tmp_path))
    with pytest.raises(RuntimeError, match="head row 0 is not the distribution token 0 was sampled from"):
        _drain(engine, StandInParams(extra_args={REQUEST_KEY: K}), "shifted")
    with pytest.raises(FileNotFoundError, match="logits processor"):  # an engine without the processor
        _drain(HeadCapturingEngine(ScriptedEngine([4]), StandInLogprob, head_files=str(tmp_path)),
               StandInParams(extra_args={REQUEST_KEY: K}), "no-processor")
    assert not list(tmp_path.iterdir()), "a head file is left after a failed request"


class ScriptedProcessorEngine(ScriptedEngine):
    """A stand-in for vLLM running the logits processor for the sampled log-prob: token r's log-prob -(r + 1) / 4
    is written (count r + 1) one step after token r is yielded, the last one after the stream ends (vLLM's
    removal step, which the front end does not wait for); writes the head file too where one is named."""

    async def generate(self, prompt, sampling_params, request_id, **kwargs):
        from runners.verl_side.logits_processor.head_file import FILE_KEY, open_rows
        from runners.verl_side.logits_processor.sampled_file import SAMPLED_FILE_KEY, open_sampled

        extra = sampling_params.extra_args or {}
        written, values = open_sampled(extra[SAMPLED_FILE_KEY], sampling_params.max_tokens)
        rows = open_rows(extra[FILE_KEY], K, sampling_params.max_tokens) if FILE_KEY in extra else None

        async def removal_step(n):
            await asyncio.sleep(0.02)
            values[n - 1], written[0] = -n / 4, n

        n = 0
        async for output in super().generate(prompt, sampling_params, request_id, **kwargs):
            if n:
                values[n - 1], written[0] = -n / 4, n
            if rows is not None:  # the head's row n holds token n, at the same log-prob
                rows[0][n] = [output.outputs[0].token_ids[n], 90, 91]
                rows[1][n] = [-(n + 1) / 4, -5.0, -6.0]
            n += 1
            if n == len(self.tokens):  # the engine's own step removes the request, whoever waits for what
                self.removal = asyncio.get_running_loop().create_task(removal_step(n))
            yield output


@pytest.mark.parametrize("with_head", [False, True], ids=["pg", "sc"])
@pytest.mark.parametrize("finish", [True, False], ids=["finished", "aborted"])
def test_capturing_engine_gives_verl_the_processors_sampled_log_probs(tmp_path, finish, with_head):
    from runners.verl_side.logits_processor.head_file import FILE_KEY
    from runners.verl_side.logits_processor.sampled_file import SAMPLED_FILE_KEY

    inner = ScriptedProcessorEngine([4, 9, 2], finish=finish)
    engine = HeadCapturingEngine(inner, StandInLogprob, head_files=str(tmp_path), sampled_by_processor=True)
    params = StandInParams(extra_args={REQUEST_KEY: K} if with_head else None)
    last = _drain(engine, params, "req")
    asked = inner.asked[0]
    assert asked.logprobs is None and params.logprobs == 0  # vLLM is asked for none; verl's params unchanged
    assert asked.extra_args[SAMPLED_FILE_KEY] == f"{tmp_path}/req.sampled"
    assert (FILE_KEY in asked.extra_args) is with_head
    logprobs = last.outputs[0].logprobs  # what verl's server reads: one {token: Logprob} per position
    assert [list(d) for d in logprobs] == [[4], [9], [2]]
    assert [d[t].logprob for d, t in zip(logprobs, [4, 9, 2], strict=True)] == [-0.25, -0.5, -0.75]
    if with_head:
        assert engine.pop_head("req", 3, K)[0][:, 1].tolist() == [90, 90, 90]
    assert engine._heads == {} and not list(tmp_path.iterdir())

    plain = ScriptedEngine([4])
    _drain(HeadCapturingEngine(plain, StandInLogprob, head_files=str(tmp_path), sampled_by_processor=True),
           StandInParams(logprobs=None), "eval")
    assert plain.asked[0].extra_args is None  # a request that asks for no log-prob is passed through unchanged
    with pytest.raises(ValueError, match="need its files"):
        HeadCapturingEngine(plain, StandInLogprob, sampled_by_processor=True)


def test_on_vllms_own_classes():
    """The same conversions on vLLM's own FlatLogprobs / Logprob / SamplingParams (GPU extra only)."""
    logprobs_module = pytest.importorskip("vllm.logprobs", reason=NO_VLLM)
    sampling = pytest.importorskip("vllm.sampling_params", reason=NO_VLLM)
    tokens = [3, 7, 1]
    stand_in, full = flat(tokens, K)
    container = logprobs_module.FlatLogprobs()
    for position in range(len(tokens)):
        start, end = stand_in.start_indices[position], stand_in.end_indices[position]
        container.append_fast(stand_in.token_ids[start:end], stand_in.logprobs[start:end], iter(range(end - start)),
                              iter([None] * (end - start)))
    sampled, ids, _ = split_flat(container, tokens, K)
    assert ids[0].tolist() == np.argsort(-full[0])[:K].tolist()
    assert sampled_only(tokens, sampled, logprobs_module.Logprob)[1][7].logprob == pytest.approx(full[1, 7], abs=1e-6)
    params = sampling.SamplingParams(max_tokens=4, logprobs=0, extra_args={REQUEST_KEY: K})
    asked = ask_for_head(params, K)
    assert (asked.logprobs, asked.flat_logprobs, asked.detokenize, params.logprobs) == (K, True, False, 0)


def test_vllm_server_attaches_the_captured_head(monkeypatch):
    """verl's vLLM server and replica subclassed (imports vLLM and verl's vLLM server module: the GPU
    extra); its generate on a scripted parent: the head the engine captured lands in extra_fields."""
    pytest.importorskip("vllm.logprobs", reason=NO_VLLM)
    try:
        from runners.verl_side.head import vllm_server
    except ImportError as err:  # vLLM's Python sources import, its runtime pieces may not on this machine
        pytest.skip(f"verl's vLLM server module does not import here: {err}")
    from verl.workers.rollout.replica import TokenOutput
    from verl.workers.rollout.vllm_rollout import vllm_async_server

    assert issubclass(vllm_server.HeadVLLMReplica, vllm_async_server.vLLMReplica)

    async def parent_generate(self, prompt_ids, sampling_params, request_id, **kwargs):
        self.engine._heads[request_id] = head(2)
        return TokenOutput(token_ids=[5, 6], log_probs=[-1.0, -1.0], stop_reason="completed",
                           extra_fields={"global_steps": 1})

    monkeypatch.setattr(vllm_async_server.vLLMHttpServer, "generate", parent_generate)
    server = object.__new__(vllm_server.HeadVLLMServer)
    server.engine = HeadCapturingEngine(ScriptedEngine([5, 6]), StandInLogprob)
    out = asyncio.run(server.generate([1], {"extra_args": {REQUEST_KEY: K}}, "r"))
    assert out.extra_fields[TOKEN_IDS].tolist() == head(2)[0].tolist()
    plain = asyncio.run(server.generate([1], {}, "s"))
    assert TOKEN_IDS not in plain.extra_fields


def test_vllm_server_uses_head_files_only_with_the_logits_processor_loaded(monkeypatch, tmp_path):
    """The server's transport follows vLLM's ``--logits-processors`` (set by ``head_transport``)."""
    import argparse

    pytest.importorskip("vllm.logprobs", reason=NO_VLLM)
    try:
        from runners.verl_side.head import vllm_server
    except ImportError as err:
        pytest.skip(f"verl's vLLM server module does not import here: {err}")
    from verl.workers.rollout.vllm_rollout import vllm_async_server

    from runners.verl_side.logits_processor import (
        FILES_ENV,
        LOG_PROB_CUSTOM_KEY,
        LOG_PROBS_BY_PROCESSOR,
        PROCESSOR,
    )

    async def parent_run_server(self, args):
        self.engine = ScriptedEngine([1])

    monkeypatch.setattr(vllm_async_server.vLLMHttpServer, "run_server", parent_run_server)
    monkeypatch.setenv(FILES_ENV, str(tmp_path / "heads"))
    server = object.__new__(vllm_server.HeadVLLMServer)
    server.config = OmegaConf.create({"custom": None})
    asyncio.run(server.run_server(argparse.Namespace(logits_processors=[PROCESSOR])))
    assert server.engine._head_files == str(tmp_path / "heads") and (tmp_path / "heads").is_dir()
    assert not server.engine._sampled_by_processor
    for args in (argparse.Namespace(logits_processors=None), argparse.Namespace()):
        asyncio.run(server.run_server(args))
        assert server.engine._head_files is None
    # log_prob_transport=logits_processor: the launcher's switch in rollout.custom, with the processor loaded
    server.config = OmegaConf.create({"custom": {LOG_PROB_CUSTOM_KEY: LOG_PROBS_BY_PROCESSOR}})
    asyncio.run(server.run_server(argparse.Namespace(logits_processors=[PROCESSOR])))
    assert server.engine._sampled_by_processor
    with pytest.raises(RuntimeError, match="needs the engine argument logits_processors"):
        asyncio.run(server.run_server(argparse.Namespace(logits_processors=None)))
