"""verl's own actor worker on a CPU: the test bench of the verl backend (one arm per process).

``python tests/integration/verl_cpu_bench.py <arm> <report.json>`` does, in a fresh process, what
the V1 ``separate_async`` trainer does for one ``update_actor`` call, through verl's code:

1. composes the arm's config with the project's launcher code (``runners.verl_side.backend.launch.build_spec``:
   the same override list the dry run writes) for ``+experiment=qwen3_4b_sc_repro method=<arm>``, with
   :data:`CPU_OVERRIDES` appended (a tiny local model instead of Qwen3-4B, and what a CPU needs);
2. runs ``verl.trainer.main_ppo.main`` (verl's Hydra main: ``auto_set_device``, ``validate_config``)
   up to ``run_ppo``, which is replaced by a function that keeps the config;
3. builds ``DetachActorWorker(config.actor_rollout_ref, role="actor")`` (the worker class the
   separate_async trainer uses), ``init_model()`` (config conversion, loss selection, FSDP2 engine,
   AdamW), then one ``update_actor`` on a mini-batch in the V1 agent loop's TransferQueue layout
   (``list_of_dict_to_tensordict`` of per-sample dicts, GRPO advantages from verl's function,
   ``old_log_probs`` = the sampler's log-probs as in bypass mode, the trainer's ``extra_info``);
4. writes a JSON report: the loss function the worker resolved, the engine's metrics, an independent
   fp32 reference of the loss from plain forwards, and how much the parameters moved.

The CPU shims (nothing patched inside verl):

* the project's CPU platform (:mod:`runners.verl_side.platform.rehearsal`, the same as the rehearsal's), registered
  through verl's own ``PlatformRegistry`` by the ``verl.plugins`` entry point and selected with
  ``VERL_PLATFORM=cpu``: device ``cpu``, communication backend ``gloo``, memory queries 0;
  ``VERL_ENGINE_DEVICE=cuda``: verl registers its FSDP engine for cuda/npu device names only;
* the default process group (gloo, world size 1) is created before the worker, because verl's own
  initialiser asks for ``cpu:gloo,<device>:<backend>``, a duplicate on a CPU;
* ``checkpoint_engine.backend=naive`` (nccl needs cupy), ``attn_implementation=sdpa`` (no
  flash-attn), no ``torch.compile``, 256 tokens per micro-batch (several micro-batches per step); and ``backend.actor.dtype=float32`` (the project's knob for
  the engine's compute dtype) so the engine can be compared with the reference to float32
  rounding (bf16 agrees to about 0.1%).

Sampler: the model's logits plus fixed Gaussian noise per position (:data:`SAMPLER_NOISE`), so
``p(a)/q(a)`` spreads well past the TIS cap and the top-k head misses real mass. For SC arms the
sampler's top-k ids and log-probs are laid over each sequence as the arm's head transport delivers
them (response token r at row ``prompt_length - 1 + r``): on verl 0.9.1 the project's
(``runners.verl_side.head.head_layout.sequence_head``, read by the head engine verl's registry gives for
``VERL_ENGINE_VENDOR``), on verl 8718ca30 verl's own (``score_centering.pad_rollout_topk``).
"""

from __future__ import annotations

import copy
import json
import math
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SAMPLER_NOISE = 1.0  # sd of the Gaussian noise added to the sampler's logits
VOCAB = 300  # > top_k = 128: the proportional-tail model is exercised
SEED = 0

CPU_OVERRIDES = (
    "++actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    "actor_rollout_ref.rollout.checkpoint_engine.backend=naive",
    # ~850 tokens in 160 sequences: 256 tokens per micro-batch splits the mini-batch into several, so
    # the token mean over micro-batches (verl's global_batch_info) is exercised, as on the GPUs
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=256",
)
#: Project-level swaps: fp32 compute so the engine can be compared with the reference to rounding; no
#: torch.compile (the project's knob reaches verl's engine too: inductor would compile for ~25 s on a CPU).
CPU_PROJECT_OVERRIDES = ("backend.actor.dtype=float32", "backend.actor.use_torch_compile=false")


def _environment() -> None:
    """The CPU platform (``runners.verl_side.platform.rehearsal``, registered by its ``verl.plugins`` entry point at
    ``import verl``) and a world of one process."""
    from runners.verl_side.platform import rehearsal as verl_cpu

    for key, value in verl_cpu.ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    for key, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}.items():
        os.environ.setdefault(key, value)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        os.environ.setdefault("MASTER_PORT", str(s.getsockname()[1]))


def tiny_model(out: Path):
    """A 2-layer Qwen3 from a config, saved with the project's character tokenizer."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from runners.tiny.tokenizer import build_tokenizer

    tok = build_tokenizer()
    config = Qwen3Config(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, intermediate_size=128, max_position_embeddings=128, tie_word_embeddings=True, initializer_range=0.2,
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.pad_token_id,
    )
    torch.manual_seed(SEED)
    model = Qwen3ForCausalLM(config).eval()
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return model


def verl_overrides(arm: str, tmp: Path, model_dir: Path) -> tuple[list[str], object, dict[str, str]]:
    """The launcher's override list for the reference experiment's arm, plus the CPU swaps; the
    project config; the launch's environment."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from runners.verl_side.backend import launch
    from runners.verl_side.backend.verl_run import VerlRun

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[
            "+experiment=qwen3_4b_sc_repro", f"method={arm}",
            f"results_root={tmp / 'results'}", f"data.dir={tmp / 'data'}", *CPU_PROJECT_OVERRIDES,
        ])
    OmegaConf.resolve(cfg)
    spec = launch.build_spec(VerlRun.of(cfg), Path(cfg.results_root) / cfg.sweep / cfg.run_name)
    return [*spec.overrides, f"actor_rollout_ref.model.path={model_dir}", *CPU_OVERRIDES], cfg, spec.env


def driver_config(overrides: list[str]):
    """verl's Hydra main (device, ``validate_config``) up to ``run_ppo``; returns the config it got."""
    from verl.trainer import main_ppo

    from runners.verl_side.backend import dry_run
    from runners.verl_side.backend.dry_run import compose_verl

    native, _ = dry_run.split(overrides)  # keys only newer verl has are composed only where they exist
    composed = compose_verl(native)
    captured = {}
    real = main_ppo.run_ppo
    main_ppo.run_ppo = lambda config, task_runner_class: captured.update(config=config, runner=task_runner_class)
    try:
        main_ppo.main.__wrapped__(composed)
    finally:
        main_ppo.run_ppo = real
    runner = captured["runner"]
    return captured["config"], getattr(runner, "__ray_metadata__", None) and runner.__ray_metadata__.class_name or repr(runner)


def mini_batch(model, cfg, project_cfg):
    """One V1 mini-batch (TransferQueue layout) sampled from a noisy copy of ``model``; and its reference terms."""
    import numpy as np
    import torch
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import response_to_nested

    n = int(cfg.actor_rollout_ref.rollout.n)
    prompts = int(cfg.data.train_batch_size)
    temperature = float(cfg.actor_rollout_ref.rollout.temperature)
    score_centering = bool(project_cfg.method.score_centering)
    k = int(project_cfg.method.top_k)
    gen = torch.Generator().manual_seed(SEED + 1)
    def sampler_log_probs(ids, noise):
        """The sampler: the model's logits plus fixed Gaussian noise per position (its own numerics)."""
        with torch.no_grad():
            logits = model(ids.unsqueeze(0)).logits[0].float()
            return torch.log_softmax((logits + noise[: len(ids)]) / temperature, -1)

    samples, terms = [], []
    for i in range(prompts):
        p_len = int(torch.randint(4, 9, (1,), generator=gen))
        prompt = torch.randint(6, VOCAB, (p_len,), generator=gen)
        rewards = torch.randint(0, 2, (n,), generator=gen).float() * 2 - 1
        for j in range(n):
            r_len = int(torch.randint(2, 9, (1,), generator=gen))
            noise = SAMPLER_NOISE * torch.randn(p_len + r_len, VOCAB, generator=gen)
            ids = prompt.clone()
            for _ in range(r_len):
                next_q = sampler_log_probs(ids, noise)[-1].exp()
                ids = torch.cat([ids, torch.multinomial(next_q, 1, generator=gen)])
            q = sampler_log_probs(ids, noise)[p_len - 1 : p_len - 1 + r_len]
            response = ids[p_len:]
            sampled = q.gather(-1, response.unsqueeze(-1)).squeeze(-1)
            rm_scores = torch.zeros(r_len)
            rm_scores[-1] = rewards[j]
            sample = {
                "prompts": prompt, "responses": response, "response_mask": torch.ones(r_len, dtype=torch.int64),
                "rollout_log_probs": sampled, "rm_scores": rm_scores, "input_ids": ids,
                "attention_mask": torch.ones(p_len + r_len, dtype=torch.int64),
                "position_ids": torch.arange(p_len + r_len), "loss_mask": torch.ones(r_len, dtype=torch.int64),
                "uid": f"prompt-{i}",
            }
            head = q.topk(k, dim=-1)
            if score_centering and verls_own_transport():
                from verl.trainer.ppo.score_centering import pad_rollout_topk

                sample["rollout_topk_ids"], sample["rollout_topk_log_probs"] = pad_rollout_topk(
                    head.indices, head.values, p_len
                )
            elif score_centering:
                from runners.verl_side.head import SEQUENCE_IDS, SEQUENCE_LOG_PROBS
                from runners.verl_side.head.head_layout import sequence_head

                sample[SEQUENCE_IDS], sample[SEQUENCE_LOG_PROBS] = sequence_head(
                    head.indices.numpy(), head.values.numpy(), p_len, r_len)
            samples.append(sample)
            terms.append({"ids": ids, "p_len": p_len, "sampled": sampled, "reward": float(rewards[j]),
                          "group": rewards, "head_ids": head.indices, "head_log_probs": head.values})
    td = tu.list_of_dict_to_tensordict(samples)
    # what the trainer adds before update_actor: GRPO advantages (no std) and, in bypass mode,
    # old_log_probs = rollout_log_probs
    padded = td.select("response_mask", "rm_scores").to_padded_tensor()
    uids = np.array([s["uid"] for s in samples], dtype=object)
    adv, ret = compute_grpo_outcome_advantage(
        padded["rm_scores"], padded["response_mask"], uids,
        norm_adv_by_std_in_grpo=bool(cfg.algorithm.norm_adv_by_std_in_grpo),
    )
    td["advantages"] = response_to_nested(adv, td["response_mask"])
    td["returns"] = response_to_nested(ret, td["response_mask"])
    td["old_log_probs"] = td.pop("rollout_log_probs")
    actor = cfg.actor_rollout_ref.actor
    mini = int(actor.ppo_mini_batch_size) * n
    extra = {  # trainer_base._update_actor's extra_info
        "calculate_entropy": bool(actor.calculate_entropy) or float(actor.entropy_coeff) != 0.0,
        "distillation_use_topk": False, "distillation_only": False,
        "global_batch_size": mini, "mini_batch_size": mini, "epochs": int(actor.ppo_epochs),
        "seed": int(actor.data_loader_seed), "dataloader_kwargs": {"shuffle": bool(actor.shuffle)},
        "temperature": temperature,
    }
    if score_centering and verls_own_transport():
        extra["score_centering"] = True
    for key, value in extra.items():
        tu.assign_non_tensor_data(tensor_dict=td, key=key, val=value)
    return td, terms


def reference(model, terms, project_cfg, temperature: float) -> dict[str, float]:
    """The arm's loss and gradient norm from plain fp32 forwards of the initial model.

    Written independently of ``ablations/``: ``log_softmax`` over the full vocabulary, the TIS
    weight by hand, and for SC arms the correction two ways: its *value* in the head form verl and
    the project report (``sum_H sg(q f(p/q) - alpha p) log p``), and its *gradient* from the
    full-vocabulary formula on the reconstructed sampler ``q_hat`` (head q, tail rho p), which has
    the same gradient (``sum_v p grad log p = 0``) but is computed without any head bookkeeping.
    """
    import torch

    cap = project_cfg.method.tis_cap
    f = (lambda r: torch.ones_like(r)) if cap is None else (lambda r: r.clamp(max=float(cap)))
    net = copy.deepcopy(model).float()
    net.zero_grad()
    value, tokens, clipped = 0.0, 0, 0
    head_q, head_p, corrections = [], [], []
    losses = []
    for t in terms:
        ids, p_len, sampled = t["ids"], t["p_len"], t["sampled"]
        r_len = len(sampled)
        logp = torch.log_softmax(net(ids.unsqueeze(0)).logits[0].float() / temperature, -1)
        logp = logp[p_len - 1 : p_len - 1 + r_len]
        log_pa = logp.gather(-1, ids[p_len:].unsqueeze(-1)).squeeze(-1)
        ratio = torch.exp(log_pa.detach() - sampled)
        weight = f(ratio)
        clipped += int((ratio > (cap or math.inf)).sum())
        shown = grad_form = torch.zeros(r_len)
        if project_cfg.method.score_centering:
            p_all = logp.detach().exp()
            q_head, p_head = t["head_log_probs"].exp(), p_all.gather(-1, t["head_ids"])
            rho = (1 - q_head.sum(-1)).clamp_min(1e-6) / (1 - p_head.sum(-1)).clamp_min(1e-6)
            alpha = rho * f(1 / rho)
            coef = q_head * f(p_head / q_head) - alpha.unsqueeze(-1) * p_head
            shown = (coef * logp.gather(-1, t["head_ids"])).sum(-1)
            q_hat = rho.unsqueeze(-1) * p_all
            q_hat.scatter_(-1, t["head_ids"], q_head)
            grad_form = (q_hat * f(p_all / q_hat) * logp).sum(-1)
            head_q.append(q_head.sum(-1))
            head_p.append(p_head.sum(-1))
            corrections.append(shown.detach())
        advantage = t["reward"] - float(t["group"].mean())
        value += float((-advantage * (weight * log_pa - shown)).sum())
        losses.append((-advantage * (weight * log_pa - grad_form)).sum())
        tokens += r_len
    (torch.stack(losses).sum() / tokens).backward()
    grad_norm = float(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in net.parameters() if p.grad is not None)))
    out = {"pg_loss": value / tokens, "grad_norm": grad_norm, "tis_clip_fraction": clipped / tokens, "tokens": tokens}
    if project_cfg.method.score_centering:
        out["sc_correction"] = float(torch.cat(corrections).mean())
        out["sc_sampler_head_mass"] = float(torch.cat(head_q).mean())
        out["sc_train_head_mass"] = float(torch.cat(head_p).mean())
    return out


def _params(engine):
    import torch

    out = []
    for param in engine.module.parameters():
        local = param.to_local() if hasattr(param, "to_local") else param
        out.append(local.detach().clone().to(torch.float32))
    return out


def _plain(value):
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "value") and not isinstance(value, int | float):  # verl Metric
        value = value.value
    if hasattr(value, "item"):
        return float(value.item())
    return value


def verls_own_transport() -> bool:
    from runners.verl_side.revisions import installed

    return installed.head_carrier() is installed.VERL_CARRIES


def install_transport(env: dict[str, str]) -> None:
    """What ``VERL_USE_EXTERNAL_MODULES`` and the launcher's environment do in every verl process of an SC arm."""
    if verls_own_transport():
        from runners.verl_side.backend import sc_seam

        sc_seam.install()
        return
    import runners.verl_side.head.plugin  # noqa: F401 - registers the head engine

    os.environ["VERL_ENGINE_VENDOR"] = env["VERL_ENGINE_VENDOR"]


def run(arm: str, report_path: Path) -> dict:
    start = time.time()
    _environment()
    import torch
    import verl  # noqa: F401 - the project's plug-in registers the arms (entry point)

    from runners.verl_side.revisions import installed, newer_keys

    report: dict = {"arm": arm, "verl_version": verl.__version__, "sc_support": installed.supported()}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        model = tiny_model(tmp / "model")
        overrides, project_cfg, env = verl_overrides(arm, tmp, tmp / "model")
        if project_cfg.method.score_centering:
            install_transport(env)
        report["transport"] = installed.head_carrier().name
        cfg, runner = driver_config(overrides)
        report["task_runner"] = runner
        torch.distributed.init_process_group("gloo", rank=0, world_size=1)
        from verl.experimental.separation.engine_workers import DetachActorWorker
        from verl.trainer.ppo.core_algos import get_policy_loss_fn

        worker = DetachActorWorker(config=cfg.actor_rollout_ref, role="actor")
        worker.init_model()
        loss_fn = worker.loss_fn
        report["loss_fn"] = getattr(getattr(loss_fn, "func", loss_fn), "__qualname__", repr(loss_fn))
        loss_mode = worker.actor.loss_fn.keywords["config"].policy_loss.loss_mode
        policy = get_policy_loss_fn(loss_mode)
        report["policy_loss"] = f"{policy.__module__}.{policy.__qualname__}"
        report["engine"] = f"{type(worker.actor.engine).__module__}.{type(worker.actor.engine).__qualname__}"
        if project_cfg.method.score_centering and verls_own_transport():
            import importlib

            seam = importlib.import_module(newer_keys.SEAM_MODULE).score_centering_logits_processor
            report["logits_processor"] = f"{seam.__module__}.{seam.__qualname__}"
        td, terms = mini_batch(model, cfg, project_cfg)
        temperature = float(cfg.actor_rollout_ref.rollout.temperature)
        report["reference"] = reference(model, terms, project_cfg, temperature)
        before = _params(worker.actor.engine)
        calls = {"centering_term": 0}
        import ablations.score_centering as scm

        real_term = scm.centering_term

        def counting(*args, **kwargs):
            calls["centering_term"] += 1
            return real_term(*args, **kwargs)

        scm.centering_term = counting
        output = worker.update_actor(td)
        scm.centering_term = real_term
        after = _params(worker.actor.engine)
        from verl.utils import tensordict_utils as tu

        metrics = {key: _plain(value) for key, value in tu.get(output, "metrics").items()}
        report["metrics"] = metrics
        report["project_centering_calls"] = calls["centering_term"]
        report["param_change"] = float(sum((a - b).abs().sum() for a, b in zip(after, before, strict=True)))
    report["seconds"] = time.time() - start
    report_path.write_text(json.dumps(report, indent=1, default=str))
    return report


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    run(sys.argv[1], Path(sys.argv[2]))
