#!/usr/bin/env python3
"""How much the measured and the predicted step grow across each weak-scaling series of a
validation set (same model, precision and per-GPU work, more GPUs).
Usage: tools/weak_scaling_slope.py RESULTS.csv... -- SET.csv...
RESULTS are `dagsim validate --format csv` outputs; SETs are the validation CSVs they came from
(read for each row's `layers`, so proxy configs of different depth are not one series). A series
is the rows of one `group` and `layers`, from the fewest GPUs to the most; series of one row are
skipped. Prints per series the growth of the measured and of the predicted value and the error at
both ends, then the means. Growth is of the value as measured: for step times, positive is a
longer step."""
import collections, csv, sys

def rows(path):
    return list(csv.DictReader(l for l in open(path) if not l.startswith("#")))

def main(argv):
    if "--" not in argv:
        sys.exit(__doc__)
    cut = argv.index("--")
    results, sets = argv[:cut], argv[cut + 1:]
    if not results or not sets:
        sys.exit(__doc__)
    layers = {r["id"]: r.get("layers", "") for s in sets for r in rows(s)}
    series = collections.defaultdict(list)
    for path in results:
        for r in rows(path):
            if not r.get("predicted"):
                continue
            key = (r["group"], layers.get(r["id"], ""))
            series[key].append((int(r["gpus"]), float(r["measured"]), float(r["predicted"])))
    grown = []
    for (group, depth), v in sorted(series.items()):
        v.sort()
        if len(v) < 2:
            continue
        (g0, m0, p0), (g1, m1, p1) = v[0], v[-1]
        gm, gp = 100 * (m1 / m0 - 1), 100 * (p1 / p0 - 1)
        grown.append((gm, gp))
        name = group + (f" ({depth} layers)" if depth else "")
        print(f"{name:36s} {g0:5d} -> {g1:5d} GPUs: measured {gm:+6.2f}%, predicted {gp:+6.2f}%; "
              f"error {100 * (p0 / m0 - 1):+5.1f}% -> {100 * (p1 / m1 - 1):+5.1f}%")
    if grown:
        n = len(grown)
        print(f"mean over {n} series: measured {sum(g for g, _ in grown) / n:+.2f}%, "
              f"predicted {sum(p for _, p in grown) / n:+.2f}%")

if __name__ == "__main__":
    main(sys.argv[1:])
