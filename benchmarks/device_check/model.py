"""Part "model_memory": the measured trainer memory of a Qwen3 model built from its config, random weights.

One trainer GPU without sharding (``dp_size = 1``), as verl's FSDP actor holds a model: fp32 master
weights, bf16 compute (``torch.autocast``), gradient checkpointing (non-reentrant), fp32 gradients and
fp32 AdamW states (torch's default AdamW: foreach on CUDA). Each step: one packed sequence of
``tokens`` random ids, the logits, the sampled tokens' log-probs with the project's chunked gather
(``head_log_probs``, k = 1; the logits are not upcast), a PG loss, backward, ``optimizer.step()``,
``zero_grad(set_to_none=True)``. Measured per (model, tokens) after warm-up steps (the first creates
the AdamW states): the state bytes counted from the tensors themselves, the allocated bytes at the
forward's start (``static``: weights + AdamW states), the peak over forward + backward and over the
optimizer step (:class:`.measure.Meter`), and their times. Nothing here reads the capacity plan;
``.capacity`` compares the plan's terms with these rows.

GPU memory (GB = 1e9 bytes; 16 bytes per parameter of states: fp32 weight, grad, two AdamW moments):
Qwen3-0.6B (0.60 B params) 9.5 GB states + bf16 autocast weight copies 1.2 GB + at 16,384 tokens
fp32 checkpointed layer inputs 28 x 16,384 x 1,024 x 4 = 1.9 GB, one recomputed layer ~1 GB, bf16
logits and their grad 2 x 4.98 GB, fp32 chunk block 0.62 GB -> ~25 GB; Qwen3-1.7B (1.72 B) 27.5 GB
states + 3.4 GB copies + 3.8 GB layer inputs + ~2 GB recompute + 10.6 GB logits -> ~48 GB. (Qwen3-4B,
4.02 B params, needs 64 GB of states alone and is not run: above a part's limit.)
"""

from __future__ import annotations

import torch

from ablations.score_centering import head_log_probs
from runners.config.model_shapes import PUBLISHED, ModelShape

from .measure import Budget, Clock, Meter, PartSkipped, check_fits, free_memory, is_oom, median

_HF = {"max_position_embeddings": 40_960, "rms_norm_eps": 1e-6}
#: Published shapes (``runners.config.model_shapes``, the models' config.json), and a tiny one for --cpu-small.
SHAPES: dict[str, dict] = {
    "Qwen3-0.6B": {**PUBLISHED["Qwen/Qwen3-0.6B"].as_dict(), **_HF},
    "Qwen3-1.7B": {**PUBLISHED["Qwen/Qwen3-1.7B"].as_dict(), **_HF},
    "tiny-qwen3": {"vocab_size": 32_000, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "head_dim": 16, "tie_word_embeddings": True, "max_position_embeddings": 4096,
                   "rms_norm_eps": 1e-6, "hidden_size": 64, "intermediate_size": 128},
}


def parameter_count(shape: dict) -> int:
    """Parameters of a Qwen3 decoder of this shape (:class:`runners.config.model_shapes.ModelShape`)."""
    return ModelShape.from_config(shape).parameters


def estimate_bytes(shape: dict, tokens: int, chunk_rows: int) -> int:
    """Upper estimate of a step's peak: states, bf16 weight copies, checkpointed activations, logits."""
    params = parameter_count(shape)
    h, inter = shape["hidden_size"], shape["intermediate_size"]
    per_token = shape["num_hidden_layers"] * h * 4 + 2 * shape["vocab_size"] * 2 + 16 * h * 4 + 4 * inter * 2
    return 18 * params + tokens * per_token + 2 * chunk_rows * shape["vocab_size"] * 4


def build(shape: dict, device: torch.device) -> torch.nn.Module:
    """``Qwen3ForCausalLM`` from a ``Qwen3Config`` of ``shape``: random fp32 weights on ``device``,
    gradient checkpointing on, training mode."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(**shape, use_cache=False)
    with torch.device(device):
        model = Qwen3ForCausalLM(config)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model.train()


def _state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    params = list(model.parameters())
    optim = sum(t.numel() * t.element_size() for state in optimizer.state.values()
                for t in state.values() if torch.is_tensor(t))
    return {"param_bytes": sum(p.numel() * p.element_size() for p in params),
            "grad_bytes": sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None),
            "optimizer_state_bytes": optim}


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, tokens: int, chunk_rows: int,
               clock: Clock, meter: Meter, gen: torch.Generator, device: torch.device) -> dict:
    """One step; its times, peaks, state bytes and logits dtype."""
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (1, tokens + 1), device=device, generator=gen)
    advantages = torch.randn(tokens, device=device, generator=gen)
    meter.start()
    static = meter.base
    t0 = clock.mark()
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
        logits = model(input_ids=ids[:, :-1]).logits
    log_prob = head_log_probs(logits[0], ids[0, 1:, None], chunk_rows=chunk_rows)[:, 0]
    loss = -(advantages * log_prob).mean()
    t1 = clock.mark()
    loss.backward()
    t2 = clock.mark()
    logits_dtype = str(logits.dtype).removeprefix("torch.")
    del logits, log_prob, loss
    forward_backward = meter.stop()
    states = _state_bytes(model, optimizer)
    meter.start()
    t3 = clock.mark()
    optimizer.step()
    t4 = clock.mark()
    step_peak = meter.stop()
    states["optimizer_state_bytes"] = _state_bytes(model, optimizer)["optimizer_state_bytes"]
    optimizer.zero_grad(set_to_none=True)
    return {"forward_ms": clock.ms(t0, t1), "backward_ms": clock.ms(t1, t2), "step_ms": clock.ms(t3, t4),
            "static_bytes": static, "forward_backward": forward_backward, "optimizer_step": step_peak,
            "logits_dtype": logits_dtype, **states}


def run(device: torch.device, *, models: tuple[str, ...], tokens: tuple[int, ...], chunk_rows: int,
        warmup: int, repeats: int, budget: Budget, limit_bytes: int) -> dict:
    """Measured rows per (model, tokens); a row that could not run carries ``skipped`` (its reason).

    Each row: ``model``, ``shape`` (the Qwen3 config dict), ``parameters``, ``tokens``, the state bytes
    (``param_bytes``, ``grad_bytes``, ``optimizer_state_bytes``, ``model_state_bytes``), ``static_bytes``,
    ``peak_forward_backward_bytes``, ``peak_optimizer_step_bytes``, ``peak_bytes`` (their max),
    ``activation_peak_bytes`` (forward + backward peak above static), times (medians), ``repeats``.
    """
    clock, meter = Clock(device), Meter(device)
    rows: list[dict] = []
    notes: list[str] = []
    for name in models:
        shape = SHAPES[name]
        base = {"model": name, "shape": shape, "parameters": parameter_count(shape)}
        try:
            check_fits(name, estimate_bytes(shape, min(tokens), chunk_rows), device, limit_bytes)
            if budget.spent():
                raise PartSkipped(f"{name}: time budget of {budget.seconds:.0f} s spent before building it")
            model = build(shape, device)
        except Exception as exc:
            if not (isinstance(exc, PartSkipped) or is_oom(exc)):
                raise
            rows += [{**base, "tokens": n, "skipped": _reason(exc)} for n in tokens]
            free_memory(device.type == "cuda")
            continue
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
        attn = getattr(model.config, "_attn_implementation", None)
        gen = torch.Generator(device=device).manual_seed(2)
        for n in tokens:
            row = {**base, "parameters": sum(p.numel() for p in model.parameters()), "tokens": n,
                   "attn_implementation": attn}
            try:
                check_fits(f"{name} at {n} tokens", estimate_bytes(shape, n, chunk_rows), device, limit_bytes)
                row.update(_measure(model, optimizer, n, chunk_rows, clock, meter, gen, device,
                                    warmup, repeats, budget, notes, name))
            except Exception as exc:
                if not (isinstance(exc, PartSkipped) or is_oom(exc)):
                    raise
                optimizer.zero_grad(set_to_none=True)
                row["skipped"] = _reason(exc)
            rows.append(row)
            free_memory(device.type == "cuda")
        del model, optimizer
        free_memory(device.type == "cuda")
    if all("skipped" in row for row in rows):
        raise PartSkipped("; ".join(sorted({row["skipped"] for row in rows})))
    return {"sizes": {"models": list(models), "tokens": list(tokens), "chunk_rows": chunk_rows,
                      "warmup": warmup, "repeats": repeats, "precision": "fp32 weights, bf16 autocast",
                      "optimizer": "torch.optim.AdamW (defaults)", "gradient_checkpointing": True,
                      "dp_size": 1},
            "rows": rows, "notes": notes}


def _measure(model, optimizer, tokens, chunk_rows, clock, meter, gen, device, warmup, repeats, budget,
             notes, name) -> dict:
    steps: list[dict] = []
    for index in range(warmup + repeats):
        if budget.spent():
            notes.append(f"{name} at {tokens} tokens: time budget of {budget.seconds:.0f} s spent after "
                         f"{max(index - warmup, 0)} of {repeats} timed steps")
            break
        step = train_step(model, optimizer, tokens, chunk_rows, clock, meter, gen, device)
        if index >= warmup:
            steps.append(step)
    if not steps:
        raise PartSkipped(f"{name} at {tokens} tokens: time budget spent before a timed step")
    last = steps[-1]

    def peak(part: str, key: str) -> int | None:
        values = [s[part][key] for s in steps if s[part].get(key) is not None]
        return max(values) if values else None

    fwd_bwd, opt_step = peak("forward_backward", "peak_bytes"), peak("optimizer_step", "peak_bytes")
    peaks = [p for p in (fwd_bwd, opt_step) if p is not None]
    return {
        "repeats": len(steps), "logits_dtype": last["logits_dtype"],
        "param_bytes": last["param_bytes"], "grad_bytes": last["grad_bytes"],
        "optimizer_state_bytes": last["optimizer_state_bytes"],
        "model_state_bytes": last["param_bytes"] + last["grad_bytes"] + last["optimizer_state_bytes"],
        "static_bytes": last["static_bytes"],
        "peak_forward_backward_bytes": fwd_bwd, "peak_optimizer_step_bytes": opt_step,
        "peak_bytes": max(peaks) if peaks else None,
        "peak_reserved_bytes": peak("forward_backward", "peak_reserved_bytes"),
        "activation_peak_bytes": None if fwd_bwd is None else fwd_bwd - last["static_bytes"],
        "forward_ms": median(s["forward_ms"] for s in steps), "backward_ms": median(s["backward_ms"] for s in steps),
        "step_ms": median(s["step_ms"] for s in steps),
    }


def _reason(exc: BaseException) -> str:
    if isinstance(exc, PartSkipped):
        return str(exc)
    return f"out of memory: {str(exc).splitlines()[0][:200]}"
