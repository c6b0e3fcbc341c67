#!/usr/bin/env bash
# A registered design's two streams (grpo_ba_lab/analysis/registered_design.py), started or
# resumed in one command:
#   bash scripts/design_streams.sh DESIGN.json RUNS_DIR PAUSE_AT    # PAUSE_AT: UTC, YYYY-MM-DDTHH:MM
# e.g. bash scripts/design_streams.sh registrations/headline-v5.json ../runs-headline-v5 2026-12-07T13:10
# It unpacks the committed parts into RUNS_DIR (finished units are skipped), checks out the
# commit the design's runs come from in a worktree beside the repository (the commit that added
# its worlds file, for a design whose worlds a rule chose; else the one that added its
# registration), and launches each registered variant there, one thread each, in the
# background; each stream's log is RUNS_DIR/stream-VARIANT.log. Before the session ends:
#   python -m grpo_ba_lab.analysis.registered_design DESIGN.json archive RUNS_DIR
# and commit the new part at once, with the streams' logs (the design's report folder, logs/).
# regime-v4's streams ran from scripts/regime_v4_streams.sh, this script's first version.
set -euo pipefail
usage="usage: bash scripts/design_streams.sh DESIGN.json RUNS_DIR PAUSE_AT"
design="${1:?$usage}"
runs="$(realpath -m "${2:?$usage}")"
pause_at="${3:?$usage}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
read -r name registration worlds variants < <(python - "$repo/$design" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(d["name"], d["registration"], d.get("worlds_file", "-"), ",".join(d["variants"]))
PY
)
source_file="$registration"
[ "$worlds" != "-" ] && source_file="$worlds"
commit="$(git -C "$repo" log --diff-filter=A --format=%H -- "$source_file" | tail -1)"
[ -n "$commit" ] || { echo "$source_file is not committed: no run may start before it is" >&2; exit 2; }
worktree="$repo/../$name-worktree"
mkdir -p "$runs"
python -m grpo_ba_lab.analysis.registered_design "$repo/$design" extract "$runs"
[ -d "$worktree" ] || git -C "$repo" worktree add --detach "$worktree" "$commit"
[ "$(git -C "$worktree" rev-parse HEAD)" = "$commit" ] && [ -z "$(git -C "$worktree" status --porcelain)" ] \
    || { echo "$worktree is not a clean checkout of $commit" >&2; exit 2; }
cd "$worktree"
for variant in ${variants//,/ }; do
    echo "$(date -u +%FT%T) launch $variant commit $commit pause-at $pause_at" >> "$runs/stream-$variant.log"
    PYTHONUNBUFFERED=1 setsid nohup python -m grpo_ba_lab.analysis.registered_design "$design" run \
        --variant "$variant" --output-dir "$runs" --cache-dir "$runs/cache-$variant" --pause-at "$pause_at" \
        >> "$runs/stream-$variant.log" 2>&1 < /dev/null &
done
echo "launched $name's streams from $worktree ($commit); progress:"
echo "  python -m grpo_ba_lab.analysis.registered_design $design progress $runs"
