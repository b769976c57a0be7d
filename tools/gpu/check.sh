#!/usr/bin/env bash
# The GPU checks of dagsim's cuda backend, in one run on a machine with an NVIDIA GPU (docs/gpu.md):
# `calibrate --gpu` (GEMMs, host copies; peers and NCCL with 2+ GPUs), `replay --gpu` of the shipped
# AlexNet trace, and tools/gpu/matmul_sweep.py (sustained GEMM and attention rates through PyTorch).
# Usage: BIN=path/to/dagsim-built-with-cuda OUT=dir tools/gpu/check.sh
set -u
BIN=${BIN:-target/release/dagsim}
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
log() { echo "== $* ($(date -u +%T))"; }

. "$(dirname "$0")/libs.sh"

log nvidia-smi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
log "calibrate --gpu"
"$BIN" calibrate --gpu -o "$OUT/cal.json" --topology-out "$OUT/node.json" --base-topology dgx-h100 \
    --calibration-out "$OUT/links.cal.json" --nccl-table "$OUT/allreduce.nccl" 2>&1 | tee "$OUT/calibrate.log"
echo "exit ${PIPESTATUS[0]}"
log "replay --gpu (AlexNet trace, 1 GPU)"
"$BIN" replay --gpu --trace traces/alexnet_k80.csv --gpus 1 --repeat 5 --format json > "$OUT/replay.json" 2> "$OUT/replay.err"
echo "exit $?"; cat "$OUT/replay.err"; head -c 3000 "$OUT/replay.json"; echo
log "replay --gpu (AlexNet trace on the measured node file)"
"$BIN" replay --gpu --trace traces/alexnet_k80.csv --gpus 1 --topology "$OUT/node.json" 2>&1 | tee "$OUT/replay_node.txt"
[ -n "${SKIP_SWEEP:-}" ] && { log done; exit 0; }
log "matmul_sweep.py"
python3 tools/gpu/matmul_sweep.py --seconds 1.0 --preheat 8 > "$OUT/rates.csv" 2> "$OUT/rates.err"
echo "exit $?"; tail -5 "$OUT/rates.err"; cat "$OUT/rates.csv"
log done
