"""Gradient bias of each arm under a fixed sampler mismatch, by Monte Carlo, without training.

For one fixed model (the base model of the run config, by default the scratchpad miniature's) and
one fixed prompt stream:

* the **on-policy gradient** ``g_on = E_p[A grad log p(a)]``: responses sampled from the trainer
  itself (fp32, no mismatch), the PG loss;
* each arm's **off-policy gradient** ``g_arm``: responses sampled from a mismatched sampler (same
  prompts), the arm's registered loss (verl's registry: PG, TIS, SC, SC+TIS), with the sampler's
  log-probs and top-k head as in training.

Both are averaged over ``--batches`` batches (GRPO groups, group-mean advantages), batch b of every
sampler drawing from the same random stream (common random numbers). The estimates
are debiased for Monte Carlo noise with the Gram matrix of the per-batch gradients: with
``d_b = g_arm,b - g_on,b`` (paired: same prompts), ``||E d||^2`` is estimated by
``(||sum d_b||^2 - sum ||d_b||^2) / (B (B - 1))``, and ``<E g_arm, E g_on>`` and ``||E g||^2``
likewise from off-diagonal pairs only. Reported per arm and mismatch level: the relative bias
``||E g_arm - E g_on|| / ||E g_on||`` and the cosine ``cos(E g_arm, E g_on)``, each with a 90%
bootstrap interval over batches. Levels "grow" along two axes: a 4..2-bit KV cache, and a
fixed-direction weight perturbation (one Gaussian draw, scaled by ``sigma x std(tensor)``: a
systematic error, unlike the embedded scenarios' noise redrawn at each sync).

    python benchmarks/arms/gradient_bias.py                      # writes docs/gradient_bias.{json,png}
    python benchmarks/arms/gradient_bias.py --batches 8 --levels kv4 --out /tmp/gb   # a quick look
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

ARMS = ("pg", "tis", "sc", "sc_tis")
#: mismatch levels: name -> (kv-cache bits, fixed-direction weight perturbation sigma, compute dtype)
LEVELS = {
    "bf16": (0, 0.0, "bfloat16"),
    "kv8": (8, 0.0, "float32"),
    "kv4": (4, 0.0, "float32"),
    "kv3": (3, 0.0, "float32"),
    "kv2": (2, 0.0, "float32"),
    "dir0.05": (0, 0.05, "float32"),
    "dir0.1": (0, 0.1, "float32"),
    "dir0.2": (0, 0.2, "float32"),
    "dir0.4": (0, 0.4, "float32"),
}
DEFAULT_LEVELS = ("bf16", "kv8", "kv4", "kv3", "kv2")


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        return hydra_compose(config_name="config", overrides=overrides)


def perturbed_state(model, sigma: float, seed: int) -> dict:
    """The model's weights plus ``sigma x std(tensor) x z``, one fixed draw ``z`` per tensor."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    out = {}
    for name, tensor in model.state_dict().items():
        w = tensor.detach().clone()
        if sigma > 0 and w.is_floating_point():
            w = w + sigma * w.std() * torch.randn(w.shape, generator=generator, dtype=w.dtype)
        out[name] = w
    return out


def make_sampler(model, tokenizer, cfg, level: str | None):
    """A sampler holding ``model``'s weights: exact (level None) or with the level's mismatch."""
    from omegaconf import OmegaConf

    from runners.embedded.sampler import Sampler, quantise_kv_cache

    sampler_cfg = OmegaConf.merge(cfg.backend.sampler, {
        "weight_dtype": "float32", "int8_weights": False, "weight_noise": 0.0,
        "compute_dtype": "float32", "kv_cache_bits": 0, "logits_dtype": "float32"})
    bits, sigma, compute = LEVELS[level] if level else (0, 0.0, "float32")
    sampler_cfg.compute_dtype = compute
    sampler = Sampler(model, tokenizer, sampler_cfg, int(cfg.method.top_k))
    sampler.model.load_state_dict(perturbed_state(model, sigma, seed=1234))
    if bits:
        quantise_kv_cache(sampler.model, bits)  # any bit width, not only the config's 8 / 4
    return sampler


def batch_gradients(model, trainer_cfgs, batch, pad_id, temperature, arms
                    ) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Flattened parameter gradient of each arm's loss on ``batch`` (one forward, one backward per arm), and
    the batch's mismatch from the same forward: ``kl`` (k1 estimate of KL(q || p) over response tokens) and
    ``tail`` (the sampler's mass outside its head)."""
    import torch

    from ablations.score_centering import centering_term, head_log_probs
    from runners.embedded.trainer import response_logits

    rollout = batch.rollout
    params = [p for p in model.parameters() if p.requires_grad]
    mask = rollout.response_mask
    logits = response_logits(model, rollout, pad_id, temperature)
    log_prob = head_log_probs(logits, rollout.response_ids[..., None]).squeeze(-1)
    train_head = head_log_probs(logits, rollout.head_ids)
    tokens = int(mask.sum())
    out = {}
    for arm in arms:
        loss_fn, config, cap, sc = trainer_cfgs[arm]
        config.global_batch_info.clear()
        config.global_batch_info.update({"dp_size": 1, "batch_num_tokens": tokens})
        kwargs = {}
        if sc:
            kwargs["sc_correction"] = centering_term(train_head, rollout.head_log_probs, is_cap=cap)[0]
        loss, _ = loss_fn(old_log_prob=rollout.log_probs, log_prob=log_prob, advantages=batch.advantages,
                          response_mask=mask, loss_agg_mode="token-mean", config=config, **kwargs)
        grads = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
        out[arm] = torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1)
                              for g, p in zip(grads, params, strict=True)]).double().numpy()
    with torch.no_grad():
        live = mask.bool()
        stats = {"kl": float((rollout.log_probs - log_prob)[live].mean()),
                 "tail": float((1 - rollout.head_log_probs.exp().sum(-1))[live].mean())}
    return out, stats


def sample_batches(sampler, task, tokenizer, cfg, prompts_per_batch: int, batches: int, seed: int):
    """``batches`` batches from ``sampler`` on the fixed prompt stream ``seed``.

    Batch b samples with its own stream (seeded by ``seed`` and b), the same for every sampler:
    common random numbers, so an off-policy batch and its on-policy twin mostly draw the same tokens
    and their gradient difference ``d_b`` is far less noisy than either gradient.
    """
    import torch

    from runners.embedded.replay_buffer import Group
    from runners.embedded.trainer import make_batch
    from runners.tiny.arithmetic_task import prompt_token_ids

    data_gen = torch.Generator().manual_seed(seed)
    n = int(cfg.trainer.n)
    for b in range(batches):
        sample_gen = torch.Generator().manual_seed(seed * 1_000_003 + b + 1)
        problems = task.sample_train(data_gen, prompts_per_batch)
        rollout = sampler.generate([prompt_token_ids(tokenizer, p) for p in problems], n,
                                   int(cfg.rollout.max_response_length), float(cfg.rollout.temperature), sample_gen)
        lengths = rollout.response_mask.sum(-1).long().tolist()
        groups = []
        for g, problem in enumerate(problems):
            rows = range(g * n, (g + 1) * n)
            scored = [task.score(tokenizer.decode(rollout.response_ids[r, : lengths[r]].tolist(),
                                                  skip_special_tokens=True), problem) for r in rows]
            groups.append(Group(problem=problem, version=0, rollout=rollout.rows(slice(g * n, (g + 1) * n)),
                                scores=[s for s, _ in scored], accs=[a for _, a in scored]))
        yield make_batch(groups, 0, tokenizer.pad_token_id)


def bias_summary(g_on: np.ndarray, g_arm: np.ndarray, rng: np.random.Generator, boot: int = 400) -> dict:
    """Debiased relative bias and cosine of ``g_arm`` vs ``g_on`` (rows = paired batches), with 90% intervals."""
    count = len(g_on)
    gram_on = g_on @ g_on.T
    gram_arm = g_arm @ g_arm.T
    cross = g_arm @ g_on.T

    def stats(index: np.ndarray) -> tuple[float, float]:
        def off_diagonal_mean(gram: np.ndarray) -> float:
            sub = gram[np.ix_(index, index)]
            same = index[:, None] == index[None, :]  # a resampled batch paired with itself is not independent
            return float(sub[~same].mean())

        on_sq = off_diagonal_mean(gram_on)
        arm_sq = off_diagonal_mean(gram_arm)
        inner = off_diagonal_mean(cross)
        diff_sq = arm_sq + on_sq - 2 * inner
        relative = np.sqrt(max(diff_sq, 0.0) / on_sq) if on_sq > 0 else float("nan")
        cosine = inner / np.sqrt(on_sq * arm_sq) if on_sq > 0 and arm_sq > 0 else float("nan")
        return relative, cosine

    relative, cosine = stats(np.arange(count))
    draws = np.array([stats(rng.integers(0, count, count)) for _ in range(boot)])
    lo, hi = np.nanpercentile(draws, [5, 95], axis=0)
    return {"relative_bias": relative, "relative_bias_90": [lo[0], hi[0]],
            "cosine": cosine, "cosine_90": [lo[1], hi[1]]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=32, help="batches per level (and on-policy)")
    parser.add_argument("--prompts", type=int, default=16, help="prompt groups per batch")
    parser.add_argument("--levels", nargs="+", default=list(DEFAULT_LEVELS), choices=sorted(LEVELS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0, help="prompt stream")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "gradient_bias")
    parser.add_argument("-o", "--override", action="append", default=["+experiment=scratchpad"],
                        help="Hydra override of the run config (repeatable; default +experiment=scratchpad)")
    args = parser.parse_args(argv)
    if args.batches < 3:
        parser.error("--batches must be >= 3 (the debiased estimates need pairs of batches)")

    import torch
    from tqdm import tqdm
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    from ablations.arms import ArmSpec
    from runners.embedded.base_checkpoint import load_base_model_for
    from runners.embedded.trainer import actor_config
    from runners.tiny.task_by_name import build_task

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    base_cfg = compose(args.override)
    model, tokenizer, source = load_base_model_for(base_cfg, ROOT / "results" / ".cache")
    model.train()
    task = build_task(base_cfg.data)
    trainer_cfgs = {}
    for arm in ARMS:
        method = compose([*args.override, f"method={arm}"]).method
        spec = ArmSpec.of(method)
        trainer_cfgs[arm] = (get_policy_loss_fn(method.loss_mode), actor_config(method), spec.tis_cap, spec.sc)
    temperature = float(base_cfg.rollout.temperature)
    pad_id = tokenizer.pad_token_id

    def gradients(level: str | None, arms: tuple[str, ...]) -> dict[str, np.ndarray]:
        sampler = make_sampler(model, tokenizer, base_cfg, level)
        rows: dict[str, list[np.ndarray]] = {arm: [] for arm in arms}
        stats = {"kl": [], "tail": []}
        batches = sample_batches(sampler, task, tokenizer, base_cfg, args.prompts, args.batches, args.seed)
        for batch in tqdm(batches, total=args.batches, desc=level or "on-policy", leave=False):
            grads, batch_stats = batch_gradients(model, trainer_cfgs, batch, pad_id, temperature, arms)
            for arm, grad in grads.items():
                rows[arm].append(grad)
            for key, value in batch_stats.items():
                stats[key].append(value)
        result = {arm: np.stack(v) for arm, v in rows.items()}
        result["_stats"] = {k: float(np.mean(v)) for k, v in stats.items()}
        return result

    on = gradients(None, ("pg",))
    rng = np.random.default_rng(0)
    gram = on["pg"] @ on["pg"].T
    off_diagonal = ~np.eye(len(gram), dtype=bool)
    report = {"source": source, "overrides": args.override, "batches": args.batches, "prompts": args.prompts,
              "n": int(base_cfg.trainer.n), "top_k": int(base_cfg.method.top_k), "levels": {},
              # the resolution: ||E g_on||^2 (debiased) against the squared norm of one batch's gradient
              "on_policy": {"sq_norm_of_mean_gradient": float(gram[off_diagonal].mean()),
                            "mean_sq_norm_of_batch_gradient": float(np.diag(gram).mean())}}
    for level in args.levels:
        off = gradients(level, ARMS)
        report["levels"][level] = {"kl_q_p": off["_stats"]["kl"], "tail_mass_sampler": off["_stats"]["tail"],
                                   **{arm: bias_summary(on["pg"], off[arm], rng) for arm in ARMS}}
        row = "  ".join(f"{arm} {report['levels'][level][arm]['relative_bias']:.3f}" for arm in ARMS)
        print(f"{level:8s} KL(q||p) {off['_stats']['kl']:.4f}  relative bias: {row}", flush=True)
    report["seconds"] = round(time.perf_counter() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    plot(report, args.out.with_suffix(".png"))
    print(f"wrote {args.out.with_suffix('.json')} and .png in {report['seconds']} s")
    return 0


def plot(report: dict, path: Path) -> None:
    """Relative bias and cosine per arm, one group of points per mismatch level (90% intervals)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = list(report["levels"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for offset, arm in enumerate(ARMS):
        x = np.arange(len(levels)) + (offset - 1.5) * 0.18
        for ax, key in zip(axes, ("relative_bias", "cosine"), strict=True):
            values = [report["levels"][lv][arm][key] for lv in levels]
            bands = np.array([report["levels"][lv][arm][f"{key}_90"] for lv in levels]).T
            ax.errorbar(x, values, yerr=[np.subtract(values, bands[0]), np.subtract(bands[1], values)],
                        fmt="o", capsize=2, label=arm)
    axes[0].set_ylabel("||E g_arm - E g_on|| / ||E g_on||")
    axes[1].set_ylabel("cos(E g_arm, E g_on)")
    for ax in axes:
        ax.set_xticks(range(len(levels)), [f"{lv}\nKL {report['levels'][lv]['kl_q_p']:.3f}" for lv in levels],
                      fontsize=7)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Gradient bias vs the on-policy gradient ({report['batches']} batches of {report['prompts']}x"
                 f"{report['n']}, top-k {report['top_k']}, debiased, 90% bootstrap)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
