#!/usr/bin/env bash
# Re-resolve requirements/lock.txt: install the ranges of the requirements files into a new
# virtual environment (as a new machine would today), then freeze what got installed.
#   bash scripts/refresh_lock.sh        # then run the tests, and commit the lock if they pass
# Local version tags (torch 2.13.0+cpu) are dropped, so that the same lock installs the CUDA
# build of that version on a GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="$(mktemp -d)/venv"
python3 -m venv "$venv"
"$venv/bin/pip" install -q -r requirements.txt -r requirements/dev.txt -r requirements/trl.txt -r requirements/verl.txt
"$venv/bin/pip" install -q --no-deps -r requirements/no-deps.txt
{
    echo "# The exact versions the tests and the demo were run with: pip install ... -c requirements/lock.txt"
    echo "# Resolved by scripts/refresh_lock.sh on $(date -u +%Y-%m-%d) with $("$venv/bin/python" --version), $(uname -sm)."
    "$venv/bin/pip" freeze --exclude-editable | sed -E 's/\+[A-Za-z0-9.]+$//'
} > requirements/lock.txt
echo "wrote requirements/lock.txt ($(grep -c '==' requirements/lock.txt) pins) from $venv"
