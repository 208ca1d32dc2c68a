"""A run folder of the embedded backend written while its package was ``runners.local``: its ``config.yaml``
says ``backend.name: local``, its record ``backend: local`` and its checkpoints pickle ``runners.local.*``
classes. It still extends, and continues exactly as the same folder in today's names does
(``runners.embedded.moved_modules``, ``runners.config.config_history``)."""

from __future__ import annotations

import json
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from runners.config import CONF_DIR
from runners.embedded.backend import EmbeddedRun
from runners.embedded.checkpoint import list_checkpoints, load_latest
from runners.embedded.moved_modules import current_module
from runners.embedded.replay_buffer import Group
from runners.run.contract_check import check_run_dir
from runners.run.provenance import config_sha256
from runners.run.run_folder import plan
from runners.run.run_record import record_config_sha256

OLD, NEW = "runners.local", "runners.embedded"


def composed(root: Path, steps: int):
    """A seconds-long SC run (small batches, a short warm start), checkpointed every 2 steps; a sampler three times
    the trainer's speed keeps groups in the replay buffer, so each checkpoint pickles some."""
    overrides = [f"results_root={root}", f"backend.cache_dir={root / 'cache'}", f"trainer.total_steps={steps}",
                 "trainer.prompts_per_step=8", "trainer.n=4", "backend.micro_batch_size=16", "trainer.test_freq=2",
                 "trainer.save_freq=2", "eval.n=2", "model.warmstart.steps=30", "backend.sampler.run_ahead_batches=2",
                 "backend.sampler.speed=3", "backend.sampler.speed_jitter=0", "method=sc", "backend.threads=1"]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose(config_name="config", overrides=overrides)


def pickle_under_the_old_name(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rewrite the checkpoint at ``path`` as the backend pickled it while its package was ``runners.local``:
    every class of the package names its module under the old name."""
    state = torch.load(path, weights_only=False)
    with monkeypatch.context() as m:
        for name, module in list(sys.modules.items()):
            if name == NEW or name.startswith(NEW + "."):
                old = OLD + name[len(NEW):]
                m.setitem(sys.modules, old, module)
                for value in list(vars(module).values()):
                    if isinstance(value, type) and value.__module__ == name:
                        m.setattr(value, "__module__", old)
        torch.save(state, path)
    assert Group.__module__ == f"{NEW}.replay_buffer" and f"{OLD}.replay_buffer" not in sys.modules


class NoOldPackage:
    """A meta-path finder for which ``runners.local`` does not exist (an editable install of an older checkout
    in the same environment could still provide it, and a checkpoint would then load the old code)."""

    def find_spec(self, name: str, path=None, target=None):
        if name == OLD or name.startswith(OLD + "."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def pickled_text(path: Path) -> bytes:
    with zipfile.ZipFile(path) as archive:
        return archive.read(next(n for n in archive.namelist() if n.endswith("data.pkl")))


def leaves(value):
    """Every object inside nested lists, tuples and dicts (the replay buffer's state)."""
    if isinstance(value, dict):
        for v in value.values():
            yield from leaves(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from leaves(v)
    else:
        yield value


def test_module_names_move_only_under_the_old_package():
    assert current_module("runners.local.replay_buffer") == "runners.embedded.replay_buffer"
    assert current_module("runners.local") == "runners.embedded"
    assert current_module("runners.localx") == "runners.localx"
    assert current_module("runners.tiny.arithmetic_task") == "runners.tiny.arithmetic_task"


def test_an_old_run_folder_extends_as_the_same_folder_in_todays_names(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "meta_path", [NoOldPackage(), *sys.meta_path])
    today = tmp_path / "today" / "sc-seed42"
    today.mkdir(parents=True)
    short = composed(tmp_path, steps=2)
    EmbeddedRun(short, today, config_sha256(OmegaConf.to_yaml(short, resolve=True))).run()

    old = tmp_path / "old" / "sc-seed42"
    shutil.copytree(today, old)
    record = json.loads((old / "metrics.json").read_text())
    record["run"]["backend"] = "local"
    (old / "metrics.json").write_text(json.dumps(record))
    text = (old / "config.yaml").read_text()
    old_text = text.replace("backend:\n  name: embedded\n", "backend:\n  name: local\n")
    assert old_text != text
    (old / "config.yaml").write_text(old_text)
    record_config_sha256(old, config_sha256(old_text))
    checkpoints = list_checkpoints(old)
    assert checkpoints and checkpoints[-1][0] == 2
    for _, path in checkpoints:
        pickle_under_the_old_name(path, monkeypatch)
        assert f"{OLD}.replay_buffer".encode() in pickled_text(path) and NEW.encode() not in pickled_text(path)
    with pytest.raises(ModuleNotFoundError, match="runners.local"):
        torch.load(checkpoints[-1][1], weights_only=False)  # plain pickle cannot read it
    step, state = load_latest(old)
    assert step == 2 and any(isinstance(g, Group) for g in leaves(state["buffer"]))

    longer = composed(tmp_path, steps=4)
    longer_yaml = OmegaConf.to_yaml(longer, resolve=True)
    rows = {}
    for run_dir in (today, old):
        assert plan(run_dir, longer_yaml) == "extend"  # backend.name: local is read as embedded
        EmbeddedRun(longer, run_dir, config_sha256(longer_yaml)).run()
        assert check_run_dir(run_dir) == []
        done = json.loads((run_dir / "metrics.json").read_text())
        assert [a["start_step"] for a in done["run"]["attempts"]] == [0, 2]
        rows[run_dir] = [{k: v for k, v in r.items() if not k.startswith("timing_s/")} for r in done["train"]]
    assert [r["step"] for r in rows[old]] == [1, 2, 3, 4]
    assert rows[old] == rows[today]
    assert OmegaConf.load(old / "config.yaml").backend.name == "embedded"  # the extension's config, today's name

