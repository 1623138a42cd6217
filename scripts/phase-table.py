#!/usr/bin/python3
"""The plain step's time by phase (issue 29 item 4), from the per-kernel
times that `NCU="0:64:0 0:256:0 2:256:1" scripts/gpu-ens.sh` writes to
ncu.log (Nsight Compute, the step's kernels launched one by one), beside
each phase's floor: its FLOPs over the H200's peak and its least bytes over
its HBM bandwidth (the weights and activations fit in the 50 MB L2, so the
byte floor is an upper bound). The `ref` config only (state 64, trunk
256 x 256, heads 128 wide, 51 atoms, branches 9,3,3; uniform replay), whose
step is 20 kernels in the order step.cu launches them (docs/gpu.md).

Usage: phase-table.py NCU_LOG [--json OUT.json]   (markdown on stdout)
"""
import json
import re
import sys

PEAK_FP32, PEAK_TF32, HBM = 67e12, 495e12, 4.8e12  # H200 SXM: FFMA, dense TF32, HBM3e

S, H1, H2, VH, AH, Z, BR = 64, 256, 256, 128, 128, 51, (9, 3, 3)
OUT = Z + sum(n * Z for n in BR)  # the output layers' width: value atoms + every branch's
MAC = {  # multiply-adds per row, by layer group
    "t1": S * H1, "t2": H1 * H2, "hid": H2 * (VH + AH * len(BR)), "out": VH * Z + AH * sum(n * Z for n in BR)}
W = {  # weights + biases, floats
    "t1": S * H1 + H1, "t2": H1 * H2 + H2, "hid": H2 * (VH + AH * len(BR)) + VH + AH * len(BR),
    "out": VH * Z + Z + AH * sum(n * Z for n in BR) + sum(n * Z for n in BR)}
WIDTH = {"in": S, "t1": H1, "t2": H2, "hid": VH + AH * len(BR), "out": OUT}
NPARAM = sum(W.values())


def phases(B):
    """(name, stream, flops, bytes) of the 20 kernels, in launch order.
    The forward runs 3B rows (online on s and s', target on s')."""
    f = 3 * B
    fw = lambda g, i, o: (2 * f * MAC[g], 4 * (W[g] + f * WIDTH[i] + f * WIDTH[o]))
    dx = lambda g, i, o: (2 * B * MAC[g], 4 * (W[g] + B * WIDTH[o] + 2 * B * WIDTH[i]))  # dy in, x for the slope, dx out
    dw = lambda g, i, o: (2 * B * MAC[g], 4 * (2 * W[g] + B * WIDTH[i] + B * WIDTH[o]))
    return [
        ("pack (weights into tiles)", "side", 0, 4 * 4 * NPARAM),
        ("sample + gather", "main", 0, 4 * (2 * B * S + 4 * B)),
        ("F1 trunk1", "main", *fw("t1", "in", "t1")),
        ("F2 trunk2", "main", *fw("t2", "t1", "t2")),
        ("F3 head hidden", "main", *fw("hid", "t2", "hid")),
        ("F4 head outputs", "main", *fw("out", "hid", "out")),
        ("tail (dueling, log-softmax)", "main", 10 * f * OUT, 4 * 2 * f * OUT),
        ("loss (C51 projection, CE)", "main", 4 * B * OUT * Z // len(BR), 4 * 3 * B * OUT),
        ("batch loss", "side", 0, 4 * 2 * B),
        ("dW outputs", "side", *dw("out", "hid", "out")),
        ("B1 dx head hidden", "main", *dx("out", "hid", "out")),
        ("dW head hidden", "side", *dw("hid", "t2", "hid")),
        ("B2 dx trunk2", "main", *dx("hid", "t2", "hid")),
        ("dW trunk2", "side", *dw("t2", "t1", "t2")),
        ("B3 dx trunk1", "main", *dx("t2", "t1", "t2")),
        ("norm, all but trunk1", "side", 2 * (NPARAM - W["t1"]), 4 * (NPARAM - W["t1"])),
        ("dW trunk1", "main", *dw("t1", "in", "t1")),
        ("norm trunk1 + clip", "main", 2 * W["t1"], 4 * W["t1"]),
        ("AdamW + target", "main", 12 * NPARAM, 4 * 8 * NPARAM),
        ("finish (statistics)", "main", 0, 64),
    ]


def parse(path):
    blocks, cur = [], None
    for line in open(path):
        m = re.match(r"== ncu mode (\d+) batch (\d+) tf32 (\d+)", line)
        if m:
            cur = {"mode": int(m[1]), "batch": int(m[2]), "tf32": int(m[3]), "k": []}
            blocks.append(cur)
            continue
        m = re.match(r"(\S+?)[<(].*\s([\d.]+) (us|ms|ns)\s*$", line.rstrip())
        if cur is not None and m:
            t = float(m[2]) * {"us": 1, "ms": 1e3, "ns": 1e-3}[m[3]]
            cur["k"].append((m[1], t))
    return blocks


def table(b, out):
    ks = b["k"]
    starts = [i for i, (n, _) in enumerate(ks) if n == "fused_pack_kernel"]
    steps = [ks[s:s + 20] for s in starts if s + 20 <= len(ks)]
    ph = phases(b["batch"])
    steps = [s for s in steps if len(s) == 20]
    if not steps:
        print(f"mode {b['mode']} batch {b['batch']}: no whole step in the log", file=sys.stderr)
        return
    peak = PEAK_TF32 if b["tf32"] else PEAK_FP32
    prec = "TF32" if b["tf32"] else "fp32"
    print(f"\n**Batch {b['batch']}, {prec}** (mean of {len(steps)} steps; µs)\n")
    print("| phase | stream | kernel | ncu | FLOP floor | byte floor | x floor |")
    print("|---|---|---|---|---|---|---|")
    ts = [sum(s[j][1] for s in steps) / len(steps) for j in range(len(ph))]
    # the main stream's chain; the pack (0) runs beside the sample (1), the join waits for the longer
    crit = max(ts[0], ts[1]) + sum(ts[j] for j in range(2, len(ph)) if ph[j][1] == "main")
    for j, (name, stream, fl, by) in enumerate(ph):
        t = ts[j]
        kern = steps[0][j][0]
        floor = max(fl / peak, by / HBM) * 1e6
        ratio = f"{t / floor:.0f}x" if floor >= 0.05 else "-"  # no work to speak of: latency alone
        print(f"| {name} | {stream} | `{kern}` | {t:.1f} | {fl / peak * 1e6:.2f} | {by / HBM * 1e6:.2f} | {ratio} |")
        out.append({"kind": "phase", "batch": b["batch"], "precision": prec, "phase": name, "stream": stream,
                    "kernel": kern, "ncu_us": round(t, 2), "flops": fl, "bytes": by,
                    "flop_floor_us": round(fl / peak * 1e6, 3), "byte_floor_us": round(by / HBM * 1e6, 3)})
    tot = sum(sum(k[1] for k in s) for s in steps) / len(steps)
    print(f"\nAll 20 kernels one after another: {tot:.1f} µs; the main stream's chain (the longer of the pack "
          f"and the sample beside it): {crit:.1f} µs.")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows = []
    for b in parse(sys.argv[1]):
        if b["mode"] in (0, 2):
            table(b, rows)
    if "--json" in sys.argv:
        json.dump(rows, open(sys.argv[sys.argv.index("--json") + 1], "w"), indent=1)


if __name__ == "__main__":
    main()
