"""The report pools runs as seeds of one arm only with their peers (issue 35, item 1).

Run folders are synthesised with the resolved config a launch of either backend records (composed
from ``conf/``), one key changed at a time in one run; before the fix the report averaged that run
into its arm's "mean of N seeds" row without a word.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from analysis.__main__ import main as analysis_main
from analysis.load import SweepError, load_sweep
from analysis.report import build_report
from analysis.synthetic import counts_to_acc, write_run
from runners.config import CONF_DIR
from runners.run.peer_keys import INERT_KEYS, is_pooling_key, setting
from runners.run.provenance import config_sha256
from runners.run.run_record import record_config_sha256

BASE = {"embedded": [], "verl": ["+experiment=qwen3_4b_sc_repro"]}
#: One key changed at a time: learning rate, scenario, head size k, staleness, model, an evaluation key.
CHANGES = {
    "embedded": [("trainer.lr", "0.002"), ("scenario", "kv4"), ("method.top_k", "4"), ("rollout.max_staleness", "8"),
                 ("model.hidden_size", "96"), ("eval.temperature", "0.6")],
    "verl": [("trainer.lr", "2e-06"), ("method.top_k", "64"), ("rollout.max_staleness", "8"),
             ("model.path", "Qwen/Qwen3-8B"), ("eval.temperature", "0.6")],
}


def _config(backend: str, method: str, seed: int, extra: list[str] = ()) -> dict:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose(config_name="config", overrides=[*BASE[backend], f"method={method}", f"seed={seed}", *extra])
    return OmegaConf.to_container(cfg, resolve=True)


def _run(root: Path, method: str, seed: int, config: dict, correct: int = 2, name: str | None = None) -> Path:
    """A finished run with one evaluation (4 problems, k=4) and ``config`` as its record's config.yaml."""
    run_dir = write_run(root / (name or f"{method}-seed{seed}"), method=method, seed=seed, total_steps=0,
                        evals={0: {"a": counts_to_acc([correct, 1, 3, 0], 4)}}, method_cfg=config["method"])
    text = yaml.safe_dump(config, sort_keys=False)
    record_config_sha256(run_dir, config_sha256(text))
    (run_dir / "config.yaml").write_text(text)
    return run_dir


def _sweep(root: Path, backend: str, change: tuple[str, str] | None) -> Path:
    for method in ("pg", "sc"):
        for seed in (1, 2):
            _run(root, method, seed, _config(backend, method, seed))
    extra = [f"{change[0]}={change[1]}"] if change else []
    _run(root, "sc", 3, _config(backend, "sc", 3, extra), correct=4)
    return root


@pytest.mark.parametrize("backend,change", [(b, c) for b, cs in CHANGES.items() for c in cs],
                         ids=lambda x: x if isinstance(x, str) else x[0])
def test_a_run_trained_differently_is_shown_apart(tmp_path, backend, change):
    root = _sweep(tmp_path / "s", backend, change)
    sweep = load_sweep(root)
    key, value = change
    assert list(sweep.apart) == ["sc-seed3"]
    diffs = sweep.apart["sc-seed3"]
    assert key in diffs, diffs
    label = sweep.runs.at["sc-seed3", "method"]
    assert label.startswith("sc [") and label != "sc" and sweep.runs.at["sc-seed3", "arm"] == "sc"
    assert set(sweep.runs.loc[["sc-seed1", "sc-seed2"], "method"]) == {"sc"}
    comp = build_report(sweep, "final", n_boot=200).comparison
    assert "sc (mean of 2 seeds)" in set(comp["run"])  # seeds 1 and 2 only: seed 3 is not pooled
    assert "sc (mean of 3 seeds)" not in set(comp["run"])
    assert set(comp.loc[comp["run"] == "sc-seed3", "method"]) == {label}
    with pytest.raises(SweepError) as err:
        load_sweep(root, strict=True)
    assert "trained differently from their peers" in str(err.value) and key in str(err.value)


@pytest.mark.parametrize("backend", ["embedded", "verl"])
def test_runs_that_agree_are_pooled_and_inert_keys_do_not_split(tmp_path, backend):
    inert = ["backend.logger=[console]" if backend == "embedded" else "backend.ingest_interval_s=30", "trainer.resume=disable"]
    root = tmp_path / "s"
    for method in ("pg", "sc"):
        for seed in (1, 2):
            _run(root, method, seed, _config(backend, method, seed, inert if seed == 2 else []))
    sweep = load_sweep(root, strict=True)
    assert sweep.apart == {} and list(sweep.runs["method"]) == ["pg", "pg", "sc", "sc"]
    assert "pg (mean of 2 seeds)" in set(build_report(sweep, "final", n_boot=200).comparison["run"])


def test_pooling_keys_are_every_key_but_the_documented_inert_ones():
    config = _config("verl", "sc", 1)
    keys = set(setting(config))
    assert {"trainer.lr", "eval.n", "eval.temperature", "method.top_k", "model.path", "scenario",
            "backend.extra_overrides", "rollout.max_staleness"} <= keys
    assert not keys & {"seed", "run_name", "sweep", "results_root", "method.name", "method.tis_cap", "gpu.name"}
    assert is_pooling_key("eval.numerics")  # a key a later change adds is a pooling key at once
    assert "seed" not in INERT_KEYS and not is_pooling_key("seed")  # the replicate axis: a resume keeps it


def test_keys_a_multirun_varies_become_named_rows(tmp_path):
    root = tmp_path / "s"
    for method in ("pg", "sc"):
        for lr in ("0.001", "0.002"):
            for seed in (1, 2):
                cfg = _config("embedded", method, seed, [f"trainer.lr={lr}", f"run_name={method}-lr{lr}-seed{seed}"])
                _run(root, method, seed, cfg, name=cfg["run_name"])
    (root / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"overrides": {"task": [
        "method=pg,sc", "seed=1,2", "trainer.lr=0.001,0.002", "run_name=${method.name}-lr${trainer.lr}-seed${seed}"]}}}))
    sweep = load_sweep(root, strict=True)
    assert sweep.apart == {} and sweep.peers.swept == ("trainer.lr",)
    assert sorted(set(sweep.runs["method"])) == ["pg [trainer.lr=0.001]", "pg [trainer.lr=0.002]",
                                                  "sc [trainer.lr=0.001]", "sc [trainer.lr=0.002]"]
    comp = build_report(sweep, "final", n_boot=200).comparison
    assert "sc [trainer.lr=0.002] (mean of 2 seeds)" in set(comp["run"])


def test_cli_warns_and_strict_refuses(tmp_path, capsys):
    root = _sweep(tmp_path / "s", "embedded", ("trainer.lr", "0.002"))
    assert analysis_main([str(root), "--no-figures", "--n-boot", "100"]) == 0
    err = capsys.readouterr().err
    assert "1 run(s) trained differently from their peers" in err
    assert "sc-seed3: trainer.lr=0.002 (its peers: 0.0002)" in err
    md = (root / "report" / "comparison.md").read_text()
    assert "Runs trained differently from their peers" in md and "trainer.lr=0.002" in md
    assert analysis_main([str(root), "--no-figures", "--strict"]) == 2


def test_the_launcher_warns_when_a_launch_differs_from_its_siblings(tmp_path, capsys):
    from runners.launch import warn_unlike_siblings

    root = tmp_path / "results" / "sweep"
    for seed in (1, 2):
        _run(root, "sc", seed, _config("embedded", "sc", seed))
    new = _config("embedded", "sc", 6, ["trainer.lr=0.002"])
    lines = warn_unlike_siblings({root / "sc-seed6": OmegaConf.create(new)}, [["seed=6", "trainer.lr=0.002"]])
    assert len(lines) == 1 and "trainer.lr=0.002 (theirs: 0.0002)" in lines[0]
    assert "trainer.lr=0.002" in capsys.readouterr().err
    same = _config("embedded", "pg", 6)
    assert warn_unlike_siblings({root / "pg-seed6": OmegaConf.create(same)}, [["method=pg", "seed=6"]]) == []
    # a key this launch varies across its own jobs is varied on purpose: no warning
    assert warn_unlike_siblings({root / "sc-seed6": OmegaConf.create(new)},
                                [["trainer.lr=0.0002"], ["trainer.lr=0.002"]]) == []


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
