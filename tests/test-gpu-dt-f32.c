/*
 * test-gpu-dt-f32.c — the DT's fp32 GEMM tiles (kernels/cuda/dt_gemm.cu):
 * the 128 x 128 tile (dt_gemm_big.cuh) bit for bit the 64 x 64 tile where
 * both sum each output alike (unsplit, every operand layout and epilogue).
 * Exits 77 without a usable GPU.
 */
#include <check.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_cuda.cuh"
#include "dt_gpu_testutil.h"
#include "gpu_testutil.h"
#include "testutil.h"

#define DT_EP_RES (-1) /* f32_case's: DT_EP_PLAIN with a residual R */

/* the fp32 tiles: each DT form and epilogue on the 128 x 128 tile
 * (dt_gemm_big.cuh) bit for bit the 64 x 64 tile's (both sum each output
 * over k in order, one fmaf a k), at sizes with enough tiles to take it
 * (264, two an SM: DTB_MIN_BLOCKS), partial tiles along both, K short of a
 * chunk; rows of C of odd and even length. A launch of fewer tiles keeps the
 * 64 tile (the tile that ran is asserted). */
static void f32_case(int M, int N, int K, int ta, int tb, int acc, int with_bias, int op_in, int cpad) {
  const int op = op_in == DT_EP_RES ? DT_EP_PLAIN : op_in, use_r = op == DT_EP_DGELU || op_in == DT_EP_RES;
  const int ldc = N + cpad, lda = (ta ? M : K) + 4, ldb = (tb ? K : N) + 4, ar = ta ? K : M, br = tb ? N : K;
  const size_t nc = (size_t)M * ldc;
  float *A = malloc(sizeof(float) * ar * lda), *B = malloc(sizeof(float) * br * ldb), *bias = malloc(sizeof(float) * N);
  float *C0 = malloc(sizeof(float) * nc), *R = malloc(sizeof(float) * nc), *C[2], *G[2];
  tu_fill_uniform_f32(A, (size_t)ar * lda, -1, 1, 31, 3);
  tu_fill_uniform_f32(B, (size_t)br * ldb, -1, 1, 32, 3);
  tu_fill_uniform_f32(bias, N, -1, 1, 33, 3);
  tu_fill_uniform_f32(C0, nc, -1, 1, 34, 3);
  tu_fill_uniform_f32(R, nc, -3, 3, 35, 3);
  float *dA, *dB, *dbias, *dC, *dR, *dG;
  CK(cudaMalloc((void **)&dA, sizeof(float) * ar * lda));
  CK(cudaMalloc((void **)&dB, sizeof(float) * br * ldb));
  CK(cudaMalloc((void **)&dbias, sizeof(float) * N));
  CK(cudaMalloc((void **)&dC, sizeof(float) * nc));
  CK(cudaMalloc((void **)&dR, sizeof(float) * nc));
  CK(cudaMalloc((void **)&dG, sizeof(float) * nc));
  CK(cudaMemcpy(dA, A, sizeof(float) * ar * lda, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dB, B, sizeof(float) * br * ldb, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dbias, bias, sizeof(float) * N, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dR, R, sizeof(float) * nc, cudaMemcpyHostToDevice));
  for (int big = 0; big < 2; big++) {
    C[big] = malloc(sizeof(float) * nc), G[big] = malloc(sizeof(float) * nc);
    CK(cudaMemcpy(dC, C0, sizeof(float) * nc, cudaMemcpyHostToDevice));
    CK(cudaMemset(dG, 0, sizeof(float) * nc));
    int used = -1;
    CK((cudaError_t)cuda_dt_gemm_f32(big, M, N, K, dA, lda, ta, dB, ldb, tb, dC, ldc, with_bias ? dbias : NULL, acc,
                                     op, use_r ? dR : NULL, ldc, op == DT_EP_GELU ? dG : NULL, &used));
    ck_assert_int_eq(used, big && ((M + 127) / 128) * ((N + 127) / 128) >= 264);
    CK(cudaMemcpy(C[big], dC, sizeof(float) * nc, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(G[big], dG, sizeof(float) * nc, cudaMemcpyDeviceToHost));
  }
  ck_assert_msg(!memcmp(C[0], C[1], sizeof(float) * nc), "%d x %d x %d (ta %d, tb %d, op %d): the 128 tile's C "
                "differs from the 64 tile's", M, N, K, ta, tb, op_in);
  ck_assert_msg(!memcmp(G[0], G[1], sizeof(float) * nc), "%d x %d x %d: the 128 tile's G differs", M, N, K);
  /* one output against the product in double, so the two cannot agree on something else */
  double s = 0;
  for (int k = 0; k < K; k++)
    s += (double)(ta ? A[(size_t)k * lda] : A[k]) * (tb ? B[k] : B[(size_t)k * ldb]);
  if (op == DT_EP_PLAIN && !use_r) {
    s += (with_bias ? bias[0] : 0) + (acc ? C0[0] : 0);
    ck_assert_msg(fabs(C[1][0] - s) <= 1e-5 * (1 + fabs(s)), "C[0][0] %.9g, want %.9g", C[1][0], s);
  }
  printf("fp32 GEMM %d x %d x %d (ta %d, tb %d, op %d, ldc %d): %s bit for bit the 64 x 64 tile\n", M, N, K, ta, tb,
         op_in, ldc, ((M + 127) / 128) * ((N + 127) / 128) >= 264 ? "the 128 x 128 tile" : "the tile it takes (64)");
  for (int big = 0; big < 2; big++) free(C[big]), free(G[big]);
  cudaFree(dA), cudaFree(dB), cudaFree(dbias), cudaFree(dC), cudaFree(dR), cudaFree(dG);
  free(A), free(B), free(bias), free(C0), free(R);
}

START_TEST(test_f32_big_tile) {
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) f32_case(8100, 520, 132, ta, tb, 0, 1, DT_EP_PLAIN, 3); /* 320 tiles, partial ones */
  f32_case(8448, 512, 128, 0, 1, 0, 1, DT_EP_GELU, 4);  /* 264 tiles, the fewest that take it: gelu'(u), gelu(u) */
  f32_case(8448, 512, 128, 0, 0, 0, 0, DT_EP_DGELU, 3); /* (dX W_2) gelu'(u) */
  f32_case(8448, 512, 36, 0, 1, 1, 1, DT_EP_PLAIN, 4);  /* an accumulation */
  f32_case(8448, 520, 12, 0, 1, 0, 1, DT_EP_RES, 3);    /* a residual; K under two chunks */
  f32_case(15360, 128, 128, 0, 1, 0, 1, DT_EP_PLAIN, 4); /* a lone learner's batch 256: 120 tiles keep the 64 tile */
}
END_TEST

int main(void) {
  tu_gpu_or_skip();
  Suite *s = suite_create("gpu-dt-f32");
  TCase *tc = tcase_create("gpu-dt-f32");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_f32_big_tile);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
