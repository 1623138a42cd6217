/*
 * gemm_plan.cu — the layer GEMM's planner (host side): for each phase of the
 * problem table (gemm_table.cuh) its kernel (the 32 x 64 split-K tiles, the
 * 64 x 128 FFMA tiles, or wgmma's 128 x 128 TF32 tiles), tiles, split-K
 * parts, each problem's first block in the launch and in a population's SER
 * launches, and the split-K scratch; gemm.cu launches what it planned.
 */
#include <cuda_runtime.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_table.cuh"
#include "gemm_dev.cuh"
#include "gemm_tiles.cuh"
#include "split_rule.h"
#include "arena.cuh"

static int al16(const float *p, int ld) { return (uintptr_t)p % 16 == 0 && ld % 4 == 0; }

/* Blocks of one launch: tiles, alignment, and split-K parts for problems
 * [p0, p1): split-K parts sized by the phase's work for about `occ` blocks
 * an SM (below), at most SPLIT_MAX_K k per part. */
static void plan_phase(gprob_t *pr, int p0, int p1, int nsm, int big, int occ, int *blocks, int *ntiles,
                       size_t *part_floats) {
  const int bm = big == 2 ? WG_BM : big ? GBM2 : GBM, bn = big == 2 ? WG_BN : big ? GBN2 : GBN;
  for (int i = p0; i < p1; i++) {
    gprob_t *g = &pr[i];
    g->tn = (g->N + bn - 1) / bn;
    g->tiles = (g->M + bm - 1) / bm * g->tn;
    g->al = al16(g->A, g->lda) | al16(g->W, g->ldw) << 1;
  }
  if (big) { /* large tiles run only where there are plenty: no split-K */
    int blk = 0;
    for (int i = p0; i < p1; i++) {
      gprob_t *g = &pr[i];
      g->kper = g->K, g->splits = 1, g->blk0 = blk, g->cnt0 = 0, g->poff = 0;
      blk += g->tiles;
    }
    *blocks = blk, *ntiles = 0, *part_floats = 0;
    return;
  }
  /* split-K parts by work, not by tiles (split_rule.h): a problem deep in K
   * (B1's 9-action heads beside the value's 51) is split where a shallow one
   * in the same launch is not (DEVICE_NOTES.md items 40 and 181; occ is the
   * config's cuda_gemm_occupancy) */
  long long work = 0;
  for (int i = p0; i < p1; i++) work += (long long)pr[i].tiles * pr[i].K;
  int blk = 0, cnt = 0;
  size_t pf = 0;
  for (int i = p0; i < p1; i++) {
    gprob_t *g = &pr[i];
    g->kper = gemm_split_kper(g->K, work, occ, nsm);
    g->splits = (g->K + g->kper - 1) / g->kper;
    if (g->splits < 1) g->splits = 1;
    g->blk0 = blk, blk += g->tiles * g->splits;
    g->cnt0 = cnt, cnt += g->tiles;
    g->poff = (long long)(pf / GPART);
    if (g->splits > 1) pf += (size_t)g->tiles * g->splits * GPART;
  }
  *blocks = blk, *ntiles = cnt, *part_floats = pf;
}

/* Every phase planned (tile shape, split-K parts, each problem's first
 * block), then the problems and the split-K scratch into device memory. */
int gemm_plan(cuda_fused_t *f, gemm_table_t *t, int occupancy) {
  gprob_t *pr = t->pr;
  const int np = t->np;
  if (t->nph != GEMM_PHASES) return (int)cudaErrorInvalidValue;
  t->ph0[GEMM_PHASES] = np;
  int dev = 0, nsm = 132;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return (int)cudaGetLastError();
  for (int ph = 0; ph < GEMM_PHASES; ph++) {
    const int p0 = t->ph0[ph], p1 = t->ph0[ph + 1];
    if (p1 - p0 > GEMM_MAXP) return (int)cudaErrorInvalidValue; /* cannot happen within the config's bounds */
    for (int i = p0; i < p1; i++) /* the layer-GEMM kernel's epilogue: a bias only forward, a mask only backward */
      if ((ph < PH_B1 && pr[i].mask) || (ph >= PH_B1 && ph < PH_WG && pr[i].bias)) return (int)cudaErrorInvalidValue;
  }
  const int occ = occupancy >= 1 ? occupancy : 2;
  /* the wgmma phases' TMA descriptors (A, W per problem), encoded as each
   * phase is planned: without the kernel's setup or the driver's encoder, or
   * for a phase whose descriptors the driver refuses, the mma.sync tiles */
  void *enc = f->tc && gemm_wgmma_usable() ? gemm_wgmma_setup() : NULL;
  const size_t mb = gemm_wgmma_map_bytes();
  char *maps = enc ? (char *)aligned_alloc(64, 2 * (size_t)np * mb) : NULL; /* CUtensorMap is 64-byte aligned */
  if (maps) memset(maps, 0, 2 * (size_t)np * mb);
  int any = 0;
  size_t part = 0, part_side = 0, part_t1 = 0;
  int cnt = 0, cnt_side = 0, cnt_t1 = 0;
  for (int ph = 0; ph < GEMM_PHASES; ph++) {
    const int p0 = t->ph0[ph], p1 = t->ph0[ph + 1];
    /* large tiles (fp32 FFMA forward and backward phases) when they give
     * every SM BIG_PER_SM blocks at least */
    int big = 0;
    if (f->tc == 0 && ph < PH_WG) {
      int bt = 0;
      for (int i = p0; i < p1; i++) bt += (pr[i].M + GBM2 - 1) / GBM2 * ((pr[i].N + GBN2 - 1) / GBN2);
      big = bt >= BIG_PER_SM * nsm;
    }
    /* TF32 forward phases on wgmma's 128 x 128 tiles (gemm_wgmma.cu) when
     * every problem fits them and either they give half the SMs a tile or
     * every problem has two tiles' rows at least (batch 256 and up). The
     * second rule is for populations, which run their members' phases as the
     * lone plan says (a member's bits are its lone twin's): at batch 256 it
     * cost the lone TF32 step +0.5% and gave 32 members -24% a member-step;
     * at 128 it cost the lone step 3%, at 64 (half-empty tiles) 10%
     * (kernels/dev/DEVICE_NOTES.md item 96). The rest keep the split-K tiles. */
    if (ph < PH_B1 && maps) {
      int bt = 0, fit = 1, mmin = INT_MAX;
      for (int i = p0; i < p1; i++) {
        bt += (pr[i].M + WG_BM - 1) / WG_BM * ((pr[i].N + WG_BN - 1) / WG_BN);
        fit &= gemm_wgmma_fits(&pr[i]);
        mmin = pr[i].M < mmin ? pr[i].M : mmin;
      }
      if (fit && (2 * bt >= nsm || mmin >= 2 * WG_BM) &&
          gemm_wgmma_encode(enc, pr + p0, p1 - p0, maps + 2 * (size_t)p0 * mb))
        big = 2, any = 1;
    }
    int blocks, tiles;
    size_t pf;
    f->ph_big[ph] = big;
    plan_phase(pr, p0, p1, nsm, big, occ, &blocks, &tiles, &pf);
    f->ph[ph][0] = p0, f->ph[ph][1] = p1 - p0, f->ph_blocks[ph] = blocks;
    /* a population runs a phase's split-K parts in one block (SER) once its
     * members' tiles alone give the planner's `occ` blocks an SM */
    {
      int t = 0;
      for (int i = p0; i < p1; i++) t += pr[i].tiles;
      f->ph_tiles[ph] = t, f->ph_occ = occ, f->nsm = nsm;
    }
    const int stride = (p1 - p0 + GEMM_IX - 1) / GEMM_IX > 1 ? (p1 - p0 + GEMM_IX - 1) / GEMM_IX : 1;
    f->ph_stride[ph] = stride;
    for (int i = p0; i < p1; i += stride) f->ph_blk0[ph][(i - p0) / stride] = pr[i].blk0;
    /* a population's SER launches: a block per tile, or per two row tiles
     * (SER2); the lookup as above (the big and wgmma phases never run SER) */
    for (int r = 0; r < 2; r++) {
      int b = 0;
      for (int i = p0; i < p1; i++) {
        pr[i].sblk[r] = b;
        b += big ? pr[i].tiles : ((pr[i].M + GBM - 1) / GBM + r) / (r + 1) * pr[i].tn;
      }
      f->ph_sblocks[r][ph] = b;
      for (int i = p0; i < p1; i += stride) f->ph_sblk[r][ph][(i - p0) / stride] = pr[i].sblk[r];
    }
    /* split-K scratch: the main stream's phases (F1..B3) run one after
     * another and share one region; the weight-gradient groups 0..2 (one
     * after another on the side stream) run beside them: a second region;
     * group 3 (trunk-1) runs on either stream (step.cu: after B3 on the main
     * one in a training step), so beside group 2 possibly: a third */
    if (ph < PH_WG) {
      part = pf > part ? pf : part;
      cnt = tiles > cnt ? tiles : cnt;
    } else if (ph < PH_WG + 3) {
      part_side = pf > part_side ? pf : part_side;
      cnt_side = tiles > cnt_side ? tiles : cnt_side;
    } else {
      part_t1 = pf, cnt_t1 = tiles;
    }
  }
  for (int ph = PH_WG; ph < GEMM_PHASES; ph++)
    for (int i = f->ph[ph][0]; i < f->ph[ph][0] + f->ph[ph][1]; i++) {
      pr[i].poff += (long long)(part / GPART), pr[i].cnt0 += cnt;
      if (ph == PH_WG + 3) pr[i].poff += (long long)(part_side / GPART), pr[i].cnt0 += cnt_side;
    }
  part += part_side + part_t1, cnt += cnt_side + cnt_t1;
  cudaError_t e = dev_alloc_t(&f->probs, sizeof(gprob_t) * (size_t)np);
  if (e == cudaSuccess) e = cudaMemcpy(f->probs, pr, sizeof(gprob_t) * (size_t)np, cudaMemcpyHostToDevice);
  if (e == cudaSuccess && part) e = dev_alloc_t(&f->gpart, sizeof(float) * part);
  if (e == cudaSuccess) e = dev_alloc_t(&f->gcnt, sizeof(int) * (size_t)cnt);
  if (e == cudaSuccess) e = cudaMemset(f->gcnt, 0, sizeof(int) * (size_t)cnt);
  if (e == cudaSuccess) e = gemm_kernel_attrs();
  if (e == cudaSuccess && any) e = dev_alloc_t(&f->wg_maps, 2 * (size_t)np * mb);
  if (e == cudaSuccess && any) e = cudaMemcpy(f->wg_maps, maps, 2 * (size_t)np * mb, cudaMemcpyHostToDevice);
  free(maps);
  return (int)e;
}

