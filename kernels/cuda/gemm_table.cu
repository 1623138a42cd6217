/*
 * gemm_table.cu — the layer GEMM's problem table as the phase files fill it
 * (gemm_table.cuh): a layer's output segments, or a weight gradient, each one
 * problem; gemm.cu plans and launches them. Host code.
 */
#include <cuda_runtime.h>
#include <string.h>

#include "gemm_table.cuh"

void gemm_begin_phase(gemm_table_t *t) { t->ph0[t->nph++] = t->np; }

int gemm_add_layer(gemm_table_t *t, const glayer_t *l, const float *pack, const float *A, int lda, int M, float *C,
                   int ldc, const float *mask, int ldm, int act) {
  for (int s = 0; s < l->n; s++) {
    if (t->np == GEMM_MAXPROBS) return (int)cudaErrorInvalidValue;
    gprob_t *g = &t->pr[t->np++];
    memset(g, 0, sizeof *g);
    const int o0 = l->s[s].o0, o1 = s + 1 < l->n ? l->s[s + 1].o0 : l->N;
    g->A = A + l->s[s].koff, g->lda = lda;
    g->W = pack + l->s[s].woff, g->ldw = l->s[s].ldw;
    g->bias = l->bias >= 0 ? pack + l->bias + o0 : NULL;
    g->C = C + o0, g->ldc = ldc;
    g->mask = mask ? mask + o0 : NULL, g->ldm = ldm;
    g->M = M, g->N = o1 - o0, g->K = l->s[s].K, g->act = act;
    g->gw = g->gb = g->gsw = g->gsb = g->fi = g->fo = -1;
  }
  return 0;
}

int gemm_add_wgrad(gemm_table_t *t, const float *dY, int ldy, const float *X, int ldx, int M, int N, int K,
                   long long gw, long long gb, long long gsw, long long gsb, long long fi, long long fo) {
  if (t->np == GEMM_MAXPROBS) return (int)cudaErrorInvalidValue;
  gprob_t *g = &t->pr[t->np++];
  memset(g, 0, sizeof *g);
  g->A = dY, g->lda = ldy, g->W = X, g->ldw = ldx;
  g->M = M, g->N = N, g->K = K;
  g->gw = gw, g->gb = gb, g->gsw = gsw, g->gsb = gsb, g->fi = fi, g->fo = fo;
  return 0;
}
