#!/usr/bin/env bash
# Where `replay --gpu` spends its time: a verbose run under a time limit, with the stacks of every
# thread taken by cuda-gdb while it runs. Usage: BIN=... OUT=dir tools/gpu/replay_debug.sh
set -u
BIN=${BIN:-target/release/dagsim}; OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
. "$(dirname "$0")/libs.sh"
"$BIN" replay --gpu --trace traces/alexnet_k80.csv --gpus 1 --dry-run 2>&1 | tail -15
timeout 45 "$BIN" replay --gpu --trace traces/alexnet_k80.csv --gpus 1 --repeat 1 --warmup 0 -vvv > "$OUT/r.out" 2> "$OUT/r.err" &
P=$!
sleep 20
nvidia-smi --query-gpu=utilization.gpu,clocks.sm,power.draw --format=csv
PID=$(pgrep -f 'dagsim replay' | head -1)
timeout 60 cuda-gdb -p "$PID" -batch -ex 'info threads' -ex 'thread apply all bt 30' > "$OUT/bt.txt" 2>&1
wait $P; echo "replay rc $?"
tail -20 "$OUT/r.err"; tail -5 "$OUT/r.out"; grep -v "^\[New\|^$" "$OUT/bt.txt" | head -120
