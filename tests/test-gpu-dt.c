/*
 * test-gpu-dt.c — the Decision Transformer's CUDA loss and gradient
 * (kernels/cuda/dt_cuda.cuh; issue 30) against the golden case tests/golden/dt
 * (PyTorch autograd in float64: loss and each step's loss 1e-5 relative,
 * the logits 1e-5, every gradient tensor 1e-4 relative in norm, the
 * attention key biases — zero in exact arithmetic — 1e-6 absolutely), and
 * against the CPU spec (dt_loss_grad_f32) on a larger random batch with
 * padding, 3 heads and 2 blocks (loss 1e-5 relative, every tensor 1e-4 in
 * norm); reruns bit-identical; with tensor_cores (TF32 GEMMs and
 * attention) the same cases and a learner within TF32's bounds. Exits 77
 * with no usable GPU.
 */
#include <check.h>
#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#include "backend.h"
#include "dqnd_build_config.h"
#include "dt.h"
#include "dt_cuda.cuh"
#include "feed.h"
#include "learner.h"
#include "learner_impl.h"
#include "golden_util.h"
#include "gpu_testutil.h"
#include "model.h"
#include "testutil.h"
#include "dt_gpu_testutil.h"

static model_t reg;

/* the batch b and parameters p onto the device, the loss and gradient back:
 * g [n_params], ls [B K], z [B K A]; returns the loss */
static double run_gpu(cuda_dt_t *d, const float *p, const dt_batch_t *b, float *g, float *ls, float *z) {
  const dt_layout_t *L = &d->L;
  const size_t BK = (size_t)b->B * L->K;
  CK(cudaMemcpy(d->p, p, sizeof(float) * (size_t)L->n_params, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d->states, b->states, sizeof(float) * BK * L->S, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d->rtg, b->rtg, sizeof(float) * BK, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d->mask, b->mask, sizeof(float) * BK, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d->actions, b->actions, sizeof(int32_t) * BK, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d->timesteps, b->timesteps, sizeof(int32_t) * BK, cudaMemcpyHostToDevice));
  CK(cudaMemset(d->g, 0xff, sizeof(float) * (size_t)L->n_params)); /* NaN: every gradient must be written */
  ck_assert_int_eq(cuda_dt_loss_grad(d, 0), 0);
  CK(cudaDeviceSynchronize());
  float sums[4];
  CK(cudaMemcpy(sums, d->sums, sizeof sums, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(g, d->g, sizeof(float) * (size_t)L->n_params, cudaMemcpyDeviceToHost));
  if (ls) CK(cudaMemcpy(ls, d->loss_step, sizeof(float) * BK, cudaMemcpyDeviceToHost));
  if (z) CK(cudaMemcpy(z, d->z, sizeof(float) * BK * L->A, cudaMemcpyDeviceToHost));
  return sums[0];
}

/* every DT tensor of g within tol (relative, in norm) of want; the key
 * biases within kabs absolutely. Returns the worst relative error. */
static double check_grads(const float *g, const double *want_f, const float *want, double tol, double kabs,
                          const char *what) {
  double worst = 0;
  for (int i = 0; i < reg.n; i++) {
    const model_param_t *mp = &reg.p[i];
    if (mp->vec != MODEL_VEC_DT) continue;
    double num = 0, den = 0, amax = 0;
    for (int64_t k = 0; k < model_param_count(mp); k++) {
      const double w = want_f ? want_f[mp->offset + k] : want[mp->offset + k], e = g[mp->offset + k] - w;
      ck_assert_msg(isfinite(g[mp->offset + k]), "%s: %s[%lld] not written or not finite", what, mp->name,
                    (long long)k);
      num += e * e, den += w * w, amax = fabs(e) > amax ? fabs(e) : amax;
    }
    if (strstr(mp->name, "attn.k.bias")) {
      ck_assert_msg(amax <= kabs, "%s: %s |error| %.3g (zero in exact arithmetic)", what, mp->name, amax);
    } else {
      ck_assert_msg(sqrt(num) <= tol * sqrt(den), "%s: %s relative error %.3g", what, mp->name, sqrt(num / den));
      worst = fmax(worst, sqrt(num / den));
    }
  }
  return worst;
}

START_TEST(test_golden) {
  enum { B = 3, K = 4, S = 5, NA = 5 };
  const int n[2] = {3, 2};
  dt_layout_t L;
  dtu_build(&reg, &L, S, 2, n, 2, 8, 10, K, 2);
  const int64_t P = L.n_params;
  float *p = malloc(sizeof(float) * P), *g = malloc(sizeof(float) * P), ls[B * K], z[B * K * NA];
  double *pd = malloc(sizeof(double) * P), *gd = malloc(sizeof(double) * P);
  for (int i = 0; i < reg.n; i++) {
    const model_param_t *mp = &reg.p[i];
    if (mp->vec != MODEL_VEC_DT) continue;
    char nm[96];
    snprintf(nm, sizeof nm, "param.%s", mp->name);
    double *w = golden_load64("dt", nm, model_param_count(mp));
    snprintf(nm, sizeof nm, "grad.%s", mp->name);
    double *gw = golden_load64("dt", nm, model_param_count(mp));
    for (int64_t k = 0; k < model_param_count(mp); k++) p[mp->offset + k] = (float)w[k], gd[mp->offset + k] = gw[k];
    free(w), free(gw);
  }
  float st[B * K * S], rtg[B * K], mask[B * K];
  int32_t act[B * K], ts[B * K];
  double *s = golden_load64("dt", "in.states", B * K * S), *r = golden_load64("dt", "in.rtg", B * K);
  double *a = golden_load64("dt", "in.actions", B * K), *t = golden_load64("dt", "in.timesteps", B * K);
  double *m = golden_load64("dt", "in.mask", B * K);
  for (int i = 0; i < B * K * S; i++) st[i] = (float)s[i];
  for (int i = 0; i < B * K; i++) rtg[i] = (float)r[i], act[i] = (int32_t)a[i], ts[i] = (int32_t)t[i], mask[i] = (float)m[i];
  for (int i = 0; i < B * K; i++) /* padded inputs are never read: zeros here, as the CUDA sampler writes them */
    if (mask[i] == 0)
      for (int k = 0; k < S; k++) st[i * S + k] = 0;
  free(s), free(r), free(a), free(t), free(m);
  dt_batch_t bt = {B, st, rtg, mask, act, ts};
  cuda_dt_t d;
  ck_assert_int_eq(cuda_dt_alloc(&d, &L, B), 0);
  const double loss = run_gpu(&d, p, &bt, g, ls, z);
  double *want = golden_load64("dt", "out.loss", 1), *wls = golden_load64("dt", "out.loss_per_step", B * K);
  printf("golden dt: loss %.9g (golden %.9g)\n", loss, want[0]);
  ck_assert_msg(fabs(loss - want[0]) <= 1e-5 * fabs(want[0]), "loss %.9g, golden %.9g", loss, want[0]);
  for (int i = 0; i < B * K; i++)
    ck_assert_msg(mask[i] == 0 ? ls[i] == 0 : fabs(ls[i] - wls[i]) <= 1e-5 * fabs(wls[i]), "step %d: %.9g, golden %.9g",
                  i, ls[i], wls[i]);
  for (int dd = 0, off = 0; dd < 2; off += n[dd], dd++) {
    char nm[64];
    snprintf(nm, sizeof nm, "out.logits.branch%d", dd);
    double *wl = golden_load64("dt", nm, B * K * n[dd]);
    for (int i = 0; i < B * K; i++)
      for (int c = 0; c < n[dd] && mask[i] != 0; c++)
        ck_assert_msg(fabs(z[i * NA + off + c] - wl[i * n[dd] + c]) <= 1e-5 * (1 + fabs(wl[i * n[dd] + c])),
                      "logit %d of branch %d at step %d", c, dd, i);
    free(wl);
  }
  check_grads(g, gd, NULL, 1e-4, 1e-6, "golden");
  cuda_dt_free(&d);
  free(want), free(wls), free(p), free(g), free(pd), free(gd);
}
END_TEST

/* the parity cases that put W_v's weight gradient on the LayerNorm
 * stream (cuda_dt_v_ln_takes) and compared it both ways */
static int v_ln_cases;
/* the parity cases that reduced W_o's, W_q's and W_k's weight gradients in
 * one launch (red_oqk 2: cuda_dt_red_oqk_takes) and compared it both ways */
static int red_oqk_cases;

/* the step rerun with the form *knob (1, the default) set to 0 against
 * loss and g from the default: the same loss and gradient bit for bit;
 * *knob restored */
static void same_step(cuda_dt_t *d, int *knob, const float *p, const dt_batch_t *bt, const float *g, float *g2,
                      int64_t P, double loss, const char *what, const char *form) {
  ck_assert_int_eq(*knob, 1);
  *knob = 0;
  const double l0 = run_gpu(d, p, bt, g2, NULL, NULL);
  ck_assert_msg(l0 == loss && !memcmp(g, g2, sizeof(float) * (size_t)P), "%s: %s differs (loss %.9g, %.9g)", what,
                form, loss, l0);
  *knob = 1;
}
/* a batch of B windows of K steps with padding (window b: b % K padded steps
 * on the left, some timesteps beyond max_ep_len) against the CPU spec (loss
 * within tl relative, every tensor within tg in norm, the key biases kabs),
 * and a rerun bit for bit; tc: the GEMMs in TF32; *win: the attention's way
 * the CUDA side took */
static void parity_case(int B, int K, int S, int D, const int *n, int layers, int E, int heads, const char *what,
                        int tc, double tl, double tg, double kabs, int *win) {
  dt_layout_t L;
  dtu_build(&reg, &L, S, D, n, layers, E, 12, K, heads);
  const int64_t P = L.n_params;
  int A = 1;
  for (int i = 0; i < D; i++) A *= n[i];
  float *p = malloc(sizeof(float) * P), *g = malloc(sizeof(float) * P), *g2 = malloc(sizeof(float) * P);
  float *gc = malloc(sizeof(float) * P), *st = malloc(sizeof(float) * B * K * S), *rtg = malloc(sizeof(float) * B * K);
  float *mask = malloc(sizeof(float) * B * K);
  int32_t *act = malloc(sizeof(int32_t) * B * K), *ts = malloc(sizeof(int32_t) * B * K);
  tu_fill_uniform_f32(p, P, -0.3, 0.3, 1, 9);
  tu_fill_uniform_f32(st, (size_t)B * K * S, -1, 1, 2, 9);
  tu_fill_uniform_f32(rtg, (size_t)B * K, -2, 2, 3, 9);
  for (int i = 0; i < B * K; i++) {
    const int b = i / K, t = i % K;
    mask[i] = t >= b % K; /* row b: b % K padded steps on the left */
    act[i] = (i * 7 + 3) % A, ts[i] = (i * 5) % 15; /* some beyond max_ep_len: clipped */
    if (!mask[i])
      for (int k = 0; k < S; k++) st[i * S + k] = 0;
  }
  dt_batch_t bt = {B, st, rtg, mask, act, ts};
  const double want = dt_loss_grad_f32(&L, p, &bt, gc, NULL, NULL);
  cuda_dt_t d;
  ck_assert_int_eq(cuda_dt_alloc(&d, &L, B), 0);
  d.tc = tc;
  *win = d.attn_win;
  const double loss = run_gpu(&d, p, &bt, g, NULL, NULL);
  const double gw = check_grads(g, NULL, gc, tg, kabs, what);
  printf("parity %s%s (attention a block a %s): loss %.9g, cpu %.9g (%.2g); gradients within %.2g\n", what,
         tc ? " in TF32" : "", d.attn_win ? "window" : "query", loss, want, fabs(loss - want) / fabs(want), gw);
  ck_assert_msg(fabs(loss - want) <= tl * fabs(want), "%s: loss %.9g, cpu %.9g", what, loss, want);
  run_gpu(&d, p, &bt, g2, NULL, NULL);
  ck_assert_msg(!memcmp(g, g2, sizeof(float) * P), "%s: a rerun's gradient differs", what);
  /* the heads' kernels reading the heads' weights from L2 (head_sw 0: the
   * form for heads too large for shared memory) against their staged copy
   * (every shape here stages them): the same floats in the same sums, so
   * the same bits */
  same_step(&d, &d.head_sw, p, &bt, g, g2, P, loss, what, "the heads read from L2 (head_sw 0)");
  /* each layer's W_v weight gradient on the LayerNorm sums' stream, in
   * dhkv's scratch (v_ln 1, where that gives the same split and fused
   * bias sums), against last on the weight-gradient stream in d->tmp: the
   * same sums in the same order, so the same bits (counted: the fp32
   * cases must take it somewhere) */
  if (cuda_dt_v_ln_takes(&d)) {
    same_step(&d, &d.v_ln, p, &bt, g, g2, P, loss, what, "W_v's gradient on the weight-gradient stream (v_ln 0)");
    v_ln_cases++;
  }
  /* every tile rounding every operand itself (pre 0) against the
   * producers' rounded h1, h2, gl, q, k, v, dO and weights that the TMA
   * tile and the attention do not round again (pre 1, the default):
   * rounding twice is rounding once, so the same bits */
  if (tc) same_step(&d, &d.pre, p, &bt, g, g2, P, loss, what, "every operand rounded where it is read (pre 0)");
  /* each layer's W_o, W_q and W_k weight gradients reduced in one launch,
   * their parts in thirds of the scratch (red_oqk 2: wherever the thirds give
   * the whole's split; the default, 1, only in TF32 from 8,192 tokens, which
   * no case here has), against a reduce after each: the same sums in the
   * same order, so the same bits (counted) */
  ck_assert_int_eq(d.red_oqk, 1);
  ck_assert_msg(!cuda_dt_red_oqk_takes(&d), "%s: the default took red_oqk", what);
  d.red_oqk = 2;
  if (cuda_dt_red_oqk_takes(&d)) {
    const double l2 = run_gpu(&d, p, &bt, g2, NULL, NULL);
    ck_assert_msg(l2 == loss && !memcmp(g, g2, sizeof(float) * (size_t)P),
                  "%s: W_o's, W_q's and W_k's reduces in one launch (red_oqk 2) differ (loss %.9g, %.9g)", what, loss,
                  l2);
    red_oqk_cases++;
  }
  d.red_oqk = 1;
  cuda_dt_free(&d);
  free(p), free(g), free(g2), free(gc), free(st), free(rtg), free(mask), free(act), free(ts);
}

/* small shapes, with 24 windows and with 144 (dt_attn.cu's warps take two
 * queries at once, then four); the reference sizes (context 20, embed 128,
 * one head: the split-K weight gradients and chunked sums at their real
 * sizes); a window too large for shared memory (the attention a block a
 * query); and an embedding wider than 128 */
START_TEST(test_cpu_parity) {
  const int n3[3] = {4, 3, 2}, nref[3] = {9, 3, 3};
  int win;
  v_ln_cases = 0, red_oqk_cases = 0;
  parity_case(24, 6, 7, 3, n3, 2, 24, 3, "small", 0, 1e-5, 1e-4, 1e-5, &win);
  ck_assert_msg(win, "the small case should take a block a window");
  parity_case(144, 6, 7, 3, n3, 2, 24, 3, "small, 144 windows", 0, 1e-5, 1e-4, 1e-5, &win);
  ck_assert_msg(win, "144 small windows should take a block a window");
  parity_case(6, 20, 64, 3, nref, 3, 128, 1, "reference sizes", 0, 1e-5, 1e-4, 1e-5, &win);
  ck_assert_msg(win, "the reference sizes should take a block a window");
  parity_case(3, 80, 5, 3, n3, 1, 128, 1, "context 80", 0, 1e-5, 1e-4, 1e-5, &win);
  ck_assert_msg(!win, "context 80 x embed 128 should not fit shared memory");
  /* embed past 128: the embeddings' backward keeps 32 elements a thread */
  parity_case(6, 4, 5, 3, n3, 1, 136, 2, "embed 136", 0, 1e-5, 1e-4, 1e-5, &win);
  ck_assert_msg(v_ln_cases > 0, "no fp32 parity case put W_v's weight gradient on the LayerNorm stream");
  /* every case but embed 136's (72 tokens: unsplit) and context 80's (720
   * tokens: 11 parts, 7 in a third of its scratch) */
  ck_assert_msg(red_oqk_cases == 3, "%d of 3 fp32 parity cases reduced W_o's, W_q's and W_k's gradients in one launch",
                red_oqk_cases);
}
END_TEST

/* tensor_cores: the GEMMs and the attention's products with TF32 operands
 * (10-bit mantissas, fp32 sums)
 * against the fp32 CPU spec, within TF32's rounding: TF32_LOSS on the loss,
 * TF32_GRAD on every gradient tensor in norm, TF32_KABS on the key biases
 * (zero in exact arithmetic); reruns bit for bit as in fp32 */
#define TF32_LOSS 1e-4 /* measured on the H200: 2.0e-5 (small), 2.2e-7 (reference sizes) */
#define TF32_GRAD 1e-2 /* measured 1.4e-3, 3.5e-3 (the attention's products in TF32 too) */
#define TF32_KABS 1e-3
START_TEST(test_tf32_parity) {
  const int n3[3] = {4, 3, 2}, nref[3] = {9, 3, 3};
  int win;
  red_oqk_cases = 0;
  parity_case(24, 6, 7, 3, n3, 2, 24, 3, "small", 1, TF32_LOSS, TF32_GRAD, TF32_KABS, &win);
  parity_case(6, 20, 64, 3, nref, 3, 128, 1, "reference sizes", 1, TF32_LOSS, TF32_GRAD, TF32_KABS, &win);
  ck_assert_msg(red_oqk_cases == 2, "%d of 2 TF32 parity cases reduced W_o's, W_q's and W_k's gradients in one launch",
                red_oqk_cases);
}
END_TEST

/* one TF32 GEMM as the DT makes them (C (=, +=) op(A) op(B) + bias; split:
 * the weight gradients' split-K form, C +=; op DT_EP_GELU: of u = op(A)
 * op(B) + bias, C = gelu'(u) and G = gelu(u); op DT_EP_DGELU: C = op(A)
 * op(B) R, R a GELU's derivative) on
 * the TMA-fed wgmma tile (where it fits: unsplit, both operands K-major),
 * the register-staged wgmma tile and the mma.sync tile, each output against
 * the products of the TF32-rounded operands summed in double (exact
 * products: only fp32's sums differ), to K x 6e-8 + 1e-6 of the sum of the
 * terms' magnitudes, and the TMA tile bit for bit the register-staged one
 * (the same operands and wgmma sequence). wg_fits: the operands suit the
 * wgmma tile (on an sm_90 device of an sm_90a build it must have run
 * there). */
static double gelu(double u) { return 0.5 * u * (1 + tanh(0.7978845608028654 * (u + 0.044715 * u * u * u))); }
static double gelu_d(double x) {
  const double t = tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
}

#define DT_EP_RES (-1) /* gemm_case's: DT_EP_PLAIN with a residual R */
static const char *const tile_name[] = {"mma.sync", "wgmma", "TMA wgmma", "TMA transposing wgmma",
                                        "TMA wgmma, operands pre-rounded"};

/* ldc (also R's and G's) N + cpad: odd rows take the epilogues' one-float
 * path, rows of an even length their float2 path (dt_ep_storev) */
static void gemm_case_ld(int M, int N, int K, int ta, int tb, int acc, int with_bias, int split, int lda, int ldb,
                         int wg_fits, int op_in, int cpad) {
  /* op_in DT_EP_RES: DT_EP_PLAIN with a residual R added */
  const int op = op_in == DT_EP_RES ? DT_EP_PLAIN : op_in, use_r = op == DT_EP_DGELU || op_in == DT_EP_RES;
  const int ldc = N + cpad, ar = ta ? K : M, br = tb ? N : K;
  float *A = malloc(sizeof(float) * ar * lda), *B = malloc(sizeof(float) * br * ldb), *bias = malloc(sizeof(float) * N);
  float *C0 = malloc(sizeof(float) * M * ldc), *C = malloc(sizeof(float) * M * ldc), *G = malloc(sizeof(float) * M * ldc);
  float *R = malloc(sizeof(float) * M * ldc);
  tu_fill_uniform_f32(R, (size_t)M * ldc, -3, 3, 15, 3);
  tu_fill_uniform_f32(A, (size_t)ar * lda, -1, 1, 11, 3);
  tu_fill_uniform_f32(B, (size_t)br * ldb, -1, 1, 12, 3);
  tu_fill_uniform_f32(bias, N, -1, 1, 13, 3);
  tu_fill_uniform_f32(C0, (size_t)M * ldc, -1, 1, 14, 3);
  const size_t cap = (size_t)M * N * 64;
  float *dA, *dB, *dbias, *dC, *dpart, *dR, *dG;
  CK(cudaMalloc((void **)&dR, sizeof(float) * M * ldc));
  CK(cudaMalloc((void **)&dG, sizeof(float) * M * ldc));
  CK(cudaMemcpy(dR, R, sizeof(float) * M * ldc, cudaMemcpyHostToDevice));
  CK(cudaMalloc((void **)&dA, sizeof(float) * ar * lda));
  CK(cudaMalloc((void **)&dB, sizeof(float) * br * ldb));
  CK(cudaMalloc((void **)&dbias, sizeof(float) * N));
  CK(cudaMalloc((void **)&dC, sizeof(float) * M * ldc));
  CK(cudaMalloc((void **)&dpart, sizeof(float) * cap));
  CK(cudaMemcpy(dA, A, sizeof(float) * ar * lda, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dB, B, sizeof(float) * br * ldb, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dbias, bias, sizeof(float) * N, cudaMemcpyHostToDevice));
  /* split (the weight gradients): db += op(A)'s row sums beside it (the
   * bias gradient; fused into the transposing TMA tile where it runs) */
  float *db0 = malloc(sizeof(float) * M), *db = malloc(sizeof(float) * M), *ddb = NULL;
  tu_fill_uniform_f32(db0, M, -1, 1, 16, 3);
  if (split) CK(cudaMalloc((void **)&ddb, sizeof(float) * M));
  int sm90 = 0;
  struct cudaDeviceProp pr;
  if (DQN_SM90A && cudaGetDeviceProperties(&pr, 0) == cudaSuccess) sm90 = pr.major == 9 && pr.minor == 0;
  const int add = acc || split;
  /* the TMA tile takes unsplit calls with both operands K-major, the
   * transposing TMA tile the weight gradients' form (op(A) = A^T, op(B) =
   * B), split or not */
  const int tma_fits = wg_fits && !ta && tb && !split, tmt_fits = wg_fits && ta && !tb;
  float *Cwg = malloc(sizeof(float) * M * ldc), *Gwg = malloc(sizeof(float) * M * ldc);
  int ran_tma = 0;
  for (int wg = 2; wg >= 0; wg--) {
    CK(cudaMemcpy(dC, C0, sizeof(float) * M * ldc, cudaMemcpyHostToDevice));
    if (ddb) CK(cudaMemcpy(ddb, db0, sizeof(float) * M, cudaMemcpyHostToDevice));
    int used = -1;
    CK((cudaError_t)cuda_dt_gemm_tf32(wg, M, N, K, dA, lda, ta, dB, ldb, tb, dC, ldc, with_bias ? dbias : NULL, acc,
                                      op, use_r ? dR : NULL, ldc, op == DT_EP_GELU ? dG : NULL,
                                      split ? dpart : NULL, cap, ddb, &used));
    if (ddb) {
      CK(cudaMemcpy(db, ddb, sizeof(float) * M, cudaMemcpyDeviceToHost));
      double worst = 0;
      for (int m = 0; m < M; m++) {
        double sum = db0[m], mag = fabs(db0[m]);
        for (int k = 0; k < K; k++) {
          const double a = ta ? A[(size_t)k * lda + m] : A[(size_t)m * lda + k];
          sum += a, mag += fabs(a);
        }
        const double e = fabs(db[m] - sum);
        worst = e / mag > worst ? e / mag : worst;
        ck_assert_msg(e <= (K * 6e-8 + 1e-6) * mag, "%d x %d x %d on the %s tile: db[%d] %.9g, want %.9g", M, N, K,
                      tile_name[used], m, db[m], sum);
      }
      printf("TF32 GEMM %d x %d x %d on the %s tile: the bias gradient (fp32 row sums) within %.2g of the terms' "
             "magnitude\n", M, N, K, tile_name[used], worst);
    }
    ck_assert_int_eq(used, !wg || !sm90 || !wg_fits ? 0 : wg == 2 && tma_fits ? 2 : wg == 2 && tmt_fits ? 3 : 1);
    CK(cudaMemcpy(C, dC, sizeof(float) * M * ldc, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(G, dG, sizeof(float) * M * ldc, cudaMemcpyDeviceToHost));
    if (used == 2 || used == 3) { /* kept for the register-staged tile's run, next */
      memcpy(Cwg, C, sizeof(float) * M * ldc), memcpy(Gwg, G, sizeof(float) * M * ldc);
      ran_tma = used;
    } else if (used == 1 && ran_tma) {
      /* the same rounded operands, the same wgmma sequence, the same
       * epilogue: bit for bit the TMA tile's */
      ck_assert_msg(!memcmp(Cwg, C, sizeof(float) * M * ldc), "%d x %d x %d: the %s tile's C differs from the "
                    "register-staged tile's", M, N, K, tile_name[ran_tma]);
      ck_assert_msg(op != DT_EP_GELU || !memcmp(Gwg, G, sizeof(float) * M * ldc), "%d x %d x %d: the %s tile's G "
                    "differs from the register-staged tile's", M, N, K, tile_name[ran_tma]);
      printf("TF32 GEMM %d x %d x %d: the %s tile bit for bit the register-staged wgmma tile\n", M, N, K,
             tile_name[ran_tma]);
    }
    double worst = 0;
    for (int m = 0; m < M; m++)
      for (int n = 0; n < N; n++) {
        double s = 0, mag = 0;
        for (int k = 0; k < K; k++) {
          const double t = (double)dtu_tf32(ta ? A[(size_t)k * lda + m] : A[(size_t)m * lda + k]) *
                           (double)dtu_tf32(tb ? B[(size_t)n * ldb + k] : B[(size_t)k * ldb + n]);
          s += t, mag += fabs(t);
        }
        if (op == DT_EP_DGELU) { /* C = the product times R */
          const double r = R[(size_t)m * ldc + n];
          s *= r, mag *= fabs(r);
        } else {
          if (with_bias && !split) s += bias[n], mag += fabs(bias[n]);
          if (use_r) s += R[(size_t)m * ldc + n], mag += fabs(R[(size_t)m * ldc + n]);
          if (add) s += C0[(size_t)m * ldc + n], mag += fabs(C0[(size_t)m * ldc + n]);
        }
        double tol = (K * 6e-8 + 1e-6) * mag + 1e-30; /* the sum's */
        if (op == DT_EP_GELU) {
          /* G = gelu(u), C = gelu'(u): u's error through gelu (slope under
           * 1.13) and gelu' (slope under 0.6), and the float tanh's (about
           * 1e-7 absolutely, 1e-6 allowed with |u|'s scale) */
          const double ge = fabs(G[(size_t)m * ldc + n] - gelu(s)), gt = 1.13 * tol + 1e-6 * (1 + fabs(s));
          ck_assert_msg(ge <= gt, "%d x %d x %d: G[%d][%d] %.9g, gelu(u) %.9g", M, N, K, m, n,
                        G[(size_t)m * ldc + n], gelu(s));
          tol = 0.6 * tol + 1e-6 * (1 + fabs(s)), s = gelu_d(s);
        }
        const double e = fabs(C[(size_t)m * ldc + n] - s);
        const double rel = e / mag;
        worst = rel > worst ? rel : worst;
        ck_assert_msg(e <= tol, "%d x %d x %d (ta %d, tb %d%s, ldc %d) on the %s tile: C[%d][%d] %.9g, want %.9g", M,
                      N, K, ta, tb, split ? ", split" : "", ldc, tile_name[used], m, n, C[(size_t)m * ldc + n], s);
      }
    printf("TF32 GEMM %d x %d x %d (ta %d, tb %d%s%s, ldc %d) on the %s tile: within %.2g of the terms' magnitude\n",
           M, N, K, ta, tb, split ? ", split over k" : "", op == DT_EP_GELU ? ", GELU" : op == DT_EP_DGELU ? ", GELU'" : use_r ? ", + R" : "",
           ldc, tile_name[used], worst);
  }
  if (ran_tma == 2) {
    /* the TMA tile told that A and B are TF32 values already (as dt_pre's
     * producers write them) rounds nothing: on the rounded operands it must
     * give the bits it gave rounding the raw ones itself */
    float *Ar = malloc(sizeof(float) * ar * lda), *Br = malloc(sizeof(float) * br * ldb);
    for (size_t i = 0; i < (size_t)ar * lda; i++) Ar[i] = dtu_tf32(A[i]);
    for (size_t i = 0; i < (size_t)br * ldb; i++) Br[i] = dtu_tf32(B[i]);
    CK(cudaMemcpy(dA, Ar, sizeof(float) * ar * lda, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, Br, sizeof(float) * br * ldb, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dC, C0, sizeof(float) * M * ldc, cudaMemcpyHostToDevice));
    int used = -1;
    CK((cudaError_t)cuda_dt_gemm_tf32(3, M, N, K, dA, lda, ta, dB, ldb, tb, dC, ldc, with_bias ? dbias : NULL, acc, op,
                                      use_r ? dR : NULL, ldc, op == DT_EP_GELU ? dG : NULL, NULL, cap, NULL,
                                      &used));
    ck_assert_int_eq(used, 4);
    CK(cudaMemcpy(C, dC, sizeof(float) * M * ldc, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(G, dG, sizeof(float) * M * ldc, cudaMemcpyDeviceToHost));
    ck_assert_msg(!memcmp(Cwg, C, sizeof(float) * M * ldc), "%d x %d x %d: the %s tile's C differs from the TMA "
                  "tile's that rounded them", M, N, K, tile_name[4]);
    ck_assert_msg(op != DT_EP_GELU || !memcmp(Gwg, G, sizeof(float) * M * ldc), "%d x %d x %d: the %s tile's G "
                  "differs", M, N, K, tile_name[4]);
    printf("TF32 GEMM %d x %d x %d: the %s tile bit for bit the TMA tile that rounds\n", M, N, K, tile_name[4]);
    free(Ar), free(Br);
  }
  free(Cwg), free(Gwg), free(db0), free(db);
  if (ddb) cudaFree(ddb);
  cudaFree(dA), cudaFree(dB), cudaFree(dbias), cudaFree(dC), cudaFree(dpart), cudaFree(dR), cudaFree(dG);
  free(A), free(B), free(bias), free(C0), free(C), free(G), free(R);
}

/* gemm_case_ld with rows of C one float longer than an even length, then
 * with them even: each epilogue's one-float and vector paths */
static void gemm_case(int M, int N, int K, int ta, int tb, int acc, int with_bias, int split, int lda, int ldb,
                      int wg_fits, int op) {
  gemm_case_ld(M, N, K, ta, tb, acc, with_bias, split, lda, ldb, wg_fits, op, N % 2 ? 4 : 3);
  gemm_case_ld(M, N, K, ta, tb, acc, with_bias, split, lda, ldb, wg_fits, op, N % 2 ? 3 : 4);
}

/* the TF32 GEMM tiles (dt_wgmma.cu and dt.cu's mma.sync tile) in each of
 * the DT's forms and epilogues, at sizes that leave partial tiles, partial
 * 32-k chunks and split-K parts ending mid-chunk; and operands the wgmma
 * tile cannot take (rows not 16-byte aligned: the mma.sync tile runs them) */
START_TEST(test_tf32_gemm) {
  const int P = DT_EP_PLAIN;
  gemm_case(200, 136, 132, 0, 1, 0, 1, 0, 132, 140, 1, P);  /* a layer's forward: x W^T + b */
  gemm_case(200, 132, 136, 0, 0, 1, 0, 0, 140, 132, 1, P);  /* an input gradient: dx += dy W */
  gemm_case(132, 68, 1000, 1, 0, 0, 0, 1, 136, 72, 1, P);   /* a weight gradient: dW += dy^T x, split over k */
  gemm_case(132, 68, 300, 1, 0, 1, 1, 0, 136, 72, 1, P);    /* the same form unsplit, with acc and a bias */
  gemm_case(128, 128, 3840, 1, 0, 0, 0, 1, 128, 128, 1, P); /* the reference sizes' q weight gradient at batch 64 */
  /* k of DW_TMT_STAGED (8,192) or more: the transposing TMA tile's staged
   * epilogue, bit for bit the register-staged tile's; the reference sizes'
   * q weight gradient at batch 256, then partial tiles unsplit with acc */
  gemm_case(128, 128, 15360, 1, 0, 0, 0, 1, 128, 128, 1, P);
  gemm_case(132, 68, 8200, 1, 0, 1, 1, 0, 136, 72, 1, P);
  gemm_case(68, 72, 100, 1, 1, 1, 1, 0, 68, 100, 1, P);     /* both transposed */
  gemm_case(3840, 128, 128, 0, 1, 0, 1, 0, 128, 128, 1, P); /* the reference sizes' q at batch 64 */
  /* the TMA tile's ring: W_2 at batch 64 (120 tiles, 16 chunks) takes the
   * deep ring, a launch of more tiles than SMs the default; the same bits
   * as the register-staged tile either way (gemm_case_ld) */
  const int deep = cuda_dt_tma_stages(3840, 128, 512), shallow = cuda_dt_tma_stages(8192, 128, 160);
  int nsm = 0;
  CK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0));
  printf("the TMA tile's ring on %d SMs: %d stages for 3840 x 128 x 512, %d for 8192 x 128 x 160\n", nsm, deep,
         shallow);
  ck_assert_int_eq(shallow, 3);
  ck_assert_int_eq(deep, nsm >= 120 ? 6 : 3);
  gemm_case(3840, 128, 512, 0, 1, 0, 1, 0, 512, 512, 1, P);
  gemm_case(8192, 128, 160, 0, 1, 0, 1, 0, 160, 160, 1, P);
  gemm_case(50, 9, 15, 0, 1, 0, 1, 0, 15, 15, 0, P);        /* a head's forward over rows of 15 */
  gemm_case(200, 132, 36, 0, 1, 0, 1, 0, 36, 40, 1, DT_EP_GELU);  /* u = W_1 h + b_1: gelu'(u), gl = gelu(u) */
  gemm_case(200, 132, 36, 0, 0, 0, 0, 0, 40, 132, 1, DT_EP_DGELU); /* du = (dX W_2) gelu'(u) */
  /* the TMA tile's epilogues that read before the mainloop (dt_wg_prefetch):
   * the DGELU from W^T, a residual, an accumulation, partial tiles beside
   * whole ones */
  gemm_case(200, 132, 36, 0, 1, 0, 0, 0, 36, 40, 1, DT_EP_DGELU);
  gemm_case(200, 136, 132, 0, 1, 0, 1, 0, 132, 140, 1, DT_EP_RES); /* x + W_o c + b_o */
  gemm_case(200, 136, 132, 0, 1, 1, 1, 0, 132, 140, 1, DT_EP_PLAIN);
}
END_TEST

/* the learner: a CUDA learner's PretrainDT against the CPU learner's on the
 * same data (the same windows: the same Philox draws) over 100 steps, its
 * reruns bit for bit, a checkpoint that continues bit for bit on CUDA, Act
 * against dt_act_f32 on its own parameters */
static learner_config_t lcfg(void) {
  learner_config_t c;
  learner_config_default(&c);
  c.state_dim = 6, c.trunk_h1 = 16, c.trunk_h2 = 12, c.value_hidden = 8, c.adv_hidden = 10, c.atoms = 11;
  c.n_branches = 2, c.branch_sizes[0] = 3, c.branch_sizes[1] = 4, c.batch = 8, c.replay_capacity = 300, c.seed = 5;
  c.dt_layers = 2, c.dt_context = 4, c.dt_embed = 16, c.dt_heads = 2, c.dt_max_ep_len = 10, c.dt_rtg_scale = 4;
  c.dt_batch = 12, c.hp.dt_lr = 3e-3f, c.hp.dt_warmup = 10;
  return c;
}

static float *dt_params_of(learner_t *l) {
  const int64_t n = learner_section_bytes(l, SEC_DT_PARAMS);
  float *p = malloc((size_t)n);
  ck_assert_int_eq(learner_section_read(l, SEC_DT_PARAMS, 0, n, p), 0);
  return p;
}

/* a CPU learner of config cc and two CUDA learners of cg */
static void make3(const learner_config_t *cc, const learner_config_t *cg, learner_t **cpu, learner_t **gpu,
                  learner_t **gpu2) {
  char err[512];
  ck_assert_msg(learner_create(cc, LEARNER_BACKEND_CPU, cpu, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(learner_create(cg, LEARNER_BACKEND_CUDA, gpu, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(learner_create(cg, LEARNER_BACKEND_CUDA, gpu2, err, sizeof err) == 0, "%s", err);
}

/* |a - ref| / |ref| over n floats */
static double rel_dist(const float *a, const float *ref, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    const double e = (double)a[i] - ref[i];
    num += e * e, den += (double)ref[i] * ref[i];
  }
  return sqrt(num / den);
}

START_TEST(test_learner) {
  learner_config_t c = lcfg();
  char err[512];
  learner_t *cpu, *gpu, *gpu2;
  make3(&c, &c, &cpu, &gpu, &gpu2);
  const int64_t P = learner_config_num_dt(&c);
  float *p0c = dt_params_of(cpu), *p0g = dt_params_of(gpu);
  ck_assert_msg(!memcmp(p0c, p0g, sizeof(float) * P), "the initial DT parameters differ between the backends");
  learner_dt_stats_t sc, sg, sg2;
  ck_assert_int_eq(learner_pretrain_dt(gpu, 3, NULL, &sg, err, sizeof err), LEARNER_EEMPTY);
  ck_assert_int_eq(sg.steps_run, 0);
  tu_feed(cpu, 200, 3), tu_feed(gpu, 200, 3), tu_feed(gpu2, 200, 3);
  double worst = 0;
  for (int k = 0; k < 4; k++) {
    ck_assert_msg(learner_pretrain_dt(cpu, 25, NULL, &sc, err, sizeof err) == 0, "cpu: %s", err);
    ck_assert_msg(learner_pretrain_dt(gpu, 25, NULL, &sg, err, sizeof err) == 0, "cuda: %s", err);
    ck_assert_int_eq(learner_pretrain_dt(gpu2, 25, NULL, &sg2, err, sizeof err), 0);
    ck_assert_int_eq((int)sg.dt_step, 25 * (k + 1));
    ck_assert_int_eq(sg.steps_run, 25);
    const double rl = fabs(sg.loss_last - sc.loss_last) / fabs(sc.loss_last);
    worst = rl > worst ? rl : worst;
    printf("after %d steps: loss cpu %.7f cuda %.7f (%.2g), norm cpu %.6f cuda %.6f, lr %g / %g\n", 25 * (k + 1),
           (double)sc.loss_last, (double)sg.loss_last, rl, (double)sc.grad_norm_last, (double)sg.grad_norm_last,
           (double)sc.lr_last, (double)sg.lr_last);
    ck_assert(sg.lr_last == sc.lr_last);
  }
  ck_assert_msg(worst <= 1e-3, "the CUDA loss left the CPU's by %.3g relative", worst);
  float *pc = dt_params_of(cpu), *pg = dt_params_of(gpu), *pg2 = dt_params_of(gpu2);
  const double pe = rel_dist(pg, pc, P);
  printf("DT parameters after 100 steps: relative %.3g\n", pe);
  ck_assert_msg(pe <= 1e-3, "the CUDA parameters left the CPU's by %.3g", pe);
  ck_assert_msg(!memcmp(pg, pg2, sizeof(float) * P), "a CUDA rerun's parameters differ");
  /* Act: dt_act_f32 on the CUDA learner's own parameters */
  static model_t r2;
  model_desc_t md;
  model_desc_from_config(&md, &c);
  ck_assert_int_eq(model_build(&r2, &md, err, sizeof err), 0);
  dt_layout_t L;
  ck_assert_int_eq(dt_layout_init(&L, &r2, c.dt_context, c.dt_heads, err, sizeof err), 0);
  for (int w = 0; w < 12; w++) {
    const int n = 1 + w % 4, S = c.state_dim;
    float st[4 * 6], rtg[4], ps[4 * 6] = {0}, pr[4] = {0}, pm[4] = {0};
    int32_t a[4], ts[4], pa[4] = {0}, pt[4] = {0};
    tu_fill_uniform_f32(st, n * S, -1, 1, 11, (uint64_t)w);
    for (int t = 0; t < n; t++) rtg[t] = 3.0f - t - w * 0.5f, a[t] = (t + w) % 12, ts[t] = t + w;
    learner_dt_window_t win = {n, rtg, st, a, ts};
    int32_t got;
    ck_assert_msg(learner_act_dt(gpu, &win, &got, err, sizeof err) == 0, "%s", err);
    for (int t = 0; t < n; t++) {
      const int q = 4 - n + t;
      memcpy(ps + q * S, st + t * S, sizeof(float) * S);
      pr[q] = rtg[t] / c.dt_rtg_scale, pa[q] = t < n - 1 ? a[t] : 0, pt[q] = ts[t], pm[q] = 1;
    }
    dt_batch_t b = {1, ps, pr, pm, pa, pt};
    ck_assert_int_eq(got, dt_act_f32(&L, pg, &b));
  }
  /* a checkpoint continues bit for bit on CUDA */
  membuf_t m = {0};
  ck_assert_msg(learner_save(gpu, 1, mem_write, &m, err, sizeof err) == 0, "%s", err);
  learner_t *back;
  m.pos = 0;
  ck_assert_msg(learner_load(mem_read, &m, LEARNER_BACKEND_CUDA, &back, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(learner_pretrain_dt(back, 10, NULL, &sg2, err, sizeof err), 0);
  ck_assert_int_eq(learner_pretrain_dt(gpu, 10, NULL, &sg, err, sizeof err), 0);
  ck_assert_int_eq((int)sg2.dt_step, 110);
  float *pb = dt_params_of(back), *pg3 = dt_params_of(gpu);
  ck_assert_msg(!memcmp(pb, pg3, sizeof(float) * P), "a loaded CUDA learner's next steps differ");
  free(m.p), free(p0c), free(p0g), free(pc), free(pg), free(pg2), free(pb), free(pg3);
  learner_destroy(cpu), learner_destroy(gpu), learner_destroy(gpu2), learner_destroy(back);
}
END_TEST

/* windows from episodes of 300 steps: the returns-to-go sum up to 300
 * rewards, which the sample kernel stages in rounds of 128 (dt_train.cu);
 * each of 5 steps' losses within 1e-5 of the CPU's (the same windows: a
 * wrong return-to-go moves the loss by far more). States of S floats: at
 * 520, a window's 4 x 520 states pass the sample kernel's first round of
 * loads (DT_SAMPLE_SV x DT_SAMPLE_NT = 2,048), so its loop for the rest runs */
static void long_episodes(int state_dim) {
  learner_config_t c = lcfg();
  c.dt_max_ep_len = 400, c.replay_capacity = 1200, c.state_dim = state_dim;
  char err[512];
  learner_t *cpu, *gpu;
  ck_assert_msg(learner_create(&c, LEARNER_BACKEND_CPU, &cpu, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(learner_create(&c, LEARNER_BACKEND_CUDA, &gpu, err, sizeof err) == 0, "%s", err);
  const int n = 1000, S = c.state_dim, A = learner_config_joint_actions(&c);
  float *s = malloc(sizeof(float) * n * S), *s2 = malloc(sizeof(float) * n * S), *r = malloc(sizeof(float) * n);
  int32_t *a = malloc(sizeof(int32_t) * n);
  uint8_t *d = calloc(n, 1);
  tu_fill_uniform_f32(s, (int64_t)n * S, -1, 1, 1, 17);
  tu_fill_uniform_f32(s2, (int64_t)n * S, -1, 1, 2, 17);
  tu_fill_uniform_f32(r, n, -2, 2, 3, 17);
  for (int i = 0; i < n; i++) a[i] = (i * 7 + 1) % A, d[i] = i % 300 == 299;
  learner_transitions_t t = {n, s, a, r, s2, d, NULL, NULL};
  learner_t *ls[2] = {cpu, gpu};
  for (int k = 0; k < 2; k++) ck_assert_msg(learner_submit(ls[k], &t, err, sizeof err) == 0, "%s", err);
  for (int k = 0; k < 5; k++) {
    learner_dt_stats_t sc, sg;
    ck_assert_msg(learner_pretrain_dt(cpu, 1, NULL, &sc, err, sizeof err) == 0, "cpu: %s", err);
    ck_assert_msg(learner_pretrain_dt(gpu, 1, NULL, &sg, err, sizeof err) == 0, "cuda: %s", err);
    const double rl = fabs(sg.loss_last - sc.loss_last) / fabs(sc.loss_last);
    printf("episodes of 300 steps, states of %d, step %d: loss cpu %.7f cuda %.7f (%.2g)\n", state_dim, k + 1,
           (double)sc.loss_last, (double)sg.loss_last, rl);
    ck_assert_msg(rl <= 1e-5, "step %d: the CUDA loss %.7f, the CPU's %.7f", k + 1, (double)sg.loss_last,
                  (double)sc.loss_last);
  }
  free(s), free(s2), free(r), free(a), free(d);
  learner_destroy(cpu), learner_destroy(gpu);
}

START_TEST(test_long_episodes) {
  long_episodes(6);
  long_episodes(520);
}
END_TEST

/* the learner with tensor_cores: 100 pre-training steps of TF32 GEMMs
 * against the fp32 CPU learner (each 25 steps' last loss within
 * TF32_LEARN_LOSS, the parameters within TF32_LEARN_PARAMS in norm), reruns
 * bit for bit */
#define TF32_LEARN_LOSS 1e-4   /* measured on the H200: 2.6e-5 */
#define TF32_LEARN_PARAMS 5e-4 /* measured 1.3e-4 */
START_TEST(test_learner_tf32) {
  learner_config_t c = lcfg(), c32 = lcfg();
  c.tensor_cores = 1;
  char err[512];
  learner_t *cpu, *gpu, *gpu2;
  make3(&c32, &c, &cpu, &gpu, &gpu2);
  const int64_t P = learner_config_num_dt(&c);
  tu_feed(cpu, 200, 3), tu_feed(gpu, 200, 3), tu_feed(gpu2, 200, 3);
  double worst = 0;
  for (int k = 0; k < 4; k++) {
    learner_dt_stats_t sc, sg, sg2;
    ck_assert_msg(learner_pretrain_dt(cpu, 25, NULL, &sc, err, sizeof err) == 0, "cpu: %s", err);
    ck_assert_msg(learner_pretrain_dt(gpu, 25, NULL, &sg, err, sizeof err) == 0, "cuda: %s", err);
    ck_assert_int_eq(learner_pretrain_dt(gpu2, 25, NULL, &sg2, err, sizeof err), 0);
    ck_assert_msg(sg.loss_last == sg2.loss_last, "a TF32 rerun's loss differs");
    worst = fmax(worst, fabs(sg.loss_last - sc.loss_last) / fabs(sc.loss_last));
  }
  float *pc = dt_params_of(cpu), *pg = dt_params_of(gpu), *pg2 = dt_params_of(gpu2);
  const double pe = rel_dist(pg, pc, P);
  printf("tensor_cores DT, 100 steps against the fp32 CPU: loss within %.2g, parameters %.2g\n", worst, pe);
  ck_assert_msg(worst <= TF32_LEARN_LOSS, "the TF32 loss left the CPU's by %.3g relative", worst);
  ck_assert_msg(pe <= TF32_LEARN_PARAMS, "the TF32 parameters left the CPU's by %.3g", pe);
  ck_assert_msg(!memcmp(pg, pg2, sizeof(float) * P), "a TF32 rerun's parameters differ");
  free(pc), free(pg), free(pg2);
  learner_destroy(cpu), learner_destroy(gpu), learner_destroy(gpu2);
}
END_TEST

int main(void) {
  tu_gpu_or_skip();
  snprintf(golden_dir, sizeof golden_dir, "%s", tu_golden_dir());
  Suite *s = suite_create("gpu-dt");
  TCase *tc = tcase_create("gpu-dt");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_golden);
  tcase_add_test(tc, test_cpu_parity);
  tcase_add_test(tc, test_learner);
  tcase_add_test(tc, test_long_episodes);
  tcase_add_test(tc, test_tf32_parity);
  tcase_add_test(tc, test_tf32_gemm);
  tcase_add_test(tc, test_learner_tf32);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
