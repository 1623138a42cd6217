#!/usr/bin/env python3
"""kernel-sizes.py — each CUDA kernel's size in SASS instructions, no GPU needed.

Compiles every kernels/cuda/*.cu (or the files named) to an sm_90a cubin with
the library's include paths and reads each kernel's .text section from the
ELF (16 bytes an instruction: 9,736 for dt_gemm_big_kernel<0, 1> here, as
ncu counted it). A kernel whose warps run thousands of instructions straight
through once, with few warps an SM to cover the fetches, waits on instruction
fetch (ncu's `no_inst` stall): kernels/dev/DEVICE_NOTES.md items 177, 200.

Usage (from the repository root, nvcc on PATH):
  kernel-sizes.py [--top N] [--grep REGEX] [file.cu ...]
"""
import argparse
import os
import re
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def text_sections(path):
    """(name, bytes) of each .text.* section of an ELF64 cubin"""
    d = open(path, "rb").read()
    shoff = struct.unpack_from("<Q", d, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", d, 0x3A)
    hdrs = [struct.unpack_from("<IIQQQQIIQQ", d, shoff + i * shentsize) for i in range(shnum)]
    stro = hdrs[shstrndx][4]
    for h in hdrs:
        name = d[stro + h[0] : d.index(b"\0", stro + h[0])].decode()
        if name.startswith(".text."):
            yield name[6:], h[5]


def cubin(src, out, build):
    inc = [f"-I{build}/kernels", f"-I{build}", "-Ikernels/cpu", "-Ikernels", "-I."]
    cmd = ["nvcc", "-O2", "-gencode", "arch=compute_90a,code=sm_90a", "--expt-relaxed-constexpr", *inc, "-cubin",
           "-o", out, src]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode:
        sys.stderr.write(f"{src}: nvcc failed\n{r.stderr}")
    return r.returncode == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--grep", default="")
    ap.add_argument("--build", default="build", help="the meson build directory (its generated headers)")
    a = ap.parse_args()
    files = a.files or sorted(os.path.join("kernels/cuda", f) for f in os.listdir(os.path.join(ROOT, "kernels/cuda"))
                              if f.endswith(".cu"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for f in files:
            out = os.path.join(tmp, os.path.basename(f) + ".cubin")
            if cubin(f, out, a.build):
                rows += [(size // 16, os.path.basename(f), name) for name, size in text_sections(out)]
    names = [r[2] for r in rows]
    dem = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    dem = dict(zip(names, dem)) if len(dem) == len(names) else {n: n for n in names}
    pat = re.compile(a.grep) if a.grep else None
    shown = 0
    for n, f, name in sorted(rows, reverse=True):
        k = dem[name]
        if pat and not pat.search(k):
            continue
        print(f"{n:7d}  {f:22s} {k[:120]}")
        shown += 1
        if shown == a.top:
            break


if __name__ == "__main__":
    main()
