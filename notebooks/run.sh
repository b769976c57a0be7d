#!/usr/bin/env bash
# Executes every notebook headless with papermill; fails if any cell fails.
# Usage: notebooks/run.sh [path/to/dagsim]   (default: target/release/dagsim)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DAGSIM=$(realpath "${1:-$HERE/../target/release/dagsim}")
cd "$HERE"
mkdir -p out
for nb in *.ipynb; do
    echo "running $nb"
    python3 -m papermill --log-level WARNING "$nb" "out/$nb" -p dagsim "$DAGSIM" -p out_dir out
done
