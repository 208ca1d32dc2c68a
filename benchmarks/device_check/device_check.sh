#!/usr/bin/env bash
# Device check for a borrowed GPU machine as it is: python3 from PATH with torch, triton and
# transformers, no verl/Ray/vLLM/Hydra, no installs, no network; only this working tree carried.
#
#   OUT=/some/empty/dir bash benchmarks/device_check/device_check.sh [--cpu-small] [--budget-s S] [--parts ...]
#
# Runs python3 -m benchmarks.device_check with PYTHONPATH set to the repository root (the project is not
# installed there) and writes device_check.json and device_check.md to $OUT (results/device_check
# when $OUT is unset). The Python side keeps a 420 s budget; `timeout` stops it at
# DEVICE_CHECK_LIMIT_S (470 s) in any case, so one call ends within 8 minutes; the outputs are
# rewritten after every part, so a stopped check still leaves the parts it finished.
# Exit status: the Python side's (0: every part ran or was skipped with a reason; 1: a part failed; 2: OUT
# cannot be written, before any part runs; 3: no CUDA device is visible, so no GPU part ran),
# 124 or 137 when stopped by the timeout. What each part measures: docs/device_check.md.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT_DIR="${OUT:-$ROOT/results/device_check}"
case "$OUT_DIR" in /*) ;; *) OUT_DIR="$PWD/$OUT_DIR" ;; esac  # relative to the caller, not to $ROOT
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
cd "$ROOT" || exit 1
command -v python3 >/dev/null || { echo "device_check: no python3 on PATH" >&2; exit 1; }
limit="${DEVICE_CHECK_LIMIT_S:-470}"
if command -v timeout >/dev/null; then
    timeout --kill-after=10 "$limit" python3 -m benchmarks.device_check --out "$OUT_DIR" "$@"
else
    python3 -m benchmarks.device_check --out "$OUT_DIR" "$@"
fi
status=$?
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    echo "device_check: stopped after ${limit} s; $OUT_DIR holds the parts that finished" >&2
fi
exit "$status"
