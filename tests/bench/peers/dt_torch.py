"""PyTorch peer for dqnd's Decision Transformer pre-training step (docs/learner.md §16).

One step = draw `batch` windows of `context` steps from a device-resident
dataset of episodes (each window ends at a uniformly drawn step; steps before
its episode's start are left padding), embed (return-to-go, state, action) +
timestep, `layers` pre-LN blocks of causal multi-head attention (padded keys
masked) and a 4E GELU(tanh) MLP, a final LayerNorm, per-branch action logits
at each state token, the mean over real steps of the branch-mean
cross-entropy, backward, the global grad norm clipped at `clip`, AdamW with a
linear warm-up. No dropout (dqnd has none, so the backends agree). Measured
in eager, CUDA-graph and torch.compile + CUDA-graph modes, fp32 or --tf32,
at each batch; prints the hardware and writes --json.
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

P = argparse.ArgumentParser()
P.add_argument("--state-dim", type=int, default=64)
P.add_argument("--branches", type=str, default="9,3,3")
P.add_argument("--context", type=int, default=20)
P.add_argument("--embed", type=int, default=128)
P.add_argument("--layers", type=int, default=3)
P.add_argument("--heads", type=int, default=1)
P.add_argument("--max-ep-len", type=int, default=1000)
P.add_argument("--episodes", type=int, default=2000, help="episodes in the dataset")
P.add_argument("--ep-len", type=int, default=100, help="steps an episode")
P.add_argument("--batches", type=str, default="64,256")
P.add_argument("--steps", type=int, default=200)
P.add_argument("--modes", type=str, default="eager,graph,compile_graph")
P.add_argument("--lr", type=float, default=1e-4)
P.add_argument("--warmup", type=int, default=10000)
P.add_argument("--weight-decay", type=float, default=1e-4)
P.add_argument("--clip", type=float, default=0.25)
P.add_argument("--json", type=str, default="")
P.add_argument("--device", type=str, default="cuda", help="cuda or cpu (cpu: eager only)")
P.add_argument("--tf32", action="store_true", help="let matmuls use TF32 tensor cores")
A = P.parse_args()
BR = [int(x) for x in A.branches.split(",")]
dev = A.device
torch.backends.cuda.matmul.allow_tf32 = A.tf32
torch.backends.cudnn.allow_tf32 = A.tf32
torch.set_float32_matmul_precision("high" if A.tf32 else "highest")
E, K, S, NH = A.embed, A.context, A.state_dim, A.heads


class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.ln1, s.ln2 = nn.LayerNorm(E, eps=1e-5), nn.LayerNorm(E, eps=1e-5)
        s.q, s.k, s.v, s.o = (nn.Linear(E, E) for _ in range(4))
        s.mlp1, s.mlp2 = nn.Linear(E, 4 * E), nn.Linear(4 * E, E)

    def forward(s, x, allowed):
        B, N, _ = x.shape
        h = s.ln1(x)
        q, k, v = (f(h).view(B, N, NH, E // NH).transpose(1, 2) for f in (s.q, s.k, s.v))
        att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(E // NH))
        c = att.masked_fill(~allowed, float("-inf")).softmax(-1) @ v
        x = x + s.o(c.transpose(1, 2).reshape(B, N, E))
        return x + s.mlp2(F.gelu(s.mlp1(s.ln2(x)), approximate="tanh"))


class DT(nn.Module):
    def __init__(s):
        super().__init__()
        s.rtg, s.st = nn.Linear(1, E), nn.Linear(S, E)
        s.act = nn.ModuleList([nn.Embedding(n, E) for n in BR])
        s.time = nn.Embedding(A.max_ep_len, E)
        s.ln_e, s.ln_f = nn.LayerNorm(E, eps=1e-5), nn.LayerNorm(E, eps=1e-5)
        s.blocks = nn.ModuleList([Block() for _ in range(A.layers)])
        s.heads = nn.ModuleList([nn.Linear(E, n) for n in BR])

    def forward(s, rtg, st, act, ts, mask):
        B = st.shape[0]
        te = s.time(ts)
        ea = sum(s.act[d](act[..., d]) for d in range(len(BR)))
        tok = torch.stack([s.rtg(rtg[..., None]) + te, s.st(st) + te, ea + te], 2).reshape(B, 3 * K, E)
        x = s.ln_e(tok)
        real = mask.repeat_interleave(3, 1)  # [B, 3K]
        N = 3 * K
        causal = torch.ones(N, N, dtype=torch.bool, device=st.device).tril()
        # keys: real tokens at or before the query; a padded query sees itself only (its output is never read)
        allowed = (causal[None] & real[:, None, :]) | torch.eye(N, dtype=torch.bool, device=st.device)[None]
        allowed = allowed[:, None]
        for b in s.blocks:
            x = b(x, allowed)
        xs = s.ln_f(x)[:, 1::3]  # the state tokens
        return [h(xs) for h in s.heads]


def dataset():
    """episodes of A.ep_len steps, flat: states, per-branch actions, returns-to-go, timesteps, episode starts"""
    g = torch.Generator(device="cpu").manual_seed(0)
    n = A.episodes * A.ep_len
    st = torch.randn(n, S, generator=g)
    act = torch.stack([torch.randint(0, b, (n,), generator=g) for b in BR], 1)
    r = torch.randn(A.episodes, A.ep_len, generator=g)
    rtg = r.flip(1).cumsum(1).flip(1).reshape(n) / 10.0
    ts = torch.arange(A.ep_len).repeat(A.episodes)
    start = (torch.arange(n) // A.ep_len) * A.ep_len
    return [t.to(dev) for t in (st, act, rtg, ts, start)]


def make(B, mode):
    torch.manual_seed(0)
    net = DT().to(dev)
    nparam = sum(p.numel() for p in net.parameters())
    cap = mode in ("graph", "compile_graph")
    lr = torch.tensor(A.lr, device=dev) if cap else A.lr
    kw = dict(fused=True, capturable=cap) if dev == "cuda" else {}
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=A.weight_decay, **kw)
    count = torch.zeros((), device=dev)
    D_st, D_act, D_rtg, D_ts, D_start = dataset()
    n = D_st.shape[0]
    ar = torch.arange(K, device=dev)

    def loss_fn(rtg, st, act, ts, mask):
        logits = net(rtg, st, act, ts, mask)
        ce = sum(F.cross_entropy(z.reshape(-1, z.shape[-1]), act[..., d].reshape(-1), reduction="none")
                 for d, z in enumerate(logits)) / len(BR)
        m = mask.reshape(-1).float()
        return (ce * m).sum() / m.sum().clamp(min=1)

    lf = torch.compile(loss_fn) if mode == "compile_graph" else loss_fn

    def step():
        end = torch.randint(0, n, (B,), device=dev)
        idx = end[:, None] - (K - 1) + ar[None]
        mask = idx >= D_start[end][:, None]
        idx = torch.where(mask, idx, end[:, None])  # padding: any real row, masked out
        loss = lf(D_rtg[idx], D_st[idx], D_act[idx], D_ts[idx], mask)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), A.clip)
        count.add_(1)
        if cap:  # the warm-up on the device, read by the captured optimiser
            lr.copy_(A.lr * torch.clamp(count / A.warmup, max=1.0))
        else:
            for gr in opt.param_groups:
                gr["lr"] = A.lr * min(1.0, float(count) / A.warmup)
        opt.step()
        return loss

    return step, nparam


def sync():
    if dev == "cuda":
        torch.cuda.synchronize()


def bench(B, mode):
    step, nparam = make(B, mode)
    if mode in ("graph", "compile_graph"):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(5):
                step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = step()
        run = g.replay
    else:
        for _ in range(5):
            out = step()
        run = step
    sync()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(A.steps):
            run()
        sync()
        times.append((time.perf_counter() - t0) / A.steps)
    loss = float(out)
    return sorted(times)[1], nparam, loss


def flops(B):
    """multiply-adds x 2 of one step's GEMMs (forward, and twice that backward), attention included"""
    N, T = 3 * K, B * 3 * K
    per_layer = T * (4 * E * E + 8 * E * E) + B * NH * N * N * (E // NH) * 2
    fwd = A.layers * per_layer + B * K * (S * E + E * sum(BR))
    return 2 * 3 * fwd


res = []
print(torch.__version__, torch.cuda.get_device_name() if dev == "cuda" else f"cpu x{torch.get_num_threads()} threads",
      flush=True)
for B in [int(x) for x in A.batches.split(",")]:
    for mode in A.modes.split(","):
        if dev != "cuda" and mode != "eager":
            continue
        try:
            t, nparam, loss = bench(B, mode)
            tf = flops(B) / t / 1e12
            res.append(dict(batch=B, mode=mode, tf32=A.tf32, us_per_step=t * 1e6, steps_per_s=1 / t, params=nparam,
                            context=K, embed=E, layers=A.layers, heads=NH, tflops=tf, loss=loss))
            print(f"B={B:5d} {mode:14s} tf32={int(A.tf32)} {t * 1e6:9.1f} us/step {tf:6.2f} TFLOP/s params={nparam} "
                  f"loss {loss:.4f}", flush=True)
        except Exception as e:  # noqa: BLE001 (a mode that fails is reported, the others still run)
            print(f"B={B} {mode} FAILED: {type(e).__name__}: {str(e)[:300]}", flush=True)
if A.json:
    with open(A.json, "w") as f:
        json.dump(res, f, indent=1)
