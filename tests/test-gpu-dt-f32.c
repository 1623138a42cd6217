/*
 * test-gpu-dt-f32.c — the DT's fp32 GEMM tiles (kernels/cuda/dt_gemm.cu):
 * the 128 x 128 tile (dt_gemm_big.cuh) bit for bit the 64 x 64 tile where
 * both sum each output alike (unsplit, every operand layout and epilogue),
 * and the split weight gradient with its bias sums fused into the 64 tile.
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
 * 64 tile (the tile that ran is asserted), but for the forward's rule (big 2:
 * one tile column of DTB_FWD_MIN_BLOCKS to an SM count of tiles, one block
 * an SM). */
static void f32_case(int M, int N, int K, int ta, int tb, int acc, int with_bias, int op_in, int cpad) {
  const int op = op_in == DT_EP_RES ? DT_EP_PLAIN : op_in, use_r = op == DT_EP_DGELU || op_in == DT_EP_RES;
  const int ldc = N + cpad, lda = (ta ? M : K) + 4, ldb = (tb ? K : N) + 4, ar = ta ? K : M, br = tb ? N : K;
  const size_t nc = (size_t)M * ldc;
  float *A = malloc(sizeof(float) * ar * lda), *B = malloc(sizeof(float) * br * ldb), *bias = malloc(sizeof(float) * N);
  float *C0 = malloc(sizeof(float) * nc), *R = malloc(sizeof(float) * nc), *C[3], *G[3];
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
  int nsm = 0;
  CK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0));
  const long long tiles = (long long)((M + 127) / 128) * ((N + 127) / 128);
  const int fwd = N <= 128 && tiles >= 120 && tiles <= nsm; /* the forward's rule */
  for (int big = 0; big < 3; big++) {
    C[big] = malloc(sizeof(float) * nc), G[big] = malloc(sizeof(float) * nc);
    CK(cudaMemcpy(dC, C0, sizeof(float) * nc, cudaMemcpyHostToDevice));
    CK(cudaMemset(dG, 0, sizeof(float) * nc));
    int used = -1;
    CK((cudaError_t)cuda_dt_gemm_f32(big, M, N, K, dA, lda, ta, dB, ldb, tb, dC, ldc, with_bias ? dbias : NULL, acc,
                                     op, use_r ? dR : NULL, ldc, op == DT_EP_GELU ? dG : NULL, &used));
    ck_assert_int_eq(used, big && (tiles >= 264 || (big == 2 && fwd)));
    CK(cudaMemcpy(C[big], dC, sizeof(float) * nc, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(G[big], dG, sizeof(float) * nc, cudaMemcpyDeviceToHost));
  }
  for (int big = 1; big < 3; big++) {
    ck_assert_msg(!memcmp(C[0], C[big], sizeof(float) * nc), "%d x %d x %d (ta %d, tb %d, op %d, big %d): the 128 "
                  "tile's C differs from the 64 tile's", M, N, K, ta, tb, op_in, big);
    ck_assert_msg(!memcmp(G[0], G[big], sizeof(float) * nc), "%d x %d x %d (big %d): the 128 tile's G differs", M, N,
                  K, big);
  }
  /* one output against the product in double, so the two cannot agree on something else */
  double s = 0;
  for (int k = 0; k < K; k++)
    s += (double)(ta ? A[(size_t)k * lda] : A[k]) * (tb ? B[k] : B[(size_t)k * ldb]);
  if (op == DT_EP_PLAIN && !use_r) {
    s += (with_bias ? bias[0] : 0) + (acc ? C0[0] : 0);
    ck_assert_msg(fabs(C[1][0] - s) <= 1e-5 * (1 + fabs(s)), "C[0][0] %.9g, want %.9g", C[1][0], s);
  }
  printf("fp32 GEMM %d x %d x %d (ta %d, tb %d, op %d, ldc %d): %s bit for bit the 64 x 64 tile\n", M, N, K, ta, tb,
         op_in, ldc, tiles >= 264 ? "the 128 x 128 tile" : fwd ? "the 128 x 128 tile by the forward's rule" :
         "the tile it takes (64)");
  for (int big = 0; big < 3; big++) free(C[big]), free(G[big]);
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
  f32_case(15360, 128, 512, 0, 1, 0, 1, DT_EP_RES, 3);   /* but W_2's forward there takes it by the forward's rule */
  f32_case(15300, 100, 128, 0, 1, 1, 1, DT_EP_PLAIN, 4); /* and partial tiles: 120 of them, accumulating */
  f32_case(3840, 512, 128, 0, 1, 0, 1, DT_EP_GELU, 3);   /* W_1's at batch 64: 120 tiles of 4 columns keep the 64 tile */
}
END_TEST

/* a weight gradient as lin_bwd_params makes it (dt_gemm_wgrad: dW += dy^T x
 * split over the tokens; A = dy [K][M], ta 1; B = x [K][N], tb 0) with the
 * bias gradient db += dy's column sums fused into the FFMA tile: C and db
 * against the sums in double, within the rounding bound of the order they
 * are summed in (a part of kper k: dW one fmaf a k, db four quarters of
 * kper / 4 adds then the quarters; then the parts in order, and the old
 * value), so one chunk of 16 k dropped or added twice fails; reruns bit for
 * bit */
static void f32_wgrad_case(int M, int N, int K) {
  const int lda = M + 4, ldb = N + 4, ldc = N;
  const size_t nc = (size_t)M * ldc, cap = (size_t)4 << 20;
  float *A = malloc(sizeof(float) * K * lda), *B = malloc(sizeof(float) * K * ldb), *C0 = malloc(sizeof(float) * nc);
  float *db0 = malloc(sizeof(float) * M), *C[2], *db[2];
  int kper = 0;
  tu_fill_uniform_f32(A, (size_t)K * lda, -1, 1, 41, 3);
  tu_fill_uniform_f32(B, (size_t)K * ldb, -1, 1, 42, 3);
  tu_fill_uniform_f32(C0, nc, -1, 1, 43, 3);
  tu_fill_uniform_f32(db0, M, -1, 1, 44, 3);
  float *dA, *dB, *dC, *dpart, *ddb;
  CK(cudaMalloc((void **)&dA, sizeof(float) * K * lda));
  CK(cudaMalloc((void **)&dB, sizeof(float) * K * ldb));
  CK(cudaMalloc((void **)&dC, sizeof(float) * nc));
  CK(cudaMalloc((void **)&dpart, sizeof(float) * cap));
  CK(cudaMalloc((void **)&ddb, sizeof(float) * M));
  CK(cudaMemcpy(dA, A, sizeof(float) * K * lda, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dB, B, sizeof(float) * K * ldb, cudaMemcpyHostToDevice));
  for (int run = 0; run < 2; run++) {
    C[run] = malloc(sizeof(float) * nc), db[run] = malloc(sizeof(float) * M);
    CK(cudaMemcpy(dC, C0, sizeof(float) * nc, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(ddb, db0, sizeof(float) * M, cudaMemcpyHostToDevice));
    CK(cudaMemset(dpart, 0xff, sizeof(float) * cap)); /* NaNs: a part or bias part not written shows */
    int fused = -1;
    CK((cudaError_t)cuda_dt_gemm_f32_wgrad(M, N, K, dA, lda, 1, dB, ldb, 0, dC, ldc, dpart, cap, ddb, &fused, &kper));
    ck_assert_int_eq(fused, 1);
    ck_assert_int_lt(kper, K);
    CK(cudaMemcpy(C[run], dC, sizeof(float) * nc, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(db[run], ddb, sizeof(float) * M, cudaMemcpyDeviceToHost));
  }
  ck_assert_msg(!memcmp(C[0], C[1], sizeof(float) * nc) && !memcmp(db[0], db[1], sizeof(float) * M),
                "%d x %d x %d: a rerun differs", M, N, K);
  const int parts = (K + kper - 1) / kper;
  const double u = 6e-8; /* fp32's unit roundoff, 2^-24, rounded up */
  const double bound_db = (kper / 4 + 8 + parts + 2) * u, bound_c = (kper + parts + 2) * u;
  for (int m = 0; m < M; m++) {
    double s = db0[m], mag = fabs(db0[m]);
    for (int k = 0; k < K; k++) s += A[(size_t)k * lda + m], mag += fabs(A[(size_t)k * lda + m]);
    ck_assert_msg(fabs(db[0][m] - s) <= bound_db * mag, "%d x %d x %d: db[%d] %.9g, want %.9g", M, N, K, m, db[0][m],
                  s);
  }
  for (int m = 0; m < M; m += 37)
    for (int n = 0; n < N; n += 29) {
      double s = C0[(size_t)m * ldc + n], mag = fabs(s);
      for (int k = 0; k < K; k++) {
        const double t = (double)A[(size_t)k * lda + m] * B[(size_t)k * ldb + n];
        s += t, mag += fabs(t);
      }
      const float c = C[0][(size_t)m * ldc + n];
      ck_assert_msg(fabs(c - s) <= bound_c * mag, "%d x %d x %d: C[%d][%d] %.9g, want %.9g", M, N, K, m, n, c, s);
    }
  printf("fp32 weight gradient %d x %d x %d (%d parts of %d k) with the bias fused: C and db against double, reruns "
         "bit for bit\n", M, N, K, parts, kper);
  for (int run = 0; run < 2; run++) free(C[run]), free(db[run]);
  cudaFree(dA), cudaFree(dB), cudaFree(dC), cudaFree(dpart), cudaFree(ddb);
  free(A), free(B), free(C0), free(db0);
}

START_TEST(test_f32_wgrad_bias) {
  f32_wgrad_case(128, 512, 15360); /* W_1's at batch 256 (out 128 of the MLP's second layer) */
  f32_wgrad_case(512, 128, 3840);  /* W_1's at batch 64 */
  f32_wgrad_case(100, 70, 3001);   /* partial row and column tiles, a part's last chunk short */
}
END_TEST

int main(void) {
  tu_gpu_or_skip();
  Suite *s = suite_create("gpu-dt-f32");
  TCase *tc = tcase_create("gpu-dt-f32");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_f32_big_tile);
  tcase_add_test(tc, test_f32_wgrad_bias);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
