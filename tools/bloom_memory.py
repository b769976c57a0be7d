#!/usr/bin/env python3
"""BLOOM's measured peak memory (nvidia-smi, the topology benchmarks' `mem` column) against
`dagsim predict --format json`'s busiest stage, for every row of validation/bloom_a100.csv and
validation/large/bloom_a100_large.csv with a figure, and the six OOM runs.
Usage: tools/bloom_memory.py [DAGSIM] (run from the repository root; DAGSIM defaults to
target/release/dagsim). Prints one line per row, then median, mean, range and OOM agreement."""
import csv, json, os, re, statistics, subprocess, sys

DAGSIM = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/release/dagsim")
BENCH = "/work/shared/data/bigscience-workshop_bigscience/bloom176b_topology_benchmarks.csv"
GIB = 1 << 30

def read(path):
    return list(csv.DictReader(l for l in open(path) if not l.startswith("#")))

def peak(model, gpus, parallel, mb, gbs, seq, topology="topologies/jean-zay-a100.json", cwd="validation"):
    out = subprocess.run(
        [DAGSIM, "predict", "--model", model, "--topology", topology, "--gpus", str(gpus),
         "--parallel", parallel, "--micro-batch", str(mb), "--global-batch", str(gbs), "--seq-len", str(seq),
         "--precision", "bf16", "--gpu", "a100-sxm4-80gb", "--iterations", "2", "--format", "json", "-q"],
        cwd=cwd, capture_output=True, text=True)
    if out.returncode != 0:
        m = re.search(r"needs ([0-9.]+) GiB", out.stderr)
        if m:
            return float(m.group(1)), False
        raise SystemExit(out.stderr)
    return json.loads(out.stdout)[0]["llm"]["memory"]["total"] / GIB, True

bench = read(BENCH)
mem = {r["row_line"]: r["mem"] for r in bench}
errs = []
for path in ["validation/bloom_a100.csv", "validation/large/bloom_a100_large.csv"]:
    for r in read(path):
        lines = re.findall(r"l\.(\d+)", r["source"])
        figs = [mem[l] for l in lines if re.fullmatch(r"[0-9.]+GB", mem.get(l, ""))]
        if not figs:
            continue
        measured = statistics.mean(float(f[:-2]) for f in figs)
        got, fits = peak(r["model"], r["gpus"], r["parallel"], r["micro_batch"], r["global_batch"], r["seq_len"],
                         r["topology"], os.path.dirname(path))
        errs.append(got / measured - 1)
        print(f"{r['id']:50s} measured {measured:5.1f} predicted {got:6.1f} GiB {100 * errs[-1]:+6.1f}%{'' if fits else ' (refused)'}")
print(f"{len(errs)} rows: median {100 * statistics.median(errs):+.1f}%, mean {100 * statistics.mean(errs):+.1f}%, "
      f"range {100 * min(errs):+.1f}% to {100 * max(errs):+.1f}%, within 10%: {sum(abs(e) < 0.1 for e in errs)}")

# The six OOM runs, with the software of their period (validation/bloom_a100.csv's header).
PRE = "zero=1,recompute=full,flash=off,mp-optimizer=ds-zero,pp-partition=type:transformer,host=blocking"
BF16 = "zero=1,recompute=full,flash=off,pp-partition=type:transformer|embedding,host=blocking,mp-optimizer=ds-bf16"
refused = 0
for r in bench:
    if r["mem"] != "OOM":
        continue
    soft = BF16 if "BF16 optimizer" in r["precision"] else PRE
    model = f"models/bloom-jz-{r['hidden']}-{r['layers']}-{r['heads']}.json"
    plan = f"tp={r['tp']},pp={r['pp']},dp={r['dp']},{soft}"
    got, fits = peak(model, r["gpus"], plan, r["mbs"], r["gbs"], r["seq_len"])
    refused += not fits
    print(f"OOM l.{r['row_line']} {plan.split(',zero')[0]} mb {r['mbs']}: {got:.1f} GiB {'fits' if fits else 'refused'}")
print(f"OOM agreement: {refused} of 6 refused")
