"""kernels/dev: what a vendor fp32 GEMM (cuBLAS through torch, TF32 off) takes
for the DT step's products at batch 256 (DEVICE_NOTES 193), beside which the
DT's own FFMA tiles are read. µs a product (median of 5 runs of 200), random
operands, and the kernels cuBLAS picked (torch.profiler). Run on the GPU machine with the python3 that has torch there (its PATH's, not /usr/bin/python3): python3 kernels/dev/sgemm-torch.py [T]"""
import sys
import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
T, E, F = int(sys.argv[1]) if len(sys.argv) > 1 else 15360, 128, 512
dev = "cuda"
g = torch.Generator(device=dev).manual_seed(1)


def r(*s):
    return torch.randn(*s, device=dev, generator=g)


# (name, a, b): out = a @ b, in the layouts the DT's launches use
X, W1, W2, Wq = r(T, E), r(F, E), r(E, F), r(E, E)
H, dY, dH = r(T, F), r(T, E), r(T, F)
cases = [
    ("q fwd   T x E x E  (A row, B^T)", X, Wq.t()),
    ("ffn1 fwd T x 4E x E (A row, B^T)", X, W1.t()),
    ("ffn2 fwd T x E x 4E (A row, B^T)", H, W2.t()),
    ("ffn2 dX T x 4E x E (A row, B row)", dY, W2),
    ("ffn1 dX T x E x 4E (A row, B row)", dH, W1),
    ("ffn1 dW 4E x E x T (A^T, B row)", dH.t(), X),
    ("q dW    E x E x T  (A^T, B row)", dY.t(), X),
]
print(torch.cuda.get_device_name(), "torch", torch.__version__, "T", T)
for name, a, b in cases:
    m, k = a.shape
    n = b.shape[1]
    out = torch.empty(m, n, device=dev)
    for _ in range(20):
        torch.mm(a, b, out=out)
    ts = []
    for _ in range(5):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(200):
            torch.mm(a, b, out=out)
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) * 1000 / 200)
    us = sorted(ts)[2]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        torch.mm(a, b, out=out)
        torch.cuda.synchronize()
    kern = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    print(f"{name}: {us:8.1f} us  {2 * m * n * k / us / 1e6:6.1f} TFLOP/s  {' + '.join(kern)[:200]}")
