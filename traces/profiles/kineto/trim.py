#!/usr/bin/env python3
"""Trims a PyTorch profiler (Kineto) trace to what dagsim's Kineto reader reads, so that a real
trace can ship small: the top-level metadata (minus the profiler's INFO log) and the complete
events (`"ph": "X"`) of categories `user_annotation` and `gpu_user_annotation` (record_function
ranges, ProfilerStep#N, c10d's collective ranges). Events are kept byte-for-byte as parsed
(values unchanged), in their original order.

Usage: trim.py IN.json[.gz] OUT.json
"""
import gzip
import json
import sys

KEEP = {"user_annotation", "gpu_user_annotation"}


def main(src, dst):
    opener = gzip.open if src.endswith(".gz") else open
    with opener(src, "rt") as f:
        doc = json.load(f)
    out = {k: v for k, v in doc.items() if k not in ("traceEvents", "INFO")}
    out["traceEvents"] = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in KEEP]
    with open(dst, "w") as f:
        json.dump(out, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"{src}: kept {len(out['traceEvents'])} of {len(doc['traceEvents'])} events -> {dst}")


if __name__ == "__main__":
    main(*sys.argv[1:])
