"""The head file (runners/verl_side/logits_processor/head_file.py): the layout the logits processor writes and the server reads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from runners.verl_side.logits_processor import FILES_ENV as HEAD_FILES_ENV
from runners.verl_side.logits_processor.head_file import (
    check_aligned,
    discard,
    file_bytes,
    new_folder,
    open_rows,
    take,
)

REPO = Path(__file__).resolve().parents[1]


def test_rows_written_are_the_rows_taken_and_the_file_goes(tmp_path):
    path = tmp_path / "r.head"
    ids, lps = open_rows(path, k=3, max_tokens=5)
    assert path.stat().st_size == file_bytes(3, 5) == 5 * 3 * 8
    ids[0], lps[0] = [4, 1, 2], [-0.1, -2.5, -3.0]
    ids[1], lps[1] = [7, 4, 0], [-0.5, -1.0, -4.0]
    got_ids, got_lps = take(path, tokens=2, k=3)
    assert got_ids.dtype == np.int32 and got_lps.dtype == np.float32
    assert got_ids.tolist() == [[4, 1, 2], [7, 4, 0]]
    assert np.allclose(got_lps, [[-0.1, -2.5, -3.0], [-0.5, -1.0, -4.0]])
    assert not path.exists()


def test_reopening_keeps_the_rows_of_a_preempted_request(tmp_path):
    path = tmp_path / "r.head"
    ids, lps = open_rows(path, k=2, max_tokens=4)
    ids[0], lps[0] = [9, 8], [-1.0, -2.0]
    del ids, lps
    ids, lps = open_rows(path, k=2, max_tokens=4)  # the engine re-adds the request after a preemption
    ids[1], lps[1] = [5, 6], [-0.5, -0.7]
    got_ids, _ = take(path, tokens=2, k=2)
    assert got_ids.tolist() == [[9, 8], [5, 6]]


def test_bad_files_and_sizes_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no head file .*logits processor"):
        take(tmp_path / "missing.head", tokens=1, k=2)
    short = tmp_path / "short.head"
    short.write_bytes(b"\0" * 10)
    with pytest.raises(ValueError, match="10 bytes, not a head file of k=2 with rows for 1 tokens"):
        take(short, tokens=1, k=2)
    assert short.exists()  # a file that is not a head file is left alone
    open_rows(tmp_path / "r.head", k=2, max_tokens=4)
    with pytest.raises(ValueError, match="64 bytes, not a head file of k=2 with rows for 5 tokens"):
        take(tmp_path / "r.head", tokens=5, k=2)
    with pytest.raises(ValueError, match="k >= 1"):
        open_rows(tmp_path / "z.head", k=0, max_tokens=4)
    discard(tmp_path / "r.head")
    discard(tmp_path / "r.head")  # twice: nothing to remove
    assert not (tmp_path / "r.head").exists()


def test_the_folder_is_the_environments_or_a_new_one(tmp_path, monkeypatch):
    monkeypatch.setenv(HEAD_FILES_ENV, str(tmp_path / "a" / "b"))
    assert new_folder() == str(tmp_path / "a" / "b") and (tmp_path / "a" / "b").is_dir()
    monkeypatch.delenv(HEAD_FILES_ENV)
    # a folder of its own goes with the process that made it (a GPU launch's vLLM server sets no folder)
    made = subprocess.run([sys.executable, "-c", "from runners.verl_side.logits_processor.head_file import new_folder; "
                           "import os; f = new_folder(); print(f); assert os.path.isdir(f)"],
                          capture_output=True, text=True, check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    folder = made.stdout.strip()
    assert "sc-vllm-heads-" in folder and not os.path.exists(folder)


def test_a_head_a_row_off_its_tokens_is_refused():
    rng = np.random.default_rng(0)
    rows = 12
    log_probs = np.log(rng.dirichlet(np.ones(6) * 0.5, size=rows)).astype(np.float32)
    ids = np.argsort(-log_probs, axis=1)[:, :4].astype(np.int32)  # the top 4 of 6 ids per row
    head = np.take_along_axis(log_probs, ids, axis=1)
    tokens = [int(ids[r, r % 2]) for r in range(rows)]  # each token among its row's top 2
    sampled = [float(log_probs[r, t]) for r, t in enumerate(tokens)]
    check_aligned(ids, head, tokens, sampled)
    with pytest.raises(RuntimeError, match="not the distribution token"):
        check_aligned(ids[1:], head[1:], tokens[:-1], sampled[:-1])  # row r holds token r + 1's distribution
    check_aligned(ids, head, [int(np.argmin(log_probs[r])) for r in range(rows)], sampled)  # tokens outside the head
