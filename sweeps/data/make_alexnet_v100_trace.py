"""Converts PipeDream's AlexNet profile (graph.txt) into a dagsim native trace.

Usage: python3 make_alexnet_v100_trace.py > alexnet_v100_pipedream.csv
Reads pipedream_alexnet_graph.txt next to this script. Node lines look like
`node2 -- Conv2d(...) -- forward_compute_time=22.316, backward_compute_time=6.405,
activation_size=..., parameter_size=93184.000`; times are ms per iteration of batch 256,
sizes bytes. AlexNet is a chain, so nodes are taken in the order of their numbers.
"""
import pathlib
import re

NODE = re.compile(r"^(node\d+) -- (.*) -- forward_compute_time=([\d.]+), backward_compute_time=([\d.]+), "
                  r"activation_size=([\d.]+), parameter_size=([\d.]+)")

here = pathlib.Path(__file__).parent
nodes = []
for line in (here / "pipedream_alexnet_graph.txt").read_text().splitlines():
    m = NODE.match(line)
    if m:
        name, op, fwd, bwd, _act, params = m.groups()
        nodes.append((int(name[4:]), op.split("(")[0], float(fwd), float(bwd), int(float(params))))
nodes.sort()

print("# dagsim trace v1: AlexNet, batch 256 per GPU, per-layer times from PipeDream's profiler (times in microseconds)")
print("# source: msr-fiddle/pipedream profiler/image_classification/profiles/alexnet/graph.txt (MIT); GPU not recorded, timings look like a V100")
print("# converted by sweeps/data/make_alexnet_v100_trace.py; layer 0 'data' is PipeDream's Input node")
print("# model: alexnet")
print("# batch_per_gpu: 256")
print("# sample_bytes: 196608")
print("# device_sample_bytes: 602112")
print("# update_us: 0")
print("layer,name,forward_us,backward_us,comm_us,grad_bytes")
for i, (num, op, fwd, bwd, params) in enumerate(nodes):
    name = "data" if op == "Input" else f"{op.lower()}{num}"
    print(f"{i},{name},{fwd * 1000:.1f},{bwd * 1000:.1f},0,{params}")
