#!/usr/bin/env python3
"""Prints the same-call GPU table of issue 5 from one gpu-run.sh --peer output
folder: dqnd's step times (bench-gpu.log) beside the PyTorch peer's
(peer_fp32.json, peer_tf32.json), the ratio to compile_graph and the goal,
with the GPU name and the commit. Usage: gpu-summary.py OUTDIR"""
import json
import os
import re
import sys

GOALS = {64: 20, 256: 20, 1024: 15, 4096: 10}


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "gpu-logs")
    ours, commit, device = {}, "unknown", "unknown"
    with open(os.path.join(d, "bench-gpu.log")) as f:
        prefix = ""  # the kernel history's earlier versions follow a header line
        for line in f:
            if line.startswith("commit:"):
                commit = line.split(":", 1)[1].strip()
            elif line.startswith("device:"):
                device = line.split(":", 1)[1].strip()
            elif line.startswith("v1"):
                prefix = "v1-"
            elif line.startswith("row tiles"):
                prefix = "rows-"
            m = re.match(r"B=\s*(\d+) dqnd-cuda (\S+)\s+([\d.]+) us/step", line)
            if m:
                ours[(int(m.group(1)), prefix + m.group(2))] = float(m.group(3))
    peer = {}
    for name in ("peer_fp32.json", "peer_tf32.json"):
        p = os.path.join(d, name)
        if os.path.exists(p):
            for r in json.load(open(p)):
                peer[(r["batch"], r["mode"], bool(r["tf32"]))] = r["us_per_step"]
    print(f"GPU: {device}; commit {commit}; µs per training step, ref config")
    print("| batch | dqnd fp32 | dqnd PER+noisy | torch eager | torch graph | torch compile_graph | ratio | goal |")
    print("|---|---|---|---|---|---|---|---|")
    for b in sorted({k[0] for k in ours}):
        o, cg = ours.get((b, "uniform")), peer.get((b, "compile_graph", False))
        cell = lambda v: f"{v:.1f}" if v else "—"
        ratio = f"{cg / o:.2f}x" if o and cg else "—"
        print(f"| {b} | {cell(o)} | {cell(ours.get((b, 'per+noisy')))} | {cell(peer.get((b, 'eager', False)))} | "
              f"{cell(peer.get((b, 'graph', False)))} | {cell(cg)} | {ratio} | {GOALS.get(b, '—')}x |")
    if any(k[1].startswith(("v1-", "rows-")) for k in ours):
        print("\n| batch | dqnd fp32 (default) | row tiles (previous default) | v1 generic kernels |")
        print("|---|---|---|---|")
        for b in sorted({k[0] for k in ours}):
            cell = lambda v: f"{v:.1f}" if v else "—"
            print(f"| {b} | {cell(ours.get((b, 'uniform')))} | {cell(ours.get((b, 'rows-uniform')))} | "
                  f"{cell(ours.get((b, 'v1-uniform')))} |")
    if any(k[2] for k in peer):
        print("\n| batch | dqnd TF32 | torch graph TF32 | torch compile_graph TF32 | ratio |")
        print("|---|---|---|---|---|")
        for b in sorted({k[0] for k in ours}):
            o, cg = ours.get((b, "tf32")), peer.get((b, "compile_graph", True))
            ratio = f"{cg / o:.2f}x" if o and cg else "—"
            cell = lambda v: f"{v:.1f}" if v else "—"
            print(f"| {b} | {cell(o)} | {cell(peer.get((b, 'graph', True)))} | {cell(cg)} | {ratio} |")


if __name__ == "__main__":
    main()
