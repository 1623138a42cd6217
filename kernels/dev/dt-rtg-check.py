#!/usr/bin/env python3
"""kernels/dev/dt-rtg-check.py DQND BACKEND: PretrainDT on rewards whose
returns-to-go overflow float, through a daemon of BACKEND (cpu or cuda):
the refusal names the cause (learner_dt_after's dt_rtg_diagnose). A device
check for the CUDA path (the replay read back from the device); the CPU
path is test-dt-learner's test_rtg_overflow."""
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import dqnd

dqnd_bin, backend = sys.argv[1], sys.argv[2]
d = tempfile.mkdtemp()
url = f"ipc://{d}/d.sock"
p = subprocess.Popen([dqnd_bin, "--listen", url, "--state-dir", f"{d}/s", "--backend", backend],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    for _ in range(100):
        try:
            c = dqnd.Client(url)
            c.health()
            break
        except dqnd.DqndError:
            time.sleep(0.1)
    cfg = dict(state_dim=6, trunk_h1=16, trunk_h2=12, value_hidden=8, adv_hidden=10, atoms=11, branches="3,4",
               batch=8, replay_capacity=300, seed=5, dt_layers=2, dt_context=4, dt_embed=16, dt_heads=2,
               dt_max_ep_len=10, dt_batch=6, dt_lr=1e-2, dt_warmup=3)
    for reward, scale, want in ((3e38, 4, "sum past float's range from insertion count 18"),
                                (1e33, 1e-6, "overflows float: raise dt_rtg_scale")):
        name = f"t{scale}"
        c.create_trainer(name, dict(cfg, dt_rtg_scale=scale), backend)
        n = 20
        s = np.zeros((n, 6), np.float32)
        s[:, 0] = 0.1 * (np.arange(n) % 4)
        done = (np.arange(n) % 4 == 3).astype(np.uint8)
        c.submit(name, s, np.zeros(n, np.int64), np.full(n, reward, np.float32), s, done, np.arange(n) // 4)
        try:
            c.pretrain_dt(name, 2)
            print(f"{backend} reward {reward:g} scale {scale:g}: trained (unexpected)")
            sys.exit(1)
        except dqnd.DqndError as e:
            print(f"{backend} reward {reward:g} scale {scale:g}: {e.code} {e.message}")
            if want not in e.message:
                sys.exit(1)
finally:
    p.terminate()
    p.wait()
