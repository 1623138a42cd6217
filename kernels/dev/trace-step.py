#!/usr/bin/env python3
"""trace-step.py — one training step's timeline from trace_inject.c's CSV.

Takes the CUDA graph with the most kernel records (the step's graph, replayed
Step(n) times), matches each node's k-th record to replay k, and prints every
node's median start and end from its replay's first start, its stream, grid
and name, in order of start: where the critical path runs and where the gaps
between dependent nodes are. Usage: trace-step.py trace.csv [skip replays]
"""
import csv
import statistics
import subprocess
import sys
from collections import defaultdict


def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
        return dict(zip(names, out.splitlines()))
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def short(name):
    name = name.split("(")[0]
    return name.replace("void ", "")[:46]


def main():
    path = sys.argv[1]
    skip = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    rows = list(csv.DictReader(open(path)))
    by_graph = defaultdict(list)
    for r in rows:
        if r["graph"] != "0":
            by_graph[r["graph"]].append(r)
    if not by_graph:
        sys.exit("no graph kernels in the trace")
    g = max(by_graph, key=lambda k: len(by_graph[k]))
    nodes = defaultdict(list)
    for r in sorted(by_graph[g], key=lambda r: int(r["start"])):
        nodes[r["node"]].append(r)
    reps = min(len(v) for v in nodes.values())
    if reps <= skip + 2:
        skip = max(0, reps // 4)
    names = demangle(sorted({v[0]["name"] for v in nodes.values()}))
    t0 = [min(int(v[k]["start"]) for v in nodes.values()) for k in range(reps)]
    t1 = [max(int(v[k]["end"]) for v in nodes.values()) for k in range(reps)]
    ks = range(skip, reps)
    table = []
    for nid, v in nodes.items():
        st = statistics.median(int(v[k]["start"]) - t0[k] for k in ks) / 1e3
        en = statistics.median(int(v[k]["end"]) - t0[k] for k in ks) / 1e3
        table.append((st, en, v[0]["stream"], f'{v[0]["gx"]}x{v[0]["gy"]}x{v[0]["gz"]}/{v[0]["bx"]}',
                      short(names[v[0]["name"]])))
    table.sort()
    span = statistics.median(t1[k] - t0[k] for k in ks) / 1e3
    period = statistics.median(t0[k + 1] - t0[k] for k in range(skip, reps - 1)) / 1e3 if reps - skip > 1 else 0
    print(f"graph {g}: {len(nodes)} kernel nodes, {reps} replays (medians over {reps - skip}); "
          f"first start to last end {span:.1f} us, replay period {period:.1f} us")
    streams = sorted({t[2] for t in table})
    print(f"{'start':>7} {'end':>7} {'dur':>6}  " + " ".join(f"s{s:>3}" for s in streams) + "  grid/block  kernel")
    for st, en, s, grid, name in table:
        lane = " ".join("  ## " if x == s else "  .  " for x in streams)
        print(f"{st:7.1f} {en:7.1f} {en - st:6.1f}  {lane}  {grid:<14} {name}")
    # The chain that ends last, walked back: each node's likely gate is the
    # node that ended last before it started (on any stream; a heuristic:
    # the graph's edges are not in the trace). The gaps are launch latency
    # and event waits; the durations, the kernels' own time.
    chain, cur = [], max(range(len(table)), key=lambda i: table[i][1])
    while cur is not None:
        chain.append(cur)
        st = table[cur][0]
        prev = [i for i in range(len(table)) if table[i][1] <= st + 0.05 and i not in chain]
        cur = max(prev, key=lambda i: table[i][1]) if prev else None
    chain.reverse()
    busy = sum(table[i][1] - table[i][0] for i in chain)
    print(f"\nlikely critical path: {len(chain)} nodes, {busy:.1f} us in kernels, "
          f"{span - busy:.1f} us between them")
    prev_end = None
    for i in chain:
        st, en, s, grid, name = table[i]
        gap = f"{st - prev_end:+5.1f}" if prev_end is not None else "     "
        print(f"  gap {gap}  {st:7.1f} {en:7.1f} {en - st:6.1f}  s{s:<4} {name}")
        prev_end = en


if __name__ == "__main__":
    main()
