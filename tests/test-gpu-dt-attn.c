/*
 * test-gpu-dt-attn.c — the Decision Transformer's attention on the GPU alone
 * (kernels/cuda/dt_attn.cu's FFMA kernels, dt_attn_tc.cu's TF32 mma.sync
 * kernels; issue 30) against the same math in double, and its reruns bit
 * for bit. Exits 77 with no usable GPU.
 */
#include <check.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt.h"
#include "dt_cuda.cuh"
#include "dt_gpu_testutil.h"
#include "gpu_testutil.h"
#include "model.h"
#include "testutil.h"

static model_t reg;

/* the attention rerun through the rule's form and, with the TF32 kernels
 * (tc), each backward form that fits forced (two launches, one, the pair of
 * blocks a window), its six outputs against out bit for bit; the forms
 * forced, not counting the rule's run; attn_form left to the rule */
static int same_forms(cuda_dt_t *d, float *const *out, float *const *dout, const size_t *sz, int tc,
                      const char *inputs) {
  const int fits[4] = {1, 1, d->attn_one, d->attn_pair};
  int ran = 0;
  for (int f = 0; f < (tc ? 4 : 1); f++) {
    if (!fits[f]) continue;
    d->attn_form = f - 1;
    int used, form;
    ck_assert_int_eq(cuda_dt_attn_run(d, &used, &form), 0);
    if (f) ck_assert_int_eq(form, f - 1);
    for (int i = 0; i < 6; i++) {
      float *again = malloc(sizeof(float) * sz[i]);
      CK(cudaMemcpy(again, dout[i], sizeof(float) * sz[i], cudaMemcpyDeviceToHost));
      ck_assert_msg(!memcmp(again, out[i], sizeof(float) * sz[i]), "%s: output %d differs (%s)", inputs, i,
                    f == 0 ? "the rule's form" : f == 1 ? "two launches" : f == 2 ? "one launch" : "the pair");
      free(again);
    }
    ran += f > 0;
  }
  d->attn_form = -1;
  return ran;
}

/* the attention alone (layer 0's buffers, dt_attn and dt_attn_bwd as the
 * step calls them) against the same math in double: P, att, dS, dq, dk and
 * dv for B windows of K steps (window b: b % K padded steps on the left).
 * In fp32 (the FFMA kernels) on the inputs as given, within 1e-5 of each
 * output's sum of term magnitudes; with tensor_cores on dt_attn_tc.cu's
 * mma.sync kernels (where the shapes fit: want_tc) on the inputs rounded to
 * TF32, as those kernels stage them, with P and dS rounded again before the
 * products that take them (2^-11 of the terms' magnitudes), except dk, whose
 * product takes dS as two TF32 terms (1e-5, as fp32; measured <= 8.6e-7),
 * and a rerun bit for bit */
static void attn_case(int B, int K, int E, int nh, int tc, int want_tc) {
  const int n3[3] = {4, 3, 2}, N = 3 * K, dh = E / nh, T = B * N;
  dt_layout_t L;
  dtu_build(&reg, &L, 5, 3, n3, 1, E, 12, K, nh);
  cuda_dt_t d;
  ck_assert_int_eq(cuda_dt_alloc(&d, &L, B), 0);
  d.tc = tc;
  d.pre = 0; /* the inputs as given: the TF32 kernels round them (the step's producers may round them first) */
  const size_t NE = (size_t)T * E, NN = (size_t)B * nh * N * N;
  float *in[4], *mask = malloc(sizeof(float) * B * K);
  float *dev_in[4] = {d.q, d.k, d.v, d.datt};
  for (int i = 0; i < 4; i++) {
    in[i] = malloc(sizeof(float) * NE);
    tu_fill_uniform_f32(in[i], NE, -2, 2, 21 + i, 7);
    CK(cudaMemcpy(dev_in[i], in[i], sizeof(float) * NE, cudaMemcpyHostToDevice));
    if (want_tc) /* as dt_attn_tc.cu stages them (want_tc: its warps a slab) */
      for (size_t x = 0; x < NE; x++) in[i][x] = dtu_tf32(in[i][x]);
  }
  for (int i = 0; i < B * K; i++) mask[i] = i % K >= (i / K) % K;
  CK(cudaMemcpy(d.mask, mask, sizeof(float) * B * K, cudaMemcpyHostToDevice));
  int used, form;
  ck_assert_int_eq(cuda_dt_attn_run(&d, &used, &form), 0);
  ck_assert_msg(used == want_tc, "K %d, E %d, %d heads, tc %d: %d warps a slab ran, want %d (0: FFMA)", K, E, nh, tc,
                used, want_tc);
  float *out[6], *dout[6] = {d.P, d.att, d.dS, d.dq, d.dk, d.dv};
  const size_t sz[6] = {NN, NE, NN, NE, NE, NE};
  for (int i = 0; i < 6; i++) {
    out[i] = malloc(sizeof(float) * sz[i]);
    CK(cudaMemcpy(out[i], dout[i], sizeof(float) * sz[i], cudaMemcpyDeviceToHost));
  }
  const float *q = in[0], *k = in[1], *v = in[2], *da = in[3];
  const double scale = 1 / sqrt((double)dh), rt = used ? 1.0 / 2048 : 0; /* P, dS rounded for their products */
  double *Pr = malloc(sizeof(double) * N * N), *dP = malloc(sizeof(double) * N * N),
         *Sr = malloc(sizeof(double) * N * N);
  double *dPm = malloc(sizeof(double) * N * N), *pm = malloc(sizeof(double) * N), worst[6] = {0};
#define AT_CHECK(I, GOT, WANT, MAG)                                                                                    \
  do {                                                                                                                 \
    const double e_ = fabs((double)(GOT) - (WANT)), t_ = (1e-5 + ((I) == 4 ? 0 : rt)) * (MAG) + 1e-7;                  \
    ck_assert_msg(e_ <= t_, "K %d, E %d, %d heads, tc %d: output %d at window %d head %d: %.9g, want %.9g (mag %.3g)", \
                  K, E, nh, tc, I, b, h, (double)(GOT), (double)(WANT), (double)(MAG));                                \
    worst[I] = fmax(worst[I], e_ / ((MAG) + 1e-30));                                                                   \
  } while (0)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < nh; h++) {
      const size_t pb = ((size_t)b * nh + h) * N * N;
      const float *mb = mask + (size_t)b * K;
#define ROW(X, i) ((X) + ((size_t)b * N + (i)) * E + (size_t)h * dh)
      for (int i = 0; i < N; i++) {                     /* P, att */
        double mx = -INFINITY, sum = 0, s[192], ms = 0; /* ms: the largest score's sum of magnitudes */
        for (int j = 0; j < N; j++) {
          s[j] = -INFINITY;
          if (!mb[i / 3] || j > i || !mb[j / 3]) continue;
          double a = 0, m = 0;
          for (int c = 0; c < dh; c++)
            a += (double)ROW(q, i)[c] * ROW(k, j)[c], m += fabs((double)ROW(q, i)[c] * ROW(k, j)[c]);
          s[j] = a * scale, mx = fmax(mx, s[j]), ms = fmax(ms, m * scale);
        }
        for (int j = 0; j < N; j++) sum += s[j] == -INFINITY ? 0 : exp(s[j] - mx);
        for (int j = 0; j < N; j++) { /* a score's error e moves P by about P e */
          Pr[i * N + j] = s[j] == -INFINITY ? 0 : exp(s[j] - mx) / sum;
          const double e = fabs(out[0][pb + (size_t)i * N + j] - Pr[i * N + j]);
          ck_assert_msg(e <= 1e-5 * Pr[i * N + j] * (1 + ms) + 1e-7,
                        "K %d, E %d, tc %d: P[%d][%d] of window %d: %.9g, "
                        "want %.9g",
                        K, E, tc, i, j, b, out[0][pb + (size_t)i * N + j], Pr[i * N + j]);
          worst[0] = fmax(worst[0], e / (Pr[i * N + j] + 1e-30));
        }
        pm[i] = ms;
        for (int c = 0; c < dh; c++) {
          double a = 0, m = 0;
          for (int j = 0; j < N; j++) a += Pr[i * N + j] * ROW(v, j)[c], m += Pr[i * N + j] * fabs(ROW(v, j)[c]);
          AT_CHECK(1, ROW(out[1], i)[c], a, m);
        }
      }
      for (int i = 0; i < N; i++) { /* dP, dS */
        double dot = 0, dm = 0;
        for (int j = 0; j < N; j++) {
          double a = 0, m = 0;
          for (int c = 0; c < dh; c++)
            a += (double)ROW(da, i)[c] * ROW(v, j)[c], m += fabs((double)ROW(da, i)[c] * ROW(v, j)[c]);
          dP[i * N + j] = a, dPm[i * N + j] = m, dot += Pr[i * N + j] * a, dm += Pr[i * N + j] * m;
        }
        for (int j = 0; j < N; j++) {
          Sr[i * N + j] = Pr[i * N + j] * (dP[i * N + j] - dot);
          const double m = Pr[i * N + j] * (dPm[i * N + j] + dm) * (1 + pm[i]);
          const double e = fabs(out[2][pb + (size_t)i * N + j] - Sr[i * N + j]);
          ck_assert_msg(e <= 1e-5 * m + 1e-7, "K %d, E %d, tc %d: dS[%d][%d] of window %d: %.9g, want %.9g", K, E, tc,
                        i, j, b, out[2][pb + (size_t)i * N + j], Sr[i * N + j]);
          Sr[i * N + j] = out[2][pb + (size_t)i * N + j]; /* the rest from the kernels' dS: its error not twice */
        }
      }
      for (int i = 0; i < N; i++)
        for (int c = 0; c < dh; c++) { /* dq_i, and dk_i, dv_i as key i */
          double aq = 0, mq = 0, ak = 0, mk = 0, av = 0, mv = 0;
          for (int j = 0; j < N; j++) {
            aq += Sr[i * N + j] * ROW(k, j)[c], mq += fabs(Sr[i * N + j] * ROW(k, j)[c]);
            ak += Sr[j * N + i] * ROW(q, j)[c], mk += fabs(Sr[j * N + i] * ROW(q, j)[c]);
            av += Pr[j * N + i] * ROW(da, j)[c], mv += fabs(Pr[j * N + i] * ROW(da, j)[c]);
          }
          AT_CHECK(3, ROW(out[3], i)[c], aq * scale, mq * scale);
          AT_CHECK(4, ROW(out[4], i)[c], ak * scale, mk * scale);
          AT_CHECK(5, ROW(out[5], i)[c], av, mv);
        }
      /* dk's column sums (the key bias's gradient) are zero in exact
       * arithmetic, as dS's rows sum to zero: within fp32's noise, not
       * TF32's (dt_attn_tc.cu's prod_wtv<1>) */
      for (int c = 0; c < dh; c++) {
        double sk = 0, m = 0;
        for (int i = 0; i < N; i++) {
          sk += ROW(out[4], i)[c];
          for (int j = 0; j < N; j++) m += fabs(Sr[j * N + i] * ROW(q, j)[c]) * scale;
        }
        ck_assert_msg(fabs(sk) <= 2e-5 * m + 1e-7,
                      "K %d, E %d, tc %d: window %d head %d: dk's column %d sums to %.3g "
                      "(of %.3g)",
                      K, E, tc, b, h, c, sk, m);
        worst[2] = fmax(worst[2], fabs(sk) / (m + 1e-30));
      }
#undef ROW
    }
#undef AT_CHECK
  printf(
      "attention K %d, E %d, %d heads, %s kernels: worst relative errors P %.2g, att %.2g, dq %.2g, dk %.2g, "
      "dv %.2g; dk's column sums %.2g\n",
      K, E, nh, used ? "TF32" : "fp32", worst[0], worst[1], worst[3], worst[4], worst[5], worst[2]);
  /* a rerun bit for bit; then, with the TF32 kernels, each backward form
   * that fits (two launches, one, the pair of blocks a window) against the
   * first run bit for bit. The rule: the pair where two blocks a window are
   * at most the SM count, else one launch where the windows are, else two. */
  const int windows = B * nh;
  if (used) {
    const int want = d.attn_pair && 2 * windows <= d.nsm ? DT_ATC_PAIR
                     : d.attn_one && windows <= d.nsm    ? DT_ATC_ONE
                                                         : DT_ATC_TWO;
    ck_assert_msg(form == want, "K %d, E %d, %d heads, %d windows: form %d, want %d (%d SMs, one %d, pair %d)", K, E,
                  nh, B, form, want, d.nsm, d.attn_one, d.attn_pair);
  }
  /* on an sm_90 device the pair runs wherever one launch fits (its blocks
   * are smaller) */
  int dev = 0, major = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  if (used && major >= 9 && d.attn_one)
    ck_assert_msg(d.attn_pair, "K %d, E %d, %d heads: the pair form does not run on this sm_90 device", K, E, nh);
  const int ran = same_forms(&d, out, dout, sz, used, "the inputs as given");
  if (used)
    printf("  the backward's forms (two launches%s%s): %d, bit for bit\n", d.attn_one ? ", one" : "",
           d.attn_pair ? ", the pair" : "", ran);
  /* q, k, v and dO rounded to TF32 before they arrive (as the step's
   * producers write them under dt_attn_pre), which the kernels then stage
   * without rounding, in every form: the same bits */
  d.attn_form = -1, d.pre = 1;
  if (used && cuda_dt_attn_pre(&d)) { /* dt_pre: the TMA tiles run (sm_90a) */
    for (int i = 0; i < 4; i++) CK(cudaMemcpy(dev_in[i], in[i], sizeof(float) * NE, cudaMemcpyHostToDevice));
    same_forms(&d, out, dout, sz, used, "the inputs rounded before they arrive");
    printf("  the inputs rounded before they arrive, every form: bit for bit\n");
  }
  for (int i = 0; i < 6; i++) free(out[i]);
  for (int i = 0; i < 4; i++) free(in[i]);
  free(mask), free(Pr), free(dP), free(Sr), free(dPm), free(pm);
  cuda_dt_free(&d);
}

/* the reference sizes (context 20: 60 tokens, padded to 64; one head of
 * 128), heads of 8 and of 64 with windows padded to 32 and 16 tokens, on 6
 * windows and on more than an SM each (140 of the reference sizes, 72 x 3
 * heads of 8), and a window past 64 tokens (the FFMA kernels even with
 * tensor_cores) */
START_TEST(test_attention) {
  const int shapes[4][3] = {{20, 128, 1}, {6, 24, 3}, {7, 128, 2}, {5, 64, 4}};
  for (int i = 0; i < 4; i++) {
    attn_case(6, shapes[i][0], shapes[i][1], shapes[i][2], 0, 0);
    attn_case(6, shapes[i][0], shapes[i][1], shapes[i][2], 1, 4);
  }
  attn_case(140, 20, 128, 1, 1, 4);
  attn_case(72, 6, 24, 3, 1, 4);
  attn_case(3, 22, 32, 1, 1, 0); /* 66 tokens */
}
END_TEST

int main(void) {
  tu_gpu_or_skip();
  Suite *s = suite_create("gpu-dt-attn");
  TCase *tc = tcase_create("gpu-dt-attn");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_attention);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
