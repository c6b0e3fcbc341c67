#!/usr/bin/env bash
# GPU check (one GPU, no hub access): a few GRPO steps at Qwen3-1.7B's real shape.
set -euo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
PYTHONUNBUFFERED=1 python3 scripts/gpu_check.py --steps "${STEPS:-3}" --new-tokens "${NEW_TOKENS:-1000}" "$@"
