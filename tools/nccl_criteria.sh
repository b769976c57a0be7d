#!/usr/bin/env bash
# Issue 14's acceptance figures on the shipped ABCI nccl-tests outputs (topologies/measured/abci),
# under the NCCL collective model at the version the jobs ran (2.8.4). Prints one line per
# criterion: median / worst |error| over the sizes named (1 KiB..32 MiB unless said).
#
#   tools/nccl_criteria.sh [path/to/dagsim] [extra dagsim flags...]
#
# 1. single node, fitted vs held-out sizes (`calibrate --hold-out`: every other size fitted);
# 2. multi-node: fit on 2 nodes only (single-node NVLink fit, then `calibrate` of the 2-node file
#    on top of it), then `collective --check` of the 4..32-node files with that calibration;
#    broadcast: the V100 broadcast file with the same calibration;
# 3. presets only, nothing fitted: bus bandwidth error at >= 1 MiB (busbw error is
#    measured_time / predicted_time - 1, the time error's reciprocal);
# Criteria 4-6 (validation sets, tests, bench) have their own commands (see the README there).
set -euo pipefail
BIN=${1:-target/release/dagsim}
shift || true
D=topologies/measured/abci
M=(--collective-model nccl --nccl-version 2.8.4 "$@")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# median and worst of |column| from CSV rows on stdin; $1 = awk filter expression. Rows of
# `collective --check` (a `ran` column) also name the worst one: GPUs, bytes, what ran, signed error.
stats() {
  awk -F, "NR==1 { for (i=1;i<=NF;i++) h[\$i]=i; next }
    ($1) { e=\$NF; a=(e<0)?-e:e; w=\"\"; if (h[\"ran\"]) w=sprintf(\"%s GPUs, %s B, %s, %+.1f%%\", \$h[\"gpus\"], \$h[\"bytes\"], \$h[\"ran\"], 100*e); print a \"|\" w }" |
    sort -t"|" -k1,1g |
    awk -F"|" '{ a[NR]=$1; w[NR]=$2 } END { if (NR==0) { print "n/a"; exit } m = (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2;
      printf "median %.1f%%, worst %.1f%% (%d sizes%s)", 100*m, 100*a[NR], NR, (w[NR]=="") ? "" : "; worst: " w[NR] }'
}
# busbw error column from collective --check csv: measured_us / predicted_us - 1
busbw() {
  awk -F, 'NR==1 { for (i=1;i<=NF;i++) h[$i]=i; print "x,error"; next }
    $h["bytes"] >= 1048576 { print "x," ($h["measured_us"]/$h["predicted_us"] - 1) }'
}
holdout() { # file topology -> fitted / held-out lines
  "$BIN" calibrate "$D/$1" --topology "$2" "${M[@]}" --hold-out --format csv -q 2>/dev/null >"$T/h.csv"
  echo "  $1: fitted $(awk -F, 'NR==1||($4>=1024 && $8=="false")' "$T/h.csv" | awk -F, 'BEGIN{OFS=","}{print $1,$7}' | stats 1);" \
    "held out $(awk -F, 'NR==1||($4>=1024 && $8=="true")' "$T/h.csv" | awk -F, 'BEGIN{OFS=","}{print $1,$7}' | stats 1)"
}
check() { # file topology [calibration] -> csv on stdout
  local cal=()
  [ -n "${3:-}" ] && cal=(--calibration "$3")
  "$BIN" collective --check "$D/$1" --topology "$2" "${M[@]}" "${cal[@]}" --format csv -q
}

echo "1. single node, fitted <= 10%, held out <= 15% (calibrate --hold-out, sizes >= 1 KiB)"
holdout allreduce_intra_vnode_4gpu.nccl abci-v
holdout allreduce_intra_anode_4gpu.nccl abci-a
holdout allreduce_intra_anode_8gpu.nccl abci-a
# (broadcast: calibrate --hold-out fits single-node all-reduces only)

echo "2. fit on 2 nodes only, predict 4..32 nodes: all-reduce median <= 10%, worst <= 25%; broadcast median <= 15%"
"$BIN" calibrate "$D/allreduce_intra_vnode_4gpu.nccl" --topology abci-v "${M[@]}" -q -o "$T/v1.cal.json" >/dev/null
"$BIN" calibrate "$D/allreduce_inter_vnode_2node.nccl" --topology abci-v "${M[@]}" -q \
  --calibration "$T/v1.cal.json" -o "$T/v2n.cal.json" >/dev/null
for n in 4 8 16 32; do
  check allreduce_inter_vnode_${n}node.nccl abci-v "$T/v2n.cal.json" >"$T/c.csv"
  echo "  ${n} nodes: $(stats '$4>=1024' <"$T/c.csv")"
done
for n in 4 8 16 32; do check allreduce_inter_vnode_${n}node.nccl abci-v "$T/v2n.cal.json"; done |
  awk -F, 'NR==1 || $1!="op"' >"$T/all.csv"
echo "  4..32 nodes pooled: $(stats '$4>=1024' <"$T/all.csv")"
check bcast_intra_vnode_4gpu.nccl abci-v "$T/v2n.cal.json" >"$T/b.csv"
echo "  broadcast (V100, 1 node, same calibration): $(stats '$4>=1024' <"$T/b.csv")"

echo "3. presets only: busbw at >= 1 MiB within 20%"
for f in "$D"/*.nccl; do
  f=$(basename "$f")
  topo=abci-v
  case $f in *anode*) topo=abci-a ;; esac
  check "$f" $topo | busbw >"$T/p.csv"
  within=$(awk -F, 'NR>1 { e=$2; if (e<0) e=-e; n++; if (e<=0.2) k++ } END { printf "%d/%d within 20%%", k, n }' "$T/p.csv")
  echo "  $f: busbw $(stats 1 <"$T/p.csv"); $within"
done

# 4. presets only, the ABCI outputs not shipped in topologies/measured/abci (A-node all-reduce
#    across nodes, every broadcast): read from the originals when they are on this machine.
RAW=${ABCI_RAW:-/work/shared/data/aistabci_abci2.0benchmark}
if [ -d "$RAW" ]; then
  echo "4. presets only, the other ABCI nccl-tests outputs ($RAW): busbw at >= 1 MiB within 20%"
  for f in "$RAW"/allreduce/inter_anode/*.nccl "$RAW"/bcast/*/*.nccl; do
    topo=abci-v
    case $f in *anode*) topo=abci-a ;; esac
    "$BIN" collective --check "$f" --topology $topo "${M[@]}" --format csv -q | busbw >"$T/p.csv"
    within=$(awk -F, 'NR>1 { e=$2; if (e<0) e=-e; n++; if (e<=0.2) k++ } END { printf "%d/%d within 20%%", k, n }' "$T/p.csv")
    echo "  ${f#"$RAW"/}: busbw $(stats 1 <"$T/p.csv"); $within"
  done
fi
