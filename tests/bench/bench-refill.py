#!/usr/bin/env python3
"""bench-refill.py DQND [--backend cpu|cuda] [--trials N] [--population N] [--rounds N] [--seeds 1,2,3] [--json FILE]

The search driver's refilled slots (docs/population.md, "In a search"):
client/python/examples/optuna_search.py --population N on meanrev against
one daemon (DQND, started here; --backend, default cpu), with and without --no-refill, each
seed both ways, in this run. For each run, from the driver's own log:
trial-rounds (the rounds each trial ran, summed), slot-rounds (N times
each population's length in rounds, summed: what the trainer stepped) and
busy = trial-rounds / slot-rounds, the share of the member-steps that
served a running trial; also the populations and the wall time. On a GPU
a population's step costs about the same whether its members serve trials
or idle (they run in the same launches), so busy is the share of the GPU
a search gets out of its populations. The wall time follows the batch
sizes the sampler picked and the trials the pruner let run, which differ
between the two runs (on the CPU the members step one after another).
Needs optuna (Debian: python3-optuna) and PYTHONPATH holding the dqnd
package (build/client/python).
"""
import argparse
import collections
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVER = os.path.join(os.path.dirname(os.path.dirname(HERE)), "client", "python", "examples", "optuna_search.py")
STARTED = re.compile(r"trial (\d+) started on \S+ as (\S+) member (\d+)(?: \(refilled at round (\d+)\))?")
ROUND = re.compile(r"trial (\d+) round (\d+)/\d+")


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def usage(log, n):
    """trial-rounds, slot-rounds, populations from a driver's log"""
    pop_of, start, last = {}, {}, collections.defaultdict(int)
    for m in STARTED.finditer(log):
        pop_of[int(m[1])], start[int(m[1])] = m[2], int(m[4] or 0)
    for m in ROUND.finditer(log):
        last[int(m[1])] = max(last[int(m[1])], int(m[2]))
    pops = collections.defaultdict(list)
    for t, p in pop_of.items():
        pops[p].append(t)
    slot_rounds = sum(n * max(start[t] + last[t] for t in ts) for ts in pops.values())
    return sum(last.values()), slot_rounds, len(pops)


def run(dqnd, a, seed, refill, tmp):
    d = tempfile.mkdtemp(dir=tmp)
    url = f"ipc://{d}/d.sock"
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    daemon = subprocess.Popen([dqnd, "--listen", url, "--state-dir", f"{d}/state", "--backend", a.backend,
                               "--checkpoint-interval", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env=env)
    try:
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, DRIVER, "--daemons", url, "--storage", f"sqlite:///{d}/s.db",
                            "--trials", str(a.trials), "--population", str(a.population), "--rounds", str(a.rounds),
                            "--eval-every", str(a.eval_every), "--seed", str(seed), "--daemon-retry", "10"]
                           + ([] if refill else ["--no-refill"]), capture_output=True, text=True, env=env,
                           timeout=3600)
        secs = time.monotonic() - t0
    finally:
        daemon.terminate()
        daemon.wait()
    if p.returncode:
        sys.exit(f"bench-refill: the driver exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    used, slots, pops = usage(p.stdout, a.population)
    states = re.search(r"trials by state: (.*)", p.stdout)[1]
    return {"seed": seed, "refill": refill, "trial_rounds": used, "slot_rounds": slots, "busy": used / slots,
            "populations": pops, "wall_s": round(secs, 1), "states": states,
            "refills": len(re.findall(r"refilled at round", p.stdout))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dqnd")
    ap.add_argument("--backend", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--population", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--json", help="write the runs here")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="dqnd-bench-refill-")
    rows = []
    try:
        for seed in [int(s) for s in a.seeds.split(",")]:
            for refill in (False, True):
                rows.append(run(a.dqnd, a, seed, refill, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"optuna_search.py --population {a.population}, {a.trials} trials of {a.rounds} rounds, eval every "
          f"{a.eval_every}, meanrev, one {a.backend.upper()} daemon; {cpu_name()}, "
          f"{os.cpu_count()} cores")
    print("| seed | slots refilled | trial-rounds | slot-rounds | busy | populations | refills | wall s | trials |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['seed']} | {'yes' if r['refill'] else 'no (--no-refill)'} | {r['trial_rounds']} | "
              f"{r['slot_rounds']} | {r['busy']:.0%} | {r['populations']} | {r['refills']} | {r['wall_s']} | "
              f"{r['states']} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "runs": rows}, f, indent=1)


if __name__ == "__main__":
    main()
