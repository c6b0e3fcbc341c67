#!/usr/bin/env bash
# GPU check (one GPU, no hub access): GRPO steps at Qwen3-1.7B's real shape, the preset's
# batch (8 x 8), each rollout engine side by side: per engine generated tokens/s, the
# sampling share of the step, peak memory and the fraction of the memory-bandwidth limit.
#   bash scripts/gpu_check.sh                          # every engine, 2 steps each (over 8 min on an H200: the steps took 517 s on 2026-12-04)
#   ENGINES=generate,static STEPS=3 bash scripts/gpu_check.sh --shape qwen2.5-math-7b
set -euo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
PYTHONUNBUFFERED=1 python3 scripts/gpu_check.py --steps "${STEPS:-2}" --new-tokens "${NEW_TOKENS:-1000}" \
    --engines "${ENGINES:-generate,static,paged}" "$@"
