/*
 * c51.cuh — the C51 projection's two device steps, shared by the generic
 * loss kernel (generic_loss.cu) and the fused one (step_loss.cu); the CPU twin
 * is c51_project in kernels/cpu/loss_impl.h. Included by .cu files only.
 */
#ifndef DQN_CUDA_C51_CUH
#define DQN_CUDA_C51_CUH

/* Source atom j of the target distribution: its position b on the support
 * after the Bellman update (tz = r + disc z_j, clamped to [vmin, vmax]) and
 * its clamped neighbours l <= b <= u, packed as l | u << 16. */
__device__ __forceinline__ int c51_source(float r, float disc, float vmin, float vmax, float dz, int Z, int j,
                                          float *b_out) {
  float tz = r + disc * (vmin + dz * (float)j);
  float t = tz < vmin ? vmin : (tz > vmax ? vmax : tz);
  float b = (t - vmin) / dz;
  int l = (int)floorf(b), u = (int)ceilf(b);
  l = l < 0 ? 0 : (l > Z - 1 ? Z - 1 : l);
  u = u < 0 ? 0 : (u > Z - 1 ? Z - 1 : u);
  *b_out = b;
  return l | (u << 16);
}

/* The projected mass on atom z: every source atom's share of it, added in
 * ascending j (c51_project's order). b_j never decreases with j (disc >= 0),
 * so the atoms with l_j <= z <= u_j — the only ones adding to z — are one
 * run of j, starting at the first j with u_j >= z. Before clamping b_j is
 * affine, c0 + disc j with c0 = (r + disc vmin - vmin) / dz, so for z >= 1
 * the start is about floor((z - 1 - c0) / disc) + 1; rounding can put that a
 * step off, and the two walks against the stored u_j (a monotone test) make
 * it exact: the same terms as a walk over every j, without the binary search
 * whose dependent shared loads were ~18% of the loss kernel's stall samples
 * (kernels/dev/DEVICE_NOTES.md item 35). */
__device__ __forceinline__ float c51_gather(int z, int Z, const int *lj, const float *pj, const float *bj, float c0,
                                            float disc) {
  int j = 0;
  if (z > 0) {
    if (disc > 0.0f) {
      float x = ((float)(z - 1) - c0) / disc;
      x = x < -1.0f ? -1.0f : (x > (float)Z ? (float)Z : x);
      j = (int)floorf(x) + 1;
      j = j < 0 ? 0 : (j > Z ? Z : j);
    } else {
      j = (lj[0] >> 16) >= z ? 0 : Z;
    }
    while (j > 0 && (lj[j - 1] >> 16) >= z) j--;
    while (j < Z && (lj[j] >> 16) < z) j++;
  }
  float acc = 0.0f;
  for (; j < Z && (lj[j] & 0xffff) <= z; j++) {
    const int l = lj[j] & 0xffff, u = lj[j] >> 16;
    if (l == u) {
      if (l == z) acc += pj[j];
    } else {
      if (l == z) acc += pj[j] * ((float)u - bj[j]);
      if (u == z) acc += pj[j] * (bj[j] - (float)l);
    }
  }
  return acc;
}

#endif
