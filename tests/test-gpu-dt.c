/*
 * test-gpu-dt.c — the Decision Transformer's CUDA loss and gradient
 * (kernels/cuda/dt_cuda.cuh; issue 30) against the golden case tests/golden/dt
 * (PyTorch autograd in float64: loss and each step's loss 1e-5 relative,
 * the logits 1e-5, every gradient tensor 1e-4 relative in norm, the
 * attention key biases — zero in exact arithmetic — 1e-6 absolutely), and
 * against the CPU spec (dt_loss_grad_f32) on a larger random batch with
 * padding, 3 heads and 2 blocks (loss 1e-5 relative, every tensor 1e-4 in
 * norm); reruns bit-identical. Exits 77 with no usable GPU.
 */
#include <check.h>
#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#include "dt.h"
#include "dt_cuda.cuh"
#include "golden_util.h"
#include "gpu_testutil.h"
#include "model.h"
#include "testutil.h"

#define CK(x)                                                                                               \
  do {                                                                                                      \
    cudaError_t e_ = (x);                                                                                   \
    ck_assert_msg(e_ == cudaSuccess, "%s: %s", #x, cudaGetErrorString(e_));                                 \
  } while (0)

static model_t reg;

/* a DT registry (a minimal DQN beside it) of state S and branches n, and its layout */
static void build(dt_layout_t *l, int S, int D, const int *n, int layers, int embed, int max_ep_len, int K,
                  int heads) {
  model_desc_t d;
  memset(&d, 0, sizeof d);
  d.S = S, d.H1 = 4, d.H2 = 4, d.VH = 4, d.AH = 4, d.Z = 2, d.D = D, d.ensemble_k = 1;
  for (int i = 0; i < D; i++) d.n[i] = n[i];
  d.dt_layers = layers, d.dt_embed = embed, d.dt_max_ep_len = max_ep_len;
  char err[256];
  ck_assert_msg(model_build(&reg, &d, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(dt_layout_init(l, &reg, K, heads, err, sizeof err) == 0, "%s", err);
}

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
 * biases within kabs absolutely */
static void check_grads(const float *g, const double *want_f, const float *want, double tol, double kabs,
                        const char *what) {
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
    if (strstr(mp->name, "attn.k.bias"))
      ck_assert_msg(amax <= kabs, "%s: %s |error| %.3g (zero in exact arithmetic)", what, mp->name, amax);
    else
      ck_assert_msg(sqrt(num) <= tol * sqrt(den), "%s: %s relative error %.3g", what, mp->name, sqrt(num / den));
  }
}

START_TEST(test_golden) {
  enum { B = 3, K = 4, S = 5, NA = 5 };
  const int n[2] = {3, 2};
  dt_layout_t L;
  build(&L, S, 2, n, 2, 8, 10, K, 2);
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

/* a larger batch with padding against the CPU spec, and a rerun bit for bit */
START_TEST(test_cpu_parity) {
  enum { B = 24, K = 6, S = 7 };
  const int n[3] = {4, 3, 2};
  dt_layout_t L;
  build(&L, S, 3, n, 2, 24, 12, K, 3);
  const int64_t P = L.n_params;
  float *p = malloc(sizeof(float) * P), *g = malloc(sizeof(float) * P), *g2 = malloc(sizeof(float) * P);
  float *gc = malloc(sizeof(float) * P);
  tu_fill_uniform_f32(p, P, -0.3, 0.3, 1, 9);
  float st[B * K * S], rtg[B * K], mask[B * K];
  int32_t act[B * K], ts[B * K];
  tu_fill_uniform_f32(st, B * K * S, -1, 1, 2, 9);
  tu_fill_uniform_f32(rtg, B * K, -2, 2, 3, 9);
  for (int i = 0; i < B * K; i++) {
    const int b = i / K, t = i % K;
    mask[i] = t >= b % K; /* row b: b % K padded steps on the left */
    act[i] = (i * 7 + 3) % (4 * 3 * 2), ts[i] = (i * 5) % 15; /* some beyond max_ep_len: clipped */
    if (!mask[i])
      for (int k = 0; k < S; k++) st[i * S + k] = 0;
  }
  dt_batch_t bt = {B, st, rtg, mask, act, ts};
  const double want = dt_loss_grad_f32(&L, p, &bt, gc, NULL, NULL);
  cuda_dt_t d;
  ck_assert_int_eq(cuda_dt_alloc(&d, &L, B), 0);
  const double loss = run_gpu(&d, p, &bt, g, NULL, NULL);
  printf("parity: loss %.9g, cpu %.9g\n", loss, want);
  ck_assert_msg(fabs(loss - want) <= 1e-5 * fabs(want), "loss %.9g, cpu %.9g", loss, want);
  check_grads(g, NULL, gc, 1e-4, 1e-5, "cpu parity");
  run_gpu(&d, p, &bt, g2, NULL, NULL);
  ck_assert_msg(!memcmp(g, g2, sizeof(float) * P), "a rerun's gradient differs");
  cuda_dt_free(&d);
  free(p), free(g), free(g2), free(gc);
}
END_TEST

int main(void) {
  tu_gpu_or_skip();
  Suite *s = suite_create("gpu-dt");
  TCase *tc = tcase_create("gpu-dt");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_golden);
  tcase_add_test(tc, test_cpu_parity);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
