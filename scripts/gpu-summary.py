#!/usr/bin/env python3
"""The same-call GPU tables from one `gpu-run.sh --peer` output folder: dqnd's
step times (bench-gpu.log) beside the peers' from the same call — PyTorch
(peer_fp32.json, peer_tf32.json: eager, CUDA graph, compile + graph) and JAX
(jax_fp32.json, jax_tf32.json: jit + lax.scan) — with the ratio against the
faster peer, the GPU and the commit. Prints the markdown that opens
BENCHMARKS.md and writes the same figures as JSON to OUTDIR/latest.json
(copied to tests/bench/results/latest.json). Usage: gpu-summary.py OUTDIR"""
import json
import os
import re
import sys


def load(d, name):
    p = os.path.join(d, name)
    return json.load(open(p)) if os.path.exists(p) else []


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "gpu-logs")
    ours, commit, device = {}, "unknown", "unknown"
    with open(os.path.join(d, "bench-gpu.log")) as f:
        for line in f:
            if line.startswith("commit:"):
                commit = line.split(":", 1)[1].strip()
            elif line.startswith("device:"):
                device = line.split(":", 1)[1].strip()
            m = re.match(r"B=\s*(\d+) dqnd-cuda (\S+)\s+([\d.]+) us/step", line)
            if m:
                ours[(int(m.group(1)), m.group(2))] = float(m.group(3))
    peers = {}  # (batch, tf32) -> {peer name: us}
    for r in load(d, "peer_fp32.json") + load(d, "peer_tf32.json"):
        peers.setdefault((r["batch"], bool(r["tf32"])), {})["torch " + r["mode"]] = r["us_per_step"]
    for r in load(d, "jax_fp32.json") + load(d, "jax_tf32.json"):
        if r.get("mode") == "jax_jit":
            peers.setdefault((r["batch"], bool(r["tf32"])), {})[f"jax jit+scan({r['unroll']})"] = r["us_per_step"]
    rows = []
    cell = lambda v: f"{v:.1f}" if v else "—"
    print(f"GPU: {device}; commit {commit}; µs per training step, ref config (state 64, trunk 256-256, "
          "heads 128, 51 atoms, branches 9,3,3), same call")
    for prec, mode, tf32 in (("fp32", "uniform", False), ("tf32", "tf32", True)):
        names = sorted({n for (b, t), v in peers.items() if t == tf32 for n in v})
        if not any(k[1] == mode for k in ours) or not names:
            continue
        print(f"\n{prec}: dqnd `{mode}` beside the peers{' (TF32 matmuls)' if tf32 else ''}\n")
        print("| batch | dqnd | " + " | ".join(names) + " | faster peer | ratio |")
        print("|---|---|" + "---|" * len(names) + "---|---|")
        for b in sorted({k[0] for k in ours}):
            o = ours.get((b, mode))
            pv = peers.get((b, tf32), {})
            fast = min(((v, n) for n, v in pv.items() if n != "torch eager"), default=(None, None))
            ratio = f"{fast[0] / o:.2f}x" if o and fast[0] else "—"
            print(f"| {b} | {cell(o)} | " + " | ".join(cell(pv.get(n)) for n in names) +
                  f" | {fast[1] or '—'} | {ratio} |")
            rows.append(dict(batch=b, precision=prec, mode=mode, us_per_step=o, peer=fast[1],
                             peer_us_per_step=fast[0], peers=pv, ratio=(fast[0] / o if o and fast[0] else None),
                             commit=commit, gpu=device))
    if any(k[1] == "per+noisy" for k in ours):
        print("\n| batch | dqnd fp32 PER + NoisyNet |\n|---|---|")
        for b in sorted({k[0] for k in ours}):
            print(f"| {b} | {cell(ours.get((b, 'per+noisy')))} |")
            if ours.get((b, "per+noisy")):
                rows.append(dict(batch=b, precision="fp32", mode="per+noisy", us_per_step=ours[(b, "per+noisy")],
                                 peer=None, peer_us_per_step=None, commit=commit, gpu=device))
    json.dump(rows, open(os.path.join(d, "latest.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
