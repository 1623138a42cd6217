# kernels/dev: DEVICE_NOTES.md item 273. A model of the 3xTF32 step's GEMM
# sums: one 64 x 64 x 3840 product (a weight gradient at batch 64) against
# float64, summed four ways: fp32 in k order (FFMA's sums; the model rounds
# each product too), plain TF32 on the tensor cores, 3xTF32 (three products a
# k8 step: al bh, ah bl, ah bh), and 3xTF32 with each 32-k chunk summed apart
# and added in fp32 (promote), and that with lo rounded to TF32 rather than
# read truncated (x3-land.patch). The tensor cores' model: a k8 step's products
# summed exactly, then added to the fp32 accumulator rounding toward zero.
# Run: /usr/bin/python3 kernels/dev/sim_tc_accum.py
import numpy as np

K, M, N = 3840, 64, 64
rng = np.random.default_rng(1)
A = rng.standard_normal((M, K)).astype(np.float32)
B = rng.standard_normal((K, N)).astype(np.float32)
exact = A.astype(np.float64) @ B.astype(np.float64)


def rz32(x):  # float64 to fp32 rounding toward zero
    r = x.astype(np.float32)
    over = np.abs(r.astype(np.float64)) > np.abs(x)
    r[over] = np.nextafter(r[over], np.float32(0))
    return r


def tf32(x):  # cvt.rna.tf32.f32: 10 mantissa bits, to nearest
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x1000) & 0xFFFFE000).astype(np.uint32).view(np.float32)


def trunc10(x):  # how wgmma reads an fp32 operand: its low 13 bits dropped
    return (x.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


ah, bh = tf32(A), tf32(B)
al, bl = trunc10(A - ah), trunc10(B - bh)


def tensor_cores(pairs, chunk=None):
    d = np.zeros((M, N), np.float32)
    t = np.zeros((M, N), np.float32)
    for k0 in range(0, K, 8):
        s = slice(k0, k0 + 8)
        for a, b in pairs:
            t = rz32(t.astype(np.float64) + a[:, s].astype(np.float64) @ b[s, :].astype(np.float64))
        if chunk and (k0 + 8) % chunk == 0:
            d, t = (d + t).astype(np.float32), np.zeros((M, N), np.float32)
    return (d + t).astype(np.float32) if chunk else t


def ffma():
    acc = np.zeros((M, N), np.float32)
    for k in range(K):
        acc = (acc + A[:, k:k + 1] * B[k:k + 1, :]).astype(np.float32)
    return acc


def err(r):
    return np.linalg.norm(r - exact) / np.linalg.norm(exact)


print("fp32 sums in k order (FFMA)  %.2e" % err(ffma()))
print("TF32 on the tensor cores     %.2e" % err(tensor_cores([(trunc10(ah), trunc10(bh))])))
print("3xTF32                       %.2e" % err(tensor_cores([(al, bh), (ah, bl), (ah, bh)])))
print("3xTF32, promoted every 32 k  %.2e" % err(tensor_cores([(al, bh), (ah, bl), (ah, bh)], 32)))
# x3-land.patch (item 277): lo rounded to TF32 (tf32(x - hi)) instead of read truncated
alr, blr = tf32(A - ah), tf32(B - bh)
print("3xTF32, lo rounded, promoted %.2e" % err(tensor_cores([(alr, bh), (ah, blr), (ah, bh)], 32)))
