"""The async miniature's staleness schedule (runners/local/schedule.py): a spread as in verl, the worst case kept.

* the throughput factor is lognormal with mean 1 and the configured coefficient of variation,
  and exactly 1 (no draw) at jitter 0;
* the per-step histogram metric counts groups per staleness bucket and refuses impossible values;
* the default schedule spreads the staleness of trained groups over every bucket 0..4 (pinned:
  seed 42, 150 steps), `stale8` over 0..8, and `stale_worst` trains every group exactly 4
  versions old from step 20 on, as the default did before issue 11;
* a bad `backend.sampler.speed_jitter` fails validation naming the key.
"""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from runners import validate as validation
from runners.local.backend import LocalRun
from runners.local.replay_buffer import Group, ReplayBuffer
from runners.local.schedule import STALENESS_PREFIX, staleness_histogram, throughput_factor


def composed(overrides: list[str]):
    with initialize_config_dir(config_dir=str(validation.CONF_DIR), version_base=None):
        return compose(config_name="config", overrides=overrides)


def test_throughput_factor_has_mean_one_and_the_configured_spread():
    gen = torch.Generator().manual_seed(0)
    draws = torch.tensor([throughput_factor(1.0, gen) for _ in range(20_000)], dtype=torch.float64)
    assert float(draws.mean()) == pytest.approx(1.0, abs=0.04)
    assert float(draws.std() / draws.mean()) == pytest.approx(1.0, abs=0.12)  # lognormal: heavy right tail
    assert float(draws.min()) > 0
    state = gen.get_state()
    assert throughput_factor(0.0, gen) == 1.0 and torch.equal(gen.get_state(), state)  # no draw


def test_histogram_metric_counts_groups_per_bucket():
    hist = staleness_histogram(torch.tensor([0.0, 0.0, 1.0, 4.0]), max_staleness=4)
    assert hist == {f"{STALENESS_PREFIX}/frac_{k}": v for k, v in enumerate([0.5, 0.25, 0.0, 0.0, 0.25])}
    with pytest.raises(ValueError, match=r"outside 0\.\.4"):
        staleness_histogram(torch.tensor([5.0]), max_staleness=4)
    with pytest.raises(ValueError, match="at least one group"):
        staleness_histogram(torch.tensor([]), max_staleness=4)


def schedule(scenario: str, steps: int = 150, seed: int = 42) -> list[list[int]]:
    """Staleness of every trained group, per step, from LocalRun.next_batch with a stand-in sampler."""
    cfg = composed([f"scenario={scenario}", f"seed={seed}"])
    run = LocalRun.__new__(LocalRun)  # only the scheduling state: no model, no warm start
    run.cfg, run.buffer, run.credit, run.step = cfg, ReplayBuffer(cfg.rollout.max_staleness), 0.0, 0
    run.schedule_gen = torch.Generator().manual_seed(seed + 3)  # as LocalRun.__init__ seeds it
    n = cfg.trainer.n
    run.produce = lambda count: [Group(problem=None, version=run.step, rollout=None, scores=[0.0] * n,
                                       accs=[0] * n) for _ in range(count)]  # the sampler syncs every step
    seen = []
    for _ in range(steps):
        groups, _ = run.next_batch()
        assert len(groups) == cfg.trainer.prompts_per_step
        seen.append([run.step - g.version for g in groups])
        run.step += 1
    return seen


def fractions(seen: list[list[int]], buckets: int) -> list[float]:
    flat = [s for step in seen for s in step]
    return [round(flat.count(k) / len(flat), 3) for k in range(buckets)]


def test_default_schedule_spreads_staleness_over_every_bucket():
    cfg = composed([])
    assert cfg.backend.sampler.speed == 1.05 and cfg.backend.sampler.speed_jitter == 1.5
    seen = schedule("default")
    frac = fractions(seen, 5)
    assert sum(frac) == pytest.approx(1.0, abs=2e-3)
    assert min(frac) >= 0.08, frac  # every staleness 0..4 is common, none dominates
    assert max(frac) <= 0.4, frac
    mean = sum(k * f for k, f in enumerate(frac))
    assert 1.5 <= mean <= 2.7, frac
    # the histogram metric of each step agrees with the groups it was computed from
    step = seen[60]
    metric = staleness_histogram(torch.tensor(step, dtype=torch.float32), 4)
    assert [metric[f"{STALENESS_PREFIX}/frac_{k}"] for k in range(5)] == [step.count(k) / len(step) for k in range(5)]
    assert frac == EXPECTED_DEFAULT  # seed 42, 150 steps: deterministic, the figure in schedule.py


#: fractions of trained groups at staleness 0..4, default schedule, seed 42, 150 steps
EXPECTED_DEFAULT = [0.352, 0.126, 0.109, 0.117, 0.296]


def test_stale8_spreads_up_to_8_and_the_worst_case_is_constant():
    cfg = composed(["scenario=stale8"])
    assert cfg.backend.sampler.run_ahead_batches == 8
    assert cfg.rollout.max_staleness == 8  # the scenario overrides conf/config.yaml's rollout block
    frac8 = fractions(schedule("stale8"), 9)
    assert max(max(step) for step in schedule("stale8")) == 8
    assert sum(f > 0 for f in frac8) >= 8, frac8
    worst = schedule("stale_worst")
    assert all(step == [4] * len(step) for step in worst[20:])  # from step 20 on: every group 4 versions old
    assert max(max(step) for step in worst[:20]) == 4


@pytest.mark.parametrize("value", ["-0.5", "11", "fast", "true"])
def test_bad_speed_jitter_names_the_key(tmp_path, value):
    """Rejected before compute as the launcher checks: a wrong type at composition, a range by the schema."""

    def checked():
        cfg = validation.compose_checked(composed, [f"results_root={tmp_path}", f"backend.sampler.speed_jitter={value}"])
        validation.validate(cfg, OmegaConf.to_yaml(cfg, resolve=True))

    with pytest.raises(ValueError, match=r"backend\.sampler\.speed_jitter"):
        checked()
