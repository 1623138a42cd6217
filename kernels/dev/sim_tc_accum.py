# kernels/dev: DEVICE_NOTES.md item 273. A model of the 3xTF32 step's GEMM sums: one
# 64 x 64 x 3840 product (a weight gradient at batch 64) in float64 against
# FFMA-like fp32 sums, the tensor cores' k8 blocks added to an fp32 accumulator
# rounding toward zero (three products a block: al bh, ah bl, ah bh), and the
# same with each 32-k chunk summed apart and added in fp32 (promote).
# Run: /usr/bin/python3 kernels/dev/sim_tc_accum.py
import numpy as np
rng=np.random.default_rng(1)
def rz32(x):
    r=x.astype(np.float32)
    over=np.abs(r.astype(np.float64))>np.abs(x)
    r[over]=np.nextafter(r[over],np.float32(0))
    return r
def tf32(x):  # round to nearest (cvt.rna) keep 10 mantissa bits
    x=x.astype(np.float32); u=x.view(np.uint32).astype(np.uint64)
    u=(u+0x1000)&0xFFFFE000
    return u.astype(np.uint32).view(np.float32)
def trunc10(x):
    x=x.astype(np.float32); u=x.view(np.uint32)&np.uint32(0xFFFFE000); return u.view(np.float32)
K=3840; M=N=64
A=rng.standard_normal((M,K)).astype(np.float32); B=rng.standard_normal((K,N)).astype(np.float32)
exact=A.astype(np.float64)@B.astype(np.float64)
def sim(mode):
    acc=np.zeros((M,N),np.float32)
    ah=tf32(A); al=trunc10(A-ah); bh=tf32(B); bl=trunc10(B-bh)
    for k0 in range(0,K,8):
        sl=slice(k0,k0+8)
        for (a,b) in ([(al,bh),(ah,bl),(ah,bh)] if mode!='ffma' else []):
            blk=a[:,sl].astype(np.float64)@b[sl,:].astype(np.float64)
            acc=rz32(acc.astype(np.float64)+blk)
        if mode=='ffma':
            for k in range(k0,k0+8):
                acc=(acc+ (A[:,k:k+1]*B[k:k+1,:])).astype(np.float32)
    return acc
for mode in ['ffma','3x_rz']:
    r=sim(mode); e=np.linalg.norm(r-exact)/np.linalg.norm(exact); print(mode,e)
def sim_promote(chunk=32):
    d=np.zeros((M,N),np.float32)
    ah=tf32(A); al=trunc10(A-ah); bh=tf32(B); bl=trunc10(B-bh)
    for c0 in range(0,K,chunk):
        t=np.zeros((M,N),np.float32)
        for k0 in range(c0,c0+chunk,8):
            sl=slice(k0,k0+8)
            for (a,b) in [(al,bh),(ah,bl),(ah,bh)]:
                blk=a[:,sl].astype(np.float64)@b[sl,:].astype(np.float64)
                t=rz32(t.astype(np.float64)+blk)
        d=(d+t).astype(np.float32)
    return d
r=sim_promote(); print('3x_rz_promote32', np.linalg.norm(r-exact)/np.linalg.norm(exact))
