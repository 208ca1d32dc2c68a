"""The embedded backend: a miniature of verl's separate-async trainer on one CPU process.

Each step:

1. the sampler produces prompt groups with the weights it holds — ``backend.sampler.speed``
   batches' worth per trainer step on average, varying from step to step (``schedule.py``), as long
   as the replay buffer has room for ``run_ahead_batches`` batches beyond the one being trained (the
   sampler runs ahead);
2. groups older than ``rollout.max_staleness`` weight versions are evicted; if fewer than a
   batch remain, the trainer waits while the sampler tops the buffer up;
3. the trainer takes the oldest batch, takes one optimizer step with the arm's loss, and every
   ``rollout.parameter_sync_step`` steps the sampler loads the new weights (through its
   numerics mismatch).

With ``run_ahead_batches: 0`` and ``rollout.parameter_sync_step: N`` the sampler is synchronous but
refreshed only every N steps: a batch trained at step t was sampled at step t by the weights of step
N * floor(t / N), staleness ``t mod N`` (regime B of ``docs/drift_study.md``, ``conf/scenario/refresh*``).

Evaluation at step 0 and every ``trainer.test_freq`` steps, with the numerics ``eval.numerics`` names
(``evaluate.py``: clean by default); ``metrics.json`` after every step;
a full-state checkpoint every ``trainer.save_freq`` steps. A killed run started again with the
same command resumes from its newest checkpoint (``trainer.resume=auto``).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from runners.config.config_error import ConfigError
from runners.config.model_shapes import check_top_k_fits
from runners.embedded.checkpoint import load_latest, save_checkpoint, supersede_after
from runners.embedded.evaluate import eval_sampler_config, evaluate, val_file
from runners.embedded.parallel import check_parallel_threads, threads_warning
from runners.embedded.replay_buffer import Group, ReplayBuffer
from runners.embedded.sampler import Sampler
from runners.embedded.schedule import staleness_histogram, throughput_factor
from runners.embedded.trackers import RunTracker
from runners.embedded.trainer import PolicyTrainer, make_batch
from runners.run.provenance import config_sha256, versions
from runners.run.run_contract import seed_fixes_record
from runners.run.run_folder import write_config
from runners.run.run_record import RunRecord
from runners.tiny.arithmetic_task import prompt_token_ids
from runners.tiny.task_by_name import build_task

log = logging.getLogger(__name__)

#: ``run.seed_fixes`` of every embedded run: the streams :class:`EmbeddedRun` seeds from ``seed``. Runs of
#: different arms with one seed draw the same prompts, sampler and schedule random numbers and evaluate
#: with the same draws; they differ once the arms' updates change a sampled token.
SEED_FIXES = seed_fixes_record(
    {"data_order": "torch.Generator(seed): the training prompts drawn each step (task.sample_train)",
     "sampler": "torch.Generator(seed + 1): the rollout sampler's token draws",
     "sampler_sync": "torch.Generator(seed + 2): weight noise at each sync (drawn only with weight_noise > 0)",
     "schedule": "torch.Generator(seed + 3): the sampler's throughput (drawn only with speed_jitter > 0)",
     "evaluation": "torch.Generator(seed * 1000003 + step) per evaluated step (repeat r >= 1: "
                   "SeedSequence([seed, step, r]))"},
    {"eval_problems": "data.seed: the same evaluation sets for every run of the sweep, whatever its seed",
     "initial_weights": "the shipped base model or the warm start (model.warmstart.seed), the same for every run",
     "float_reductions": "backend.threads: another thread count gives another trajectory after step 0"},
    reproducible=True,
)


def validate(cfg: DictConfig) -> None:
    """The embedded backend's checks that need its own computation (``runners.validate`` runs the schema
    and the cross-field rules first); each error names the key and the allowed values."""
    r = cfg.rollout
    eval_sampler_config(cfg)  # eval.numerics, and a clean sampler exists for these sampler knobs
    if r.max_staleness < r.parameter_sync_step - 1:
        raise ConfigError(
            f"rollout.max_staleness={r.max_staleness} is below rollout.parameter_sync_step - 1 = "
            f"{r.parameter_sync_step - 1}: a sampler refreshed every {r.parameter_sync_step} steps trains groups up to "
            f"{r.parameter_sync_step - 1} versions old; allowed: rollout.max_staleness >= {r.parameter_sync_step - 1}"
        )
    check_parallel_threads(cfg)  # a job of hydra/launcher=parallel: n_jobs x threads <= cores
    if cfg.backend.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("backend.device=cuda but no CUDA device is available; use backend.device=cpu")
    task = build_task(cfg.data)  # validates the data group
    from runners.tiny.tokenizer import build_tokenizer

    vocab_size = len(build_tokenizer())  # the model's vocabulary (runners/tiny/model.py builds it so)
    check_top_k_fits(int(cfg.method.top_k), vocab_size, f"model={cfg.model.name}", "runners/tiny/tokenizer.py")
    prompt_tokens = task.max_prompt_tokens(build_tokenizer())
    if r.max_prompt_length < prompt_tokens:
        raise ConfigError(f"rollout.max_prompt_length={r.max_prompt_length} is shorter than the task's prompts "
                          f"({prompt_tokens} tokens); allowed: >= {prompt_tokens}")
    if r.max_response_length < task.max_response_tokens():
        raise ConfigError(
            f"rollout.max_response_length={r.max_response_length} is shorter than the longest correct "
            f"response ({task.max_response_tokens()} tokens); allowed: >= {task.max_response_tokens()}"
        )


class EmbeddedRun:
    """The state of one embedded run, and its step loop."""

    def __init__(self, cfg: DictConfig, run_dir: Path, config_sha256: str):
        from runners.embedded.base_checkpoint import load_base_model_for

        self.cfg, self.run_dir = cfg, Path(run_dir)
        torch.set_num_threads(cfg.backend.threads)
        self.device = torch.device(cfg.backend.device)
        self.task = build_task(cfg.data)
        # the shipped, hash-verified base model for the default config; the warm-start cache otherwise
        model, self.tokenizer, self.base_source = load_base_model_for(cfg, Path(cfg.backend.cache_dir))
        torch.manual_seed(cfg.seed)
        model = model.to(self.device)
        self.pad_id = self.tokenizer.pad_token_id
        self.trainer = PolicyTrainer(model, cfg, self.pad_id)
        self.sampler = Sampler(model, self.tokenizer, cfg.backend.sampler, cfg.method.top_k)
        self.eval_sampler = Sampler(model, self.tokenizer, eval_sampler_config(cfg), cfg.method.top_k)
        self.buffer = ReplayBuffer(cfg.rollout.max_staleness)
        self.data_gen = torch.Generator().manual_seed(cfg.seed)
        self.sample_gen = torch.Generator().manual_seed(cfg.seed + 1)
        self.sync_gen = torch.Generator().manual_seed(cfg.seed + 2)
        self.schedule_gen = torch.Generator().manual_seed(cfg.seed + 3)  # the sampler's throughput (schedule.py)
        self.credit = 0.0
        self.step = 0
        self.tracker: RunTracker | None = None  # opened by run()
        self.record = RunRecord.open(
            self.run_dir, name=cfg.run_name, method=cfg.method.name, seed=cfg.seed, backend="embedded",
            total_steps=cfg.trainer.total_steps, config_sha256=config_sha256, versions=versions(),
            seed_fixes=SEED_FIXES,
        )

    # -- state ------------------------------------------------------------------------------
    def state(self) -> dict:
        return {
            "step": self.step,
            "model": self.trainer.model.state_dict(),
            "optimizer": self.trainer.optimizer.state_dict(),
            "sampler": self.sampler.model.state_dict(),
            "sampler_version": self.sampler.version,
            "buffer": self.buffer.state(),
            "credit": self.credit,
            "generators": {k: getattr(self, k).get_state() for k in ("data_gen", "sample_gen", "sync_gen", "schedule_gen")},
        }

    def restore(self) -> None:
        """Resume from the newest checkpoint, or start fresh (sampler synced to version 0)."""
        for moved in supersede_after(self.run_dir, self.record.last_step):  # a checkpoint no record covers
            log.warning("%s is past the record's last step (%d; %s was moved aside or lost): moved to %s, "
                        "the run continues from the newest checkpoint the record covers", moved.name,
                        self.record.last_step, self.record.path, moved)
        latest = load_latest(self.run_dir) if self.cfg.trainer.resume == "auto" else None
        if latest is None:
            if self.record.data["train"]:
                log.info("no checkpoint: starting from step 0; earlier rows are discarded")
            self.sampler.sync(self.trainer.model, 0, self.sync_gen)
            return
        step, state = latest
        self.step = step
        self.trainer.model.load_state_dict(state["model"])
        self.trainer.optimizer.load_state_dict(state["optimizer"])
        self.sampler.model.load_state_dict(state["sampler"])
        self.sampler.version = state["sampler_version"]
        self.buffer.load(state["buffer"])
        self.credit = state["credit"]
        for key, value in state["generators"].items():
            getattr(self, key).set_state(value)
        log.info("resumed from checkpoint at step %d", step)

    # -- rollout ----------------------------------------------------------------------------
    def produce(self, count: int) -> list[Group]:
        """``count`` new groups from the sampler's current weights."""
        if count <= 0:
            return []
        cfg = self.cfg
        problems = self.task.sample_train(self.data_gen, count)
        prompts = [prompt_token_ids(self.tokenizer, p) for p in problems]
        n = cfg.trainer.n
        rollout = self.sampler.generate(prompts, n, cfg.rollout.max_response_length,
                                        cfg.rollout.temperature, self.sample_gen)
        lengths = rollout.response_mask.sum(-1).long().tolist()
        groups = []
        for g, problem in enumerate(problems):
            rows = slice(g * n, (g + 1) * n)
            scored = [
                self.task.score(self.tokenizer.decode(rollout.response_ids[r, : lengths[r]].tolist(),
                                                      skip_special_tokens=True), problem)
                for r in range(rows.start, rows.stop)
            ]
            groups.append(Group(problem=problem, version=self.sampler.version, rollout=rollout.rows(rows),
                                scores=[s for s, _ in scored], accs=[a for _, a in scored]))
        return groups

    def next_batch(self) -> tuple[list[Group], int]:
        """Run the sampler for one trainer step and take the oldest batch; returns (groups, evicted)."""
        per_step = self.cfg.trainer.prompts_per_step
        sampler_cfg = self.cfg.backend.sampler
        capacity = (sampler_cfg.run_ahead_batches + 1) * per_step
        self.credit += sampler_cfg.speed * per_step * throughput_factor(sampler_cfg.speed_jitter, self.schedule_gen)
        produced = min(int(self.credit), max(capacity - len(self.buffer), 0))
        self.credit = min(self.credit - produced, float(per_step))  # idle sampler time is not banked
        self.buffer.push(self.produce(produced))
        evicted = self.buffer.evict_stale(self.step)
        if len(self.buffer) < per_step:  # the trainer waits for the sampler
            self.buffer.push(self.produce(per_step - len(self.buffer)))
        return self.buffer.pop(per_step), sum(len(g.scores) for g in evicted)

    # -- the loop ---------------------------------------------------------------------------
    def evaluate(self) -> None:
        self.eval_sampler.sync(self.trainer.model, self.step, torch.Generator().manual_seed(self.step))
        row = evaluate(self.eval_sampler, self.task, self.cfg, self.step, self.run_dir)
        self.record.add_val(row)
        if self.tracker is not None:
            self.tracker.log(row)

    def train_step(self) -> dict:
        cfg = self.cfg
        t_start, cpu_start = time.perf_counter(), time.process_time()
        groups, evicted = self.next_batch()
        t_gen = time.perf_counter() - t_start
        batch = make_batch(groups, self.step, self.pad_id)
        t_update = time.perf_counter()
        metrics = self.trainer.step(batch)
        t_update = time.perf_counter() - t_update
        self.step += 1
        if self.step % cfg.rollout.parameter_sync_step == 0:
            self.sampler.sync(self.trainer.model, self.step, self.sync_gen)
        rollout = batch.rollout
        scores = batch.scores.view(len(groups), -1)
        row = {
            "step": self.step,
            "critic/score/mean": float(batch.scores.mean()),
            "response_length/mean": float(rollout.response_mask.sum(-1).mean()),
            "response/truncation_ratio": float(rollout.truncated.float().mean()),
            "batch/zero_variance_group_ratio": float((scores.max(1).values == scores.min(1).values).float().mean()),
            **metrics,
            "training/off_policy/trajectory_staleness/mean": float(batch.staleness.mean()),
            "training/off_policy/trajectory_staleness/max": float(batch.staleness.max()),
            **staleness_histogram(batch.staleness, cfg.rollout.max_staleness),
            "training/off_policy/evicted_samples": evicted,
            "timing_s/gen": t_gen,
            "timing_s/update_actor": t_update,
            "timing_s/step": time.perf_counter() - t_start,
            "timing_s/step_cpu": time.process_time() - cpu_start,  # all threads of this process
        }
        return row

    def run(self) -> None:
        cfg, total = self.cfg, self.cfg.trainer.total_steps
        self.restore()
        for stale in sorted((self.run_dir / "val").glob("**/step_*.jsonl")):  # repeat_RR/ folders too
            if int(stale.stem.split("_")[1]) > self.step:  # written by a killed attempt after its last checkpoint
                stale.unlink()
        # config.yaml is written when the attempt starts, not before: a launch that failed earlier changed nothing
        config_yaml = OmegaConf.to_yaml(self.cfg, resolve=True)
        write_config(self.run_dir, config_yaml)
        self.record.data["run"]["config_sha256"] = config_sha256(config_yaml)  # the file the record now describes
        self.record.start_attempt(self.step)
        self.tracker = RunTracker(cfg, self.run_dir)  # backend.logger; metrics.json stays the record
        try:
            if self.step == 0 or not val_file(self.run_dir, 0).exists():
                self.evaluate()
                self.record.save()
            bar = tqdm(total=total, initial=self.step, desc=cfg.run_name, unit="step", dynamic_ncols=True)
            while self.step < total:
                row = self.train_step()
                self.record.add_train(row)
                self.tracker.log(row)
                if self.step % cfg.trainer.test_freq == 0 or self.step == total:
                    self.evaluate()
                self.record.save()  # before the checkpoint: a resume never lacks a checkpointed step
                if self.step % cfg.trainer.save_freq == 0 or self.step == total:
                    save_checkpoint(self.run_dir, self.step, self.state(), cfg.backend.keep_checkpoints)
                bar.update(1)
                bar.set_postfix(score=f"{row['critic/score/mean']:+.2f}",
                                stale=f"{row['training/off_policy/trajectory_staleness/mean']:.1f}")
                if self.step % 10 == 0 or self.step == total:
                    log.info("step %d/%d score %+.3f kl %.2e staleness %.2f evicted %d step %.2fs", self.step,
                             total, row["critic/score/mean"], row["actor/ppo_kl"],
                             row["training/off_policy/trajectory_staleness/mean"],
                             row["training/off_policy/evicted_samples"], row["timing_s/step"])
            bar.close()
        except KeyboardInterrupt:  # Ctrl-C: recorded as stopped by the user; the same command resumes
            self.record.end_attempt("stopped")
            self.tracker.finish(failed=True)
            raise
        except BaseException:
            self.record.end_attempt("failed")
            self.tracker.finish(failed=True)
            raise
        self.record.end_attempt("finished")
        self.tracker.finish()
        val = self.record.data["val"]
        log.info("finished: val at step 0 %s, at step %d %s (one run, seed %d: a single seed; compare arms "
                 "over seeds with python -m analysis)", _val_summary(val[0]), val[-1]["step"], _val_summary(val[-1]),
                 cfg.seed)


def _val_summary(row: dict) -> str:
    return ", ".join(f"{k.split('/')[1]} {v:.3f}" for k, v in row.items() if k.startswith("val-core/"))


def run(cfg: DictConfig, run_dir: Path) -> None:
    """Train one arm in ``run_dir`` (resuming when it holds a checkpoint); the record names the config by the
    hash of its resolved text (the ``config.yaml`` the attempt writes).

    ``backend.threads`` above this machine's cores is warned about (console and ``run.log``), not
    refused: the value is part of the run's config, so refusing it would make a run started on a
    larger machine impossible to resume on a smaller one; it only costs speed there.
    """
    warning = threads_warning(cfg)
    if warning is not None:
        log.warning(warning)
    EmbeddedRun(cfg, run_dir, config_sha256(OmegaConf.to_yaml(cfg, resolve=True))).run()
