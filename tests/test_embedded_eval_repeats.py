"""eval.repeats of the embedded backend: repeat 0 is the unchanged evaluation, repeats are new draws."""

from __future__ import annotations

import json

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from analysis.load import load_sweep
from analysis.synthetic import write_run
from analysis.tables import retest_table
from runners import validate
from runners.config import config_checks
from runners.embedded.evaluate import evaluate, val_file
from runners.embedded.sampler import Sampler
from runners.run.contract_check import check_run_dir
from runners.tiny.arithmetic_task import ArithmeticTask
from runners.tiny.model import build_model
from runners.tiny.tokenizer import build_tokenizer


def _cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(config_checks.CONF_DIR), version_base=None):
        return compose(config_name="config", overrides=["eval.n=2", *overrides])


def _evaluate(cfg, run_dir):
    tok = build_tokenizer()
    torch.manual_seed(0)
    model = build_model(cfg.model, tok).eval()
    sampler = Sampler(model, tok, cfg.backend.sampler, cfg.method.top_k)
    sampler.sync(model, 0, torch.Generator().manual_seed(0))
    return evaluate(sampler, ArithmeticTask(cfg.data), cfg, 0, run_dir)


def test_default_is_one_evaluation():
    assert _cfg().eval.repeats == 1


def test_repeats_write_extra_files_and_leave_repeat_zero_unchanged(tmp_path):
    one = _evaluate(_cfg(), tmp_path / "one")
    three = _evaluate(_cfg("eval.repeats=3"), tmp_path / "three")
    assert one == three  # metrics.json gets repeat 0 only
    main = val_file(tmp_path / "three", 0).read_bytes()
    assert main == val_file(tmp_path / "one", 0).read_bytes()
    assert not (tmp_path / "one" / "val" / "repeat_01").exists()
    reps = [val_file(tmp_path / "three", 0, r) for r in (1, 2)]
    assert [p.relative_to(tmp_path / "three").as_posix() for p in reps] == [
        "val/repeat_01/step_000000.jsonl", "val/repeat_02/step_000000.jsonl"]
    lines = [[json.loads(x) for x in p.read_text().splitlines()] for p in [val_file(tmp_path / "three", 0), *reps]]
    keys = [[(d["problem_id"], d["sample"]) for d in ls] for ls in lines]
    assert keys[0] == keys[1] == keys[2]  # same problems and samples, other draws
    assert len({tuple(d["response_length"] for d in ls) for ls in lines}) == 3


def test_repeat_files_pass_the_contract_and_feed_the_retest_table(tmp_path):
    cfg = _cfg("eval.repeats=3")
    run_dir = tmp_path / "sweep" / "pg-seed42"
    metrics = _evaluate(cfg, run_dir)
    acc = {}  # a run record around the evaluation: one val row at step 0, no training
    for line in val_file(run_dir, 0).read_text().splitlines():
        d = json.loads(line)
        acc.setdefault(d["data_source"], {}).setdefault(d["problem_id"], []).append(d["acc"])
    write_run(tmp_path / "tmp", method="pg", seed=42, evals={0: {ds: list(v.values()) for ds, v in acc.items()}},
              problems={ds: list(v) for ds, v in acc.items()})
    for name in ("metrics.json", "config.yaml"):
        (run_dir / name).write_bytes((tmp_path / "tmp" / name).read_bytes())
    record = json.loads((run_dir / "metrics.json").read_text())
    assert {k: v for k, v in record["val"][0].items() if k.startswith("val-core")} == {
        k: v for k, v in metrics.items() if k.startswith("val-core")}
    assert check_run_dir(run_dir) == []
    retest = retest_table(load_sweep(tmp_path / "sweep"))
    assert set(retest["n_repeats"]) == {3} and set(retest["data_source"]) == {"arith_a", "arith_b", "avg"}
    # a broken repeat file is a violation naming it
    path = val_file(run_dir, 0, 2)
    path.write_text("\n".join(path.read_text().splitlines()[:-1]) + "\n")
    assert any("repeat_02/step_000000.jsonl" in v and "samples 0..1" in v for v in check_run_dir(run_dir))


@pytest.mark.parametrize("value", ["0", "1.5", "true"])
def test_bad_repeats_name_the_key(value):
    """Rejected before compute, as the launcher checks: a wrong type at composition, a range by the schema."""

    def checked():
        cfg = config_checks.compose_checked(lambda overrides: _cfg(*overrides), [f"eval.repeats={value}"])
        validate.validate(cfg, OmegaConf.to_yaml(cfg, resolve=True))

    with pytest.raises(ValueError, match=r"eval\.repeats.*integer"):
        checked()
