"""The embedded trainer: one optimizer step of an arm on a batch of prompt groups.

Per step: GRPO advantages without std division (verl's ``compute_grpo_outcome_advantage``),
the trainer's current log-probs of the sampled tokens and — for every arm, as diagnostics, and
as the correction for SC arms — its log-probs at the sampler's top-k head ids
(:func:`ablations.score_centering.head_log_probs`), then the arm's loss **looked up in verl's
registry by name**, token-mean over the whole batch (micro-batches share verl's
``global_batch_info``), AdamW with gradient-norm clipping, one step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from omegaconf import DictConfig

from ablations.arms import ArmSpec
from ablations.score_centering import centering_term, head_log_probs, head_log_probs_with_tail
from runners.embedded.diagnostics import CenteringGradient, shared_context
from runners.embedded.generate import left_pad, position_ids_from_mask
from runners.embedded.replay_buffer import Group
from runners.embedded.sampler import Rollout, collate


def actor_config(method_cfg: DictConfig):
    """verl's ``ActorConfig`` for a bypass-mode REINFORCE arm: the arm's rollout-correction block
    (:meth:`ablations.arms.ArmSpec.verl_rollout_correction`: the TIS cap, or verl's IS weight and rejection
    mask), as the verl backend writes it."""
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.workers.config.actor import ActorConfig, PolicyLossConfig

    correction = RolloutCorrectionConfig(**ArmSpec.of(method_cfg).verl_rollout_correction(), loss_type="reinforce",
                                         bypass_mode=True)
    return ActorConfig(
        strategy="fsdp",
        ppo_micro_batch_size_per_gpu=1,
        rollout_n=1,
        policy_loss=PolicyLossConfig(loss_mode=method_cfg.loss_mode, rollout_correction=correction),
        global_batch_info={},
    )


@dataclass
class Batch:
    """A training batch: the collated rollout, per-token advantages, and per-response rewards."""

    rollout: Rollout
    advantages: torch.Tensor
    scores: torch.Tensor
    staleness: torch.Tensor


def make_batch(groups: list[Group], trainer_version: int, pad_id: int) -> Batch:
    """Collate groups and compute GRPO advantages ``A_i = R_i - mean_group(R)`` (no std)."""
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    rollout = collate([g.rollout for g in groups], pad_id)
    scores = torch.tensor([s for g in groups for s in g.scores], dtype=torch.float32)
    index = np.array([i for i, g in enumerate(groups) for _ in g.scores])
    mask = rollout.response_mask
    last = (mask.sum(-1).long() - 1).clamp_min(0)
    token_rewards = torch.zeros_like(mask)
    token_rewards[torch.arange(len(scores)), last] = scores
    advantages, _ = compute_grpo_outcome_advantage(token_rewards, mask, index, norm_adv_by_std_in_grpo=False)
    staleness = torch.tensor([float(trainer_version - g.version) for g in groups])
    return Batch(rollout=rollout, advantages=advantages, scores=scores, staleness=staleness)


def response_logits(model: torch.nn.Module, rollout: Rollout, pad_id: int, temperature: float) -> torch.Tensor:
    """Trainer logits ``(R, T, V)`` predicting each response token, divided by ``temperature``.

    Prompts are left-padded, responses right-padded; position ids come from the attention mask,
    exactly as the sampler computed them, so an unchanged model reproduces the sampler's log-probs.
    """
    prompt_ids, prompt_mask = left_pad(rollout.prompt_ids, pad_id)
    device = next(model.parameters()).device
    input_ids = torch.cat([prompt_ids, rollout.response_ids], dim=1).to(device)
    attention_mask = torch.cat([prompt_mask, rollout.response_mask.long()], dim=1).to(device)
    out = model(input_ids=input_ids, attention_mask=attention_mask,
                position_ids=position_ids_from_mask(attention_mask), use_cache=False)
    width = prompt_ids.shape[1]
    return out.logits[:, width - 1 : width - 1 + rollout.response_ids.shape[1]].float() / temperature


class PolicyTrainer:
    """Holds the trainer model, its optimizer and the arm's loss function (from verl's registry)."""

    def __init__(self, model: torch.nn.Module, cfg: DictConfig, pad_id: int):
        from verl.trainer.ppo.core_algos import get_policy_loss_fn

        self.model = model
        self.cfg = cfg
        self.pad_id = pad_id
        self.loss_fn = get_policy_loss_fn(cfg.method.loss_mode)
        self.config = actor_config(cfg.method)
        arm = ArmSpec.of(cfg.method)
        self.cap, self.band = arm.centering_weight() if arm.sc or arm.is_level == "token" else (None, None)
        self.score_centering = arm.sc
        t = cfg.trainer
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=t.lr, weight_decay=t.weight_decay)

    def step(self, batch: Batch) -> dict[str, float]:
        """One optimizer step on ``batch``; returns the step's actor metrics."""
        from verl.utils.py_functional import rename_dict

        self.model.train()
        rollout, device = batch.rollout, next(self.model.parameters()).device
        total_tokens = int(rollout.response_mask.sum())
        self.config.global_batch_info.clear()
        self.config.global_batch_info.update({"dp_size": 1, "batch_num_tokens": total_tokens})
        rows = rollout.response_ids.shape[0]
        micro = self.cfg.backend.micro_batch_size
        self.optimizer.zero_grad(set_to_none=True)
        sums: dict[str, float] = {}
        diagnose = bool(self.cfg.backend.get("gradient_diagnostics", False))
        centering_grad = CenteringGradient([p for p in self.model.parameters() if p.requires_grad]) if diagnose else None
        shared = shared_context(rollout.response_ids, rollout.response_mask, self.cfg.trainer.n)
        for start in range(0, rows, micro):
            part = slice(start, start + micro)
            mb = rollout.rows(part)
            mask = mb.response_mask.to(device)
            tokens = float(mask.sum())
            logits = response_logits(self.model, mb, self.pad_id, self.cfg.rollout.temperature)
            log_prob = head_log_probs(logits, mb.response_ids.to(device)[..., None]).squeeze(-1)
            train_head, train_tail = head_log_probs_with_tail(logits, mb.head_ids.to(device),
                                                              self.cfg.backend.head_chunk_rows)
            sampler_head = mb.head_log_probs.to(device)
            kwargs = {}
            if self.score_centering:
                correction, q_mass, p_mass = centering_term(train_head, sampler_head, is_cap=self.cap,
                                                            train_log_tail=train_tail, is_band=self.band)
                kwargs["sc_correction"] = correction
            elif diagnose:  # the counterfactual correction of the SC arm with this arm's IS rule
                correction, q_mass, p_mass = centering_term(train_head, sampler_head, is_cap=self.cap,
                                                            train_log_tail=train_tail, is_band=self.band)
            else:
                with torch.no_grad():
                    _, q_mass, p_mass = centering_term(train_head.detach(), sampler_head, train_log_tail=train_tail)
            advantages = batch.advantages[part, : mask.shape[1]].to(device)
            if diagnose:
                centering_grad.add(torch.where(mask.bool(), advantages * correction, 0.0).sum() / total_tokens)
            loss, loss_metrics = self.loss_fn(
                old_log_prob=mb.log_probs.to(device), log_prob=log_prob, advantages=advantages,
                response_mask=mask, loss_agg_mode=self.cfg.trainer.loss_agg_mode, config=self.config, **kwargs,
            )
            loss.backward()
            # named as verl's V1 trainer names the worker's loss metrics: the loss value as actor/pg_loss
            # (workers/utils/losses.py), every key under actor/ (trainer_base.py, rename_dict)
            loss_metrics = rename_dict({**loss_metrics, "actor/pg_loss": float(loss.detach())}, "actor/")
            with torch.no_grad():
                log_p = torch.log_softmax(logits, dim=-1)
                entropy = -(log_p.exp() * log_p).sum(-1)
                in_head = (mb.head_ids.to(device) == mb.response_ids.to(device)[..., None]).any(-1).float()
                local = {
                    "actor/entropy": _masked_sum(entropy, mask),
                    "mismatch/sampler_head_mass": _masked_sum(q_mass, mask),
                    "mismatch/train_head_mass": _masked_sum(p_mass, mask),
                    "mismatch/sampled_in_head": _masked_sum(in_head, mask),
                    "diag/shared_context_fraction": _masked_sum(shared[part, : mask.shape[1]].float(), mask),
                }
            for key, value in loss_metrics.items():
                # pg_loss is already scaled by the global token count; the rest are micro-batch means
                local[key] = value if key == "actor/pg_loss" else value * tokens
            for key, value in local.items():
                sums[key] = sums.get(key, 0.0) + value
        grad_metrics = centering_grad.metrics(self.score_centering) if diagnose else {}
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.trainer.grad_clip)
        self.optimizer.step()
        metrics = {k: (v if k == "actor/pg_loss" else v / total_tokens) for k, v in sums.items()}
        metrics["diag/tail_mass_sampler"] = 1.0 - metrics["mismatch/sampler_head_mass"]
        metrics["diag/tail_mass_trainer"] = 1.0 - metrics["mismatch/train_head_mass"]
        metrics.update(grad_metrics)
        metrics["actor/grad_norm"] = float(grad_norm)
        if self.score_centering:
            metrics["actor/sc_sampler_head_mass"] = metrics["mismatch/sampler_head_mass"]
            metrics["actor/sc_train_head_mass"] = metrics["mismatch/train_head_mass"]
        return metrics


def _masked_sum(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float(torch.where(mask.bool(), x, 0.0).sum())
