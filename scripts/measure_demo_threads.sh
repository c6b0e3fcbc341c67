#!/usr/bin/env bash
# The demo at 1 and 2 threads, on an idle machine and beside one busy process (a Python loop
# on one core), to choose --threads' default for the toy (grpo_ba_support/run.py, pick_threads).
#   bash scripts/measure_demo_threads.sh OUT_DIR      # run from the repository root, machine idle
# Its output for the choice made: assets/demo-threads/results.txt.
set -uo pipefail
out="$(realpath -m "${1:?usage: bash scripts/measure_demo_threads.sh OUT_DIR}")"
mkdir -p "$out"
echo "machine: $(lscpu | grep 'Model name' | sed 's/ \+/ /g'), $(nproc) cores, torch $(python -c 'import torch;print(torch.__version__, torch.backends.cpu.get_cpu_capability())'), commit $(git rev-parse --short HEAD)"
for busy in idle busy; do
  for steps in 5 30; do
    for t in 1 2; do
      [ "$busy" = busy ] && [ "$steps" = 30 ] && continue
      bp=""
      if [ "$busy" = busy ]; then python -c "while True: pass" & bp=$!; sleep 1; fi
      run="$out/run-$busy-$steps-$t"
      rm -rf "$run"
      s=$(date +%s.%N)
      timeout 900 python grpo_ba.py --steps "$steps" --threads "$t" --output-dir "$run" > "$run.log" 2>&1
      rc=$?
      e=$(date +%s.%N)
      [ -n "$bp" ] && kill "$bp"
      echo "$busy steps=$steps threads=$t rc=$rc wall_s=$(python -c "print(round($e-$s,1))")"
    done
  done
done
