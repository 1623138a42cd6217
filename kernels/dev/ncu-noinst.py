#!/usr/bin/env python3
"""ncu-noinst.py — each kernel launch of an ncu-phases.sh log in one line:
its time, instructions, and the share of its stall samples that waited on
instruction fetch (no_instruction) against the whole (the stall ratios the
log kept, those above 0.3 an issue: ncu-phases.sh drops the smaller ones, so a share is approximate). Usage: ncu-noinst.py ncu.log"""
import re
import sys

rows, cur = [], None
for line in open(sys.argv[1], errors="replace"):
    if re.match(r"^  [A-Za-z_]", line):
        name = line.strip().split("(")[0]
        cur = {"name": name[:48], "us": 0.0, "inst": 0, "stall": {}}
        rows.append(cur)
        continue
    if cur is None:
        continue
    f = line.split()
    if len(f) < 2:
        continue
    try:
        v = float(f[-1].replace(",", ""))
    except ValueError:
        continue
    if f[0] == "gpu__time_duration.sum":
        cur["us"] = v / 1000 if f[1] == "nsecond" else v * 1000 if f[1] == "msecond" else v
    elif f[0] == "smsp__inst_executed.sum":
        cur["inst"] = int(v)
    elif f[0].endswith("_per_issue_active.ratio"):
        cur["stall"][f[0].replace("_per_issue_active.ratio", "")] = v
print(f"{'kernel':48} {'us':>7} {'inst':>9} {'stalls':>7} {'no_inst':>7} {'share':>6}  top")
tot_us = tot_ni = 0.0
for r in rows:
    s = sum(r["stall"].values())
    ni = r["stall"].get("no_instruction", 0.0)
    top = sorted(r["stall"].items(), key=lambda kv: -kv[1])[:3]
    share = ni / s if s else 0.0
    tot_us += r["us"]
    tot_ni += r["us"] * share
    print(f"{r['name']:48} {r['us']:7.2f} {r['inst']:9d} {s:7.2f} {ni:7.2f} {100 * share:5.1f}%  " +
          " ".join(f"{k}={v:.1f}" for k, v in top))
if tot_us:
    print(f"all {len(rows)} launches: {tot_us:.1f} us, no_instruction's time-weighted share {100 * tot_ni / tot_us:.1f}%")
