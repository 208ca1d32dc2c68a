#!/usr/bin/env bash
# GPU smoke check of the verl backend, for your own GPU machine (what has run on a GPU so far: docs/verl_reference.md,
# "What has been verified").
#
# NEEDS: one CUDA GPU and the project installed with its [gpu] extra -- verl, Ray and vLLM (plus
# Hydra, OmegaConf and the rest of the project's dependencies): pip install -e ".[gpu,test]".
# A machine with only torch and transformers (the borrowed GPU) cannot run this: use
# benchmarks/device_check/device_check.sh there (docs/device_check.md).
#
#   bash benchmarks/gpu_smoke/gpu_smoke.sh [OUT_DIR]
#
# Runs verl's real V1 separate_async trainer (FSDP2 trainer + vLLM rollout, on Ray) for 3 steps per
# arm on a tiny Qwen3 saved locally (no hub access), then checks each run folder with
# `python -m runners.run.contract_check`. Trainer and vLLM share the one GPU (backend.placement.shared_gpu: Ray is
# told there are 2 GPUs and is kept from setting CUDA_VISIBLE_DEVICES), and vLLM takes 30% of the memory. All four arms run: on verl
# 0.9.1 the SC arms' sampler head goes by the project's transport (runners/verl_side/head, its vLLM server piece
# included).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="$(realpath -m "${1:-results/gpu_smoke_assets}")"
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'gpu_smoke: no CUDA GPU visible')"
python -c "import vllm, ray, verl" || {
    echo "gpu_smoke: needs vLLM, Ray and verl (the [gpu] extra): pip install -e '.[gpu,test]';" \
         "on a machine with torch and transformers only, run benchmarks/device_check/device_check.sh" >&2; exit 1; }

python benchmarks/gpu_smoke/assets.py "$OUT"

arms=pg,tis,sc,sc_tis   # an install that cannot carry the SC arms' head stops at the launcher, naming what it lacks

python runners/launch.py -m +experiment=qwen3_4b_sc_repro "method=$arms" seed=42 \
    sweep=gpu_smoke "results_root=$OUT/results" "model.path=$OUT/model" model.enable_thinking=false \
    "data.dir=$OUT/data" data.train.rows=null data.train.rows_after_filter=null \
    data.eval_sets.0.size=3 data.eval_sets.1.size=3 \
    trainer.total_steps=3 trainer.test_freq=3 trainer.save_freq=3 trainer.prompts_per_step=4 trainer.n=4 \
    eval.n=2 rollout.max_prompt_length=256 rollout.max_response_length=64 \
    backend.placement.trainer_gpus_per_node=1 backend.placement.rollout_gpus_per_node=1 \
    backend.placement.rollout_tensor_parallel=1 backend.placement.shared_gpu=true \
    backend.rollout_engine.gpu_memory_utilization=0.3 \
    backend.rollout_engine.agent_workers=1 backend.actor.max_token_len_per_gpu=4096 \
    backend.actor.use_torch_compile=false backend.actor.gradient_checkpointing=false

status=0
for arm in ${arms//,/ }; do
    python -m runners.run.contract_check "$OUT/results/gpu_smoke/$arm-seed42" || status=1
done
exit $status
