#!/usr/bin/env bash
# regime-v4 streams: from the registration commit's worktree, one thread each, side by side.
cd /work/wt-v4
source /work/venv/bin/activate
export PYTHONUNBUFFERED=1
for V in avx2-1t default-1t; do
  echo "$(date -u +%FT%T) launch $V commit $(git rev-parse HEAD) dirty=$(git status --porcelain | wc -l) pause-at $1" >> /work/runs-regime-v4/stream-$V.log
  setsid nohup python -m grpo_ba_lab.analysis.regime_v4 run --variant $V --output-dir /work/runs-regime-v4 \
     --cache-dir /work/cache-v4-$V --pause-at "$1" >> /work/runs-regime-v4/stream-$V.log 2>&1 < /dev/null &
done
