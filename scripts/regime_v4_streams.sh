#!/usr/bin/env bash
# regime-v4's two streams (registrations/regime-v4.md), started or resumed in one command:
#   bash scripts/regime_v4_streams.sh RUNS_DIR PAUSE_AT     # PAUSE_AT: UTC, YYYY-MM-DDTHH:MM
# It unpacks the committed parts into RUNS_DIR (finished units are skipped), checks out the
# registration's commit in a worktree beside the repository, and launches avx2-1t and
# default-1t there, one thread each, in the background; each stream's log is
# RUNS_DIR/stream-VARIANT.log. Before the session ends:
#   python -m grpo_ba_lab.analysis.regime_v4 archive RUNS_DIR --out assets/regime-v4/archive
# and commit the new part with the streams' logs (assets/regime-v4/logs/).
set -euo pipefail
runs="$(realpath -m "${1:?usage: bash scripts/regime_v4_streams.sh RUNS_DIR PAUSE_AT}")"
pause_at="${2:?usage: bash scripts/regime_v4_streams.sh RUNS_DIR PAUSE_AT}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
commit="$(git -C "$repo" log --diff-filter=A --format=%H -- registrations/regime-v4.md | tail -1)"
worktree="$repo/../regime-v4-worktree"
mkdir -p "$runs"
python -m grpo_ba_lab.analysis.regime_v4 extract "$repo/assets/regime-v4/archive" "$runs" 2>/dev/null \
    || echo "no committed part yet"
[ -d "$worktree" ] || git -C "$repo" worktree add --detach "$worktree" "$commit"
[ "$(git -C "$worktree" rev-parse HEAD)" = "$commit" ] && [ -z "$(git -C "$worktree" status --porcelain)" ] \
    || { echo "$worktree is not a clean checkout of $commit" >&2; exit 2; }
cd "$worktree"
for variant in avx2-1t default-1t; do
    echo "$(date -u +%FT%T) launch $variant commit $commit pause-at $pause_at" >> "$runs/stream-$variant.log"
    PYTHONUNBUFFERED=1 setsid nohup python -m grpo_ba_lab.analysis.regime_v4 run --variant "$variant" \
        --output-dir "$runs" --cache-dir "$runs/cache-$variant" --pause-at "$pause_at" \
        >> "$runs/stream-$variant.log" 2>&1 < /dev/null &
done
echo "launched both streams from $worktree ($commit); progress: python -m grpo_ba_lab.analysis.regime_v4 progress $runs"
