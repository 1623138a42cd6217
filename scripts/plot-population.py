#!/usr/bin/python3
"""The population curve (BENCHMARKS.md, issue 28): µs per member-step and
TFLOP/s against members, dqnd fp32 / TF32 beside the JAX vmap peer, from
tests/bench/results/population.json into tests/bench/results/population.png."""
import json, os, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests/bench/results/population.json")
dst = sys.argv[2] if len(sys.argv) > 2 else os.path.join(root, "tests/bench/results/population.png")
d = json.load(open(src))
fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
for key, label, style in (("dqnd_fp32", "dqnd fp32", "o-"), ("dqnd_tf32", "dqnd TF32", "s-")):
    rows = (d.get(key) or {}).get("rows", [])
    if not rows:
        continue
    n = [r["members"] for r in rows]
    a.plot(n, [r["us_per_member_step"] for r in rows], style, label=label)
    b.plot(n, [r["tflops"] for r in rows], style, label=label)
gf = d["dqnd_fp32"]["gflop_per_member_step"]
for key, label in (("jax_vmap_fp32", "JAX vmap fp32"), ("jax_vmap_tf32", "JAX vmap TF32")):
    rows = d.get(key) or []
    if not rows:
        continue
    n = [r["members"] for r in rows]
    us = [r["us_per_pop_step"] / r["members"] for r in rows]
    a.plot(n, us, "^--", label=label)
    b.plot(n, [gf * 1e3 / u for u in us], "^--", label=label)
for ax in (a, b):
    ax.set_xscale("log", base=2)
    ax.set_xlabel("members")
    ax.grid(True, alpha=0.3)
    ax.legend()
a.set_ylabel("µs per member-step")
a.set_yscale("log")
b.set_ylabel("TFLOP/s (H200 peak: 67 fp32)")
fig.suptitle(f"Populations on one GPU: {d['config'].split(';')[0]} ({d['device']}, {d['commit']})")
fig.tight_layout()
fig.savefig(dst, dpi=110)
print(dst)
