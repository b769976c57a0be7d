#!/usr/bin/env bash
# Where the single-node ABCI nccl-tests outputs and the NCCL model part, protocol by protocol:
# over the sizes where NCCL 2.8.4 runs one protocol (the measured times jump where its tuner
# switches), a least-squares line time = intercept + slope x size through the measured times and
# through the model's (presets only, that protocol forced). A slope gap is a rate the model has
# wrong; an intercept gap a cost per call. topologies/measured/abci/README.md reads the table.
#
#   tools/nccl_protocol_fits.sh [path/to/dagsim]
set -euo pipefail
BIN=${1:-target/release/dagsim}
D=topologies/measured/abci

fit() { # file topology protocol smallest largest
  "$BIN" collective --check "$D/$1.nccl" --topology "$2" --collective-model nccl --nccl-version 2.8.4 \
    --nccl-proto "$3" --format csv -q |
    awk -F, -v lo="$4" -v hi="$5" -v name="$1 $3" '
      NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
      $h["bytes"] >= lo && $h["bytes"] <= hi {
        x = $h["bytes"] / 1048576; m = $h["measured_us"]; p = $h["predicted_us"]
        n++; sx += x; sxx += x * x; sm += m; sxm += x * m; sp += p; sxp += x * p; ran = $h["ran"]
      }
      END {
        d = n * sxx - sx * sx
        bm = (n * sxm - sx * sm) / d; am = (sm - bm * sx) / n
        bp = (n * sxp - sx * sp) / d; ap = (sp - bp * sx) / n
        printf "%-38s %3d sizes  measured %6.1f us + %5.1f us/MiB  model %6.1f us + %5.1f us/MiB  (%s)\n",
          name, n, am, bm, ap, bp, ran
      }'
}

fit allreduce_intra_vnode_4gpu abci-v LL 16384 262144
fit allreduce_intra_vnode_4gpu abci-v LL128 524288 2097152
fit allreduce_intra_vnode_4gpu abci-v Simple 4194304 33554432
fit allreduce_intra_anode_4gpu abci-a LL 131072 1048576
fit allreduce_intra_anode_4gpu abci-a LL128 2097152 4194304
fit allreduce_intra_anode_4gpu abci-a Simple 8388608 33554432
fit allreduce_intra_anode_8gpu abci-a LL 131072 1048576
fit allreduce_intra_anode_8gpu abci-a LL128 2097152 8388608
fit allreduce_intra_anode_8gpu abci-a Simple 16777216 33554432
fit bcast_intra_vnode_4gpu abci-v LL128 1048576 33554432

# Where the tuner adds an LL channel for every 4 KiB a rank (one LL grain of 512 threads x 8 bytes
# per channel and rank), each channel's work stays the same while the channels double: the model
# (presets) stays flat, the measured time grows by about 1 us per added channel, on 6-step (4 GPUs)
# and 14-step (8 GPUs) rings alike: a cost per call and channel, not per step. Across nodes the
# same ladder (ring/LL at channels x ranks x 4 KiB; tree/LL at channels x 4 KiB, a tree piece not
# being split among ranks) grows by 2-5 us per added channel on 14- to 126-step rings; the last
# column is (time at the most channels - time at one) / (channels - 1), measured / model.
ladder() { # file topology algorithm
  "$BIN" collective --check "$D/$1.nccl" --topology "$2" --collective-model nccl --nccl-version 2.8.4 \
    --format csv -q |
    awk -F, -v name="$1" -v algo="${3:-ring}" '
      NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
      { split($h["ran"], r, " x"); nc = r[2]; grain = nc * 4096 * (algo == "ring" ? $h["gpus"] : 1) }
      $h["ran"] ~ ("^" algo "/LL x") && $h["bytes"] == grain {
        line = line sprintf("  x%d %.1f/%.1f", nc, $h["measured_us"], $h["predicted_us"])
        if (nc == 1) { m1 = $h["measured_us"]; p1 = $h["predicted_us"] }
        top = nc; mt = $h["measured_us"]; pt = $h["predicted_us"]
      }
      END {
        per = (m1 != "" && top > 1) ? sprintf("  per added channel %+.1f/%+.1f", (mt - m1) / (top - 1), (pt - p1) / (top - 1)) : ""
        printf "%-44s channels: measured/model us%s%s\n", name " " algo "/LL ladder", line, per
      }'
}
ladder allreduce_intra_vnode_4gpu abci-v
ladder allreduce_intra_anode_4gpu abci-a
ladder allreduce_intra_anode_8gpu abci-a
for n in 2 4 8 16; do ladder allreduce_inter_vnode_${n}node abci-v; done
for n in 4 8 16 32; do ladder allreduce_inter_vnode_${n}node abci-v tree; done
