"""A user's situations end in one line, not a traceback, driven through the launcher (``runners/launch.py``).

* a tracker that cannot start -- W&B in online mode without a login, MLflow without a tracking URI or
  with a store that cannot be created -- is a config error naming ``backend.logger`` and the fix, on
  both backends, before anything is written (exit status 2); W&B's offline mode runs;
* verl's logs that cannot be merged into ``metrics.json`` at the end of an attempt (verl finished, or
  failed) print ``run failed: ...`` naming the file and the command to run, exit status 4;
* ``method.top_k`` above the model's vocabulary on the verl backend (a published hub checkpoint, a
  local folder's ``config.json``, the rehearsal's tiny model) is a config error naming the key, the dry
  run included.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runners import launch
from runners.embedded import trackers

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = [sys.executable, str(ROOT / "runners" / "launch.py")]
REFERENCE = "+experiment=qwen3_4b_sc_repro"
REHEARSAL = "+experiment=rehearsal"


def small(results: Path) -> list[str]:
    """A seconds-long embedded run (as in tests/test_embedded_trackers.py)."""
    return [f"results_root={results}", "trainer.total_steps=2", "trainer.prompts_per_step=4", "trainer.n=2",
            "backend.micro_batch_size=8", "eval.n=1", "trainer.test_freq=2", "trainer.save_freq=2",
            "backend.threads=1"]


def no_login_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a user who never logged in to W&B: no WANDB_* variables, no netrc, a fresh home."""
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_") and k != "NETRC"}
    return {**env, "HOME": str(home), "OMP_NUM_THREADS": "1", **extra}


def run_launcher(args: list[str], cwd: Path, env: dict[str, str] | None = None,
                 timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*LAUNCH, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=env or {**os.environ, "OMP_NUM_THREADS": "1"})


def one_line(stderr: str) -> str:
    """stderr's only line (a config error prints nothing else)."""
    assert stderr.splitlines() == [stderr.strip()], stderr
    return stderr.strip()


# -- trackers ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", [["backend.logger=[wandb]"], [REHEARSAL, "backend.logger=[console,file,wandb]"]],
                         ids=["embedded", "verl-rehearsal"])
def test_wandb_without_a_login_is_refused_before_anything_is_written(tmp_path, backend):
    results = tmp_path / "results"
    out = run_launcher([*backend, f"results_root={results}"], cwd=tmp_path, env=no_login_env(tmp_path / "home"))
    assert out.returncode == 2, out.stderr[-3000:]
    line = one_line(out.stderr)
    assert line.startswith("config error: backend.logger contains 'wandb', but it cannot start: W&B is in online "
                           "mode (WANDB_MODE=<unset>) and has no API key for https://"), line
    assert line.endswith("(no WANDB_API_KEY, no netrc entry); run `wandb login` or set WANDB_API_KEY, or set "
                         "WANDB_MODE=offline to log locally and `wandb sync` later; or remove 'wandb' from "
                         "backend.logger"), line
    assert "Traceback" not in out.stdout + out.stderr
    assert not results.exists() and not (tmp_path / "wandb").exists()


def test_wandb_offline_mode_runs_and_logs_locally(tmp_path):
    results = tmp_path / "results"
    out = run_launcher([*small(results), "backend.logger=[wandb]"], cwd=tmp_path,
                       env=no_login_env(tmp_path / "home", WANDB_MODE="offline"))
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))) == 1
    record = json.loads((results / "embedded_default" / "pg-seed42" / "metrics.json").read_text())
    assert [row["step"] for row in record["train"]] == [1, 2]


@pytest.mark.parametrize(("uri", "wanted"), [
    (None, "MLFLOW_TRACKING_URI is not set (verl would use sqlite:////tmp/mlruns.db, shared by every run and lost "
           "with /tmp); set MLFLOW_TRACKING_URI=sqlite:///<folder>/mlruns.db (a local store) or "
           "http://<host>:<port> (a server)"),
    ("sqlite:///{tmp}/a_file/mlruns.db", "MLFLOW_TRACKING_URI=sqlite:///{tmp}/a_file/mlruns.db: {tmp}/a_file is not "
                                         "a writable folder; set MLFLOW_TRACKING_URI=sqlite:///<folder>/mlruns.db"),
], ids=["no-uri", "store-under-a-file"])
def test_mlflow_without_a_store_is_refused_before_anything_is_written(tmp_path, monkeypatch, capsys, uri, wanted):
    monkeypatch.setattr(trackers, "_installed", lambda package: True)  # mlflow and SQLAlchemy, as if installed
    (tmp_path / "a_file").write_text("")
    if uri is None:
        monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    else:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri.format(tmp=tmp_path))
    results = tmp_path / "results"
    assert launch.cli(["backend.logger=[mlflow]", f"results_root={results}"]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith("config error: backend.logger contains 'mlflow', but it cannot start: "
                           + wanted.format(tmp=tmp_path)), line
    assert line.endswith("; or remove 'mlflow' from backend.logger")
    assert not results.exists()


# -- the end of a verl attempt ---------------------------------------------------------------------
FAKE_VERL = """\
#!{python}
import json, os, sys
with open(os.environ["VERL_FILE_LOGGER_PATH"], "w") as f:
    f.write(json.dumps({{"step": 1, "data": {{"critic/score/mean": 0.5}}}}) + "\\n")
    f.write("not a line of verl's file logger\\n")
    f.write(json.dumps({{"step": 2, "data": {{"critic/score/mean": 0.5}}}}) + "\\n")
print("step:2 - critic/score/mean:0.500", flush=True)
sys.exit({status})
"""


def write_reference_data(data: Path) -> None:
    """Parquet files where the reference experiment's data preparation writes them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for file, source in [("dapo_math_17k/train.parquet", "math_dapo"), ("aime2024/test.parquet", "aime2024"),
                         ("aime2025/test.parquet", "aime2025")]:
        (data / file).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist([{"data_source": source, "prompt": "x"}]), data / file)


@pytest.mark.parametrize("status", [0, 3])
def test_logs_that_cannot_be_merged_end_the_attempt_in_one_line(tmp_path, status):
    fake = tmp_path / "fake_python"
    fake.write_text(FAKE_VERL.format(python=sys.executable, status=status))
    fake.chmod(0o755)
    write_reference_data(tmp_path / "data")
    results = tmp_path / "results"
    out = run_launcher([REFERENCE, "method=tis", f"backend.python={fake}", "trainer.total_steps=2",
                        f"data.dir={tmp_path / 'data'}", f"results_root={results}"], cwd=tmp_path)
    assert out.returncode == launch.RUN_FAILED == 4, out.stderr[-3000:]
    run = results / "qwen3_4b_sc_repro" / "tis-seed42"
    attempt = run / "verl" / "attempt-001"
    merge = (f"verl's logs cannot be merged into {run}/metrics.json: {attempt}/metrics.jsonl:2: not a file-logger "
             "line (Expecting value: line 1 column 1 (char 0)) (the record is left as it was, verl's files are "
             f"kept); fix that, then merge again: python -m runners.verl_side.backend.ingest {run}")
    failed = (f"verl exited with status 3 in attempt 1 of tis-seed42 (last step seen: 2); see {attempt}/verl.log. "
              "Running the same command again resumes from the newest checkpoint. Also, ")
    assert out.stderr.splitlines()[-1] == f"run failed: {failed if status else ''}{merge}"  # above: the progress bar
    assert "Traceback" not in out.stdout + out.stderr
    assert not (run / "metrics.json").exists()  # nothing merged, nothing half-written
    assert (attempt / "metrics.jsonl").is_file() and (attempt / "verl.log").is_file()
    launch.run_lock.check_free(run)  # the lock went with the launcher


# -- method.top_k against the model's vocabulary (verl backend) -----------------------------------
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize(("args", "wanted"), [
    ([REFERENCE, "method=sc", "method.top_k=200000", "backend.dry_run=true"],
     "method.top_k=200000 is larger than the vocabulary of model.path=Qwen/Qwen3-4B (151936 tokens, the published "
     "config.json of Qwen/Qwen3-4B): the sampler's head cannot hold more ids than there are; allowed: "
     "1 <= method.top_k <= 151936"),
    ([REFERENCE, "method=pg", "method.top_k=101", "backend.dry_run=true", "model.path={tmp}/model"],
     "method.top_k=101 is larger than the vocabulary of model.path={tmp}/model (100 tokens, {tmp}/model/config.json): "
     "the sampler's head cannot hold more ids than there are; allowed: 1 <= method.top_k <= 100"),
    ([REHEARSAL, "method=sc", "method.top_k=39"],
     "method.top_k=39 is larger than the vocabulary of model.path={tmp}/results/.cache/rehearsal/tiny_qwen3 (38 "
     "tokens, the rehearsal's tiny Qwen3, runners/tiny/tokenizer.py): the sampler's head cannot hold more ids than "
     "there are; allowed: 1 <= method.top_k <= 38"),
    ([REFERENCE, "method=sc", "method.top_k=51", "backend.dry_run=true", "model.path=example-org/cached"],
     "method.top_k=51 is larger than the vocabulary of model.path=example-org/cached (50 tokens, {tmp}/hub/"
     "models--example-org--cached/snapshots/{commit}/config.json): the sampler's head cannot hold more ids than "
     "there are; allowed: 1 <= method.top_k <= 50"),
], ids=["hub-id-dry-run", "local-folder", "rehearsal", "hf-cache"])
def test_top_k_above_the_vocabulary_is_refused_before_anything_starts(tmp_path, monkeypatch, capsys, args, wanted):
    """The vocabulary of a local folder, the rehearsal's tiny model, a hub id in the local Hugging Face
    cache, or Qwen/Qwen3-4B's published one (on a machine that has not downloaded it)."""
    import huggingface_hub.constants

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps({"vocab_size": 100}))
    cached = tmp_path / "hub" / "models--example-org--cached"
    (cached / "refs").mkdir(parents=True)
    (cached / "refs" / "main").write_text(COMMIT)
    (cached / "snapshots" / COMMIT).mkdir(parents=True)
    (cached / "snapshots" / COMMIT / "config.json").write_text(json.dumps({"text_config": {"vocab_size": 50}}))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    results = tmp_path / "results"
    argv = [a.format(tmp=tmp_path) for a in args]
    assert launch.cli([*argv, f"data.dir={tmp_path / 'data'}", f"results_root={results}"]) == 2
    assert one_line(capsys.readouterr().err) == "config error: " + wanted.format(tmp=tmp_path, commit=COMMIT)
    assert not results.exists()


def test_top_k_at_the_vocabulary_passes_and_an_unknown_one_is_named(tmp_path, caplog):
    results = tmp_path / "results"
    common = [REFERENCE, "method=sc", "backend.dry_run=true", f"data.dir={tmp_path / 'data'}", f"results_root={results}"]
    assert launch.prevalidate([*common, "method.top_k=151936"]) == [results / "qwen3_4b_sc_repro" / "sc-seed42"]
    with caplog.at_level("WARNING", logger="runners.verl_side.backend.vocabulary"):
        launch.prevalidate([*common, "method.top_k=500000", "model.path=example-org/not-downloaded"])
    assert caplog.messages == ["method.top_k=500000 is not checked against the vocabulary of "
                               "model.path=example-org/not-downloaded: not a local folder, not in the Hugging Face "
                               "cache, not in runners/config/model_shapes.py's published shapes"]
    assert not results.exists()
