/*
 * step_backward.cu — the step's backward (step_phases.cuh): dqn_loss_grad's backward
 * pass (kernels/cpu/loss_impl.h: linear_backward and lrelu_backward of
 * linear_impl.h) on the online-s rows, as layer-GEMM phases.
 *   B1  g1  = (g2 W_hc2) * lrelu'(hh)   [B, HC]  each head-1 unit from its own head's outputs
 *   B2  gh  = (g1 W_hc1) * lrelu'(h)    [B, H2]  summed over the value head and all branches
 *   B3  gt1 = (gh W_t2)  * lrelu'(h1)   [B, H1]
 * and the weight gradients dW = dY^T X (bias: the sum of dY over the batch;
 * NoisyNet sigma: dW f(eps_out) f(eps_in)^T, db f(eps_out)), in four groups
 * by the gradient dY they read:
 *   group 0 (g2): value2, branch2_d   1 (g1): value1, branch1_d
 *   group 2 (gh): trunk2              3 (gt1): trunk1
 * Every parameter gradient is overwritten once; the pre-activation
 * gradients g1, gh, gt1 are kept for the weight gradients.
 *
 * Shapes: B batch, S state, H1/H2 trunk, VH/AH head widths, HC = VH + D AH,
 * Z atoms, O2 = Z + sum_d n_d Z; g2 [B, O2] from the loss.
 */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_table.cuh"

// kernels: the layer GEMM's (gemm.cu), with the problems below

// launchers

/* where layer li's output gradient dY and input X live: buffer (0 x, 1 h1,
 * 2 h, 3 hh, 4 g2, 5 g1, 6 gh, 7 gt1), row stride, first column */
static void layer_bufs(const net_layout_t *L, const cuda_fused_t *f, int li, int *ybuf, int *ldy, long long *dy,
                       int *xbuf, int *ldx, long long *x) {
  const int HC = f->HC, O2 = f->O2;
  *dy = 0, *x = 0;
  if (li == NET_TRUNK1) {
    *ybuf = 7, *ldy = L->H1, *xbuf = 0, *ldx = L->S;
    return;
  }
  if (li == NET_TRUNK2) {
    *ybuf = 6, *ldy = L->H2, *xbuf = 1, *ldx = L->H1;
    return;
  }
  /* head set k's layer j: its trained units only (a merged prior's columns follow them) */
  const int HL = NET_HEAD_LAYERS(L->D), k = (li - NET_VALUE1) / HL, j = (li - NET_VALUE1) % HL;
  const long long s1 = (long long)k * f->SW1, so = (long long)k * f->SO;
  if (j == 0) *ybuf = 5, *ldy = HC, *dy = s1, *xbuf = 2, *ldx = L->H2;
  else if (j == 1) *ybuf = 4, *ldy = O2, *dy = so, *xbuf = 3, *ldx = HC, *x = s1;
  else {
    const int d = (j - 2) / 2;
    const long long hb = s1 + f->VHp + (long long)d * f->AHp;
    if ((j - 2) % 2 == 0) *ybuf = 5, *ldy = HC, *dy = hb, *xbuf = 2, *ldx = L->H2;
    else *ybuf = 4, *ldy = O2, *dy = so + L->Z + f->aoff[d], *xbuf = 3, *ldx = HC, *x = hb;
  }
}

/* B1..B3 and the four weight-gradient groups into the problem table. The
 * backward reads the online W pack as [k = out][n = in]: the transposed
 * product of the forward's layer, with no bias and lrelu' of the forward's
 * activations as the mask. */
int backward_problems(const net_layout_t *L, const cuda_fused_t *f, int B, const float *x, gemm_table_t *t) {
  const int HC = f->HC, O2 = f->O2, H1 = L->H1, H2 = L->H2;
  glayer_t *bw = (glayer_t *)calloc(3, sizeof(glayer_t)); /* large with K head sets: not on the stack */
  if (!bw) return (int)cudaErrorMemoryAllocation;
  glayer_t *b2 = &bw[0]; /* per set: value2 [Z][VHp], branch2_d [n_d Z][AHp]: each its own matrix */
  b2->n = f->K * (1 + L->D), b2->N = HC, b2->bias = -1;
  for (int k = 0; k < f->K; k++) {
    const long long w2 = f->pw.hc2 + (long long)k * f->SH2;
    const int s0 = k * (1 + L->D), o = k * f->SO, h = k * f->SW1;
    b2->s[s0].o0 = h, b2->s[s0].koff = o, b2->s[s0].K = L->Z, b2->s[s0].ldw = f->VHp, b2->s[s0].woff = w2;
    for (int d = 0; d < L->D; d++) {
      const int s = s0 + 1 + d;
      b2->s[s].o0 = h + f->VHp + d * f->AHp, b2->s[s].koff = o + L->Z + f->aoff[d], b2->s[s].K = L->n[d] * L->Z;
      b2->s[s].ldw = f->AHp, b2->s[s].woff = w2 + (long long)L->Z * f->VHp + (long long)f->aoff[d] * f->AHp;
    }
  }
  bw[1].n = 1, bw[1].N = H2, bw[1].bias = -1; /* hc1 [HC][H2] */
  bw[1].s[0].K = HC, bw[1].s[0].ldw = H2, bw[1].s[0].woff = f->pw.hc1;
  bw[2].n = 1, bw[2].N = H1, bw[2].bias = -1; /* t2 [H2][H1] */
  bw[2].s[0].K = H2, bw[2].s[0].ldw = H1, bw[2].s[0].woff = f->pw.t2;
  int rc;
  gemm_begin_phase(t);
  if ((rc = gemm_add_layer(t, &bw[0], f->w_on, f->g2, O2, B, f->g1, HC, f->hh, HC, 0))) goto out;
  gemm_begin_phase(t);
  /* with attention B2 gives dL/dh' (no mask: h' is not an lrelu output); attn.cu goes on to gh */
  if ((rc = gemm_add_layer(t, &bw[1], f->w_on, f->g1, HC, B, f->attn ? f->gatt : f->gh, H2, f->attn ? NULL : f->h,
                           H2, 0)))
    goto out;
  gemm_begin_phase(t);
  if ((rc = gemm_add_layer(t, &bw[2], f->w_on, f->gh, H2, B, f->gt1, H1, f->h1, H1, 0))) goto out;
  {
    const float *bufs[8] = {x, f->h1, f->attn ? f->at.hatt : f->h, f->hh, f->g2, f->g1, f->gh, f->gt1};
    for (int g = 0; g < 4; g++) { /* the layers whose output gradient is g2, g1, gh, gt1 (ybuf 4..7) */
      gemm_begin_phase(t);
      for (int li = 0; li < L->n_layers; li++) {
        const net_layer_t *l = &L->layer[li];
        int ybuf, xbuf, ldy, ldx;
        long long dy, xo;
        layer_bufs(L, f, li, &ybuf, &ldy, &dy, &xbuf, &ldx, &xo);
        if (ybuf != 4 + g) continue;
        if ((rc = gemm_add_wgrad(t, bufs[ybuf] + dy, ldy, bufs[xbuf] + xo, ldx, l->out, l->in, B, l->off_w, l->off_b,
                                 l->noisy ? l->off_sw : -1, l->noisy ? l->off_sb : -1, l->noisy ? l->noise_off : -1,
                                 l->noisy ? l->noise_off + l->in : -1)))
          goto out;
      }
    }
  }
out:
  free(bw);
  return rc;
}

extern "C" int cuda_backward(const cuda_fused_t *f, int k, float slope, float *grad, const float *fn,
                             cudaStream_t st) {
  return cuda_gemm_phase(f, PH_B1 + k - 1, slope, grad, fn, st);
}

extern "C" int cuda_weight_grads(const cuda_fused_t *f, int g, float slope, float *grad, const float *fn,
                                 cudaStream_t st) {
  return cuda_gemm_phase(f, PH_WG + g, slope, grad, fn, st);
}
