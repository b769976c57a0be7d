#!/usr/bin/env bash
# `calibrate --gpu` then `replay --gpu` of short synthetic traces on one GPU (each iteration well
# under a second; the shipped AlexNet trace's K80 iteration is 17 s). Usage: BIN=... OUT=dir TRACES="a.csv b.csv"
set -u
BIN=${BIN:-target/release/dagsim}; OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
. "$(dirname "$0")/libs.sh"
"$BIN" calibrate --gpu -o "$OUT/cal.json" --topology-out "$OUT/node.json" --base-topology v100-cluster \
    --calibration-out "$OUT/links.cal.json" --gemm-sizes 1024,4096,8192 2>&1 | tail -20
for t in $TRACES; do
  n=$(basename "$t" .csv)
  echo "== replay $n on dgx-h100"
  timeout 100 "$BIN" replay --gpu --trace "$t" --gpus 1 --topology dgx-h100 --format json > "$OUT/replay_$n.json" 2> "$OUT/replay_$n.err"
  echo "rc $?"; cat "$OUT/replay_$n.err"; head -c 1500 "$OUT/replay_$n.json"; echo
done
echo "== replay resnet50 on the measured node file"
timeout 60 "$BIN" replay --gpu --trace "${TRACES%% *}" --gpus 1 --topology "$OUT/node.json" 2>&1 | tail -8
