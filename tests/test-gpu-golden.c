/*
 * test-gpu-golden.c — the CUDA loss and gradient (the step's phases,
 * kernels/cuda/step_phases.cuh: the attention phase, the K head sets side by side
 * with their merged priors, the ensemble loss) on the golden cases
 * themselves: PyTorch autograd in float64 (tests/golden/, README there), the
 * same oracle test-golden holds the CPU to. Loss and per-sample losses 1e-5
 * relative, every gradient tensor 1e-4 relative (||g - g*|| / ||g*||),
 * attn.k.bias absolutely (its exact gradient is zero). The bootstrap masks
 * are the case's (in.masks, given to the kernel as mask_in); NoisyNet noise
 * the case's raw eps through the learner's own transform. Exits 77 with no
 * usable GPU.
 */
#include <check.h>
#include <cuda_runtime.h>
#include <string.h>

#include "generic_loss.cuh"
#include "dqn_math.h"
#include "golden_util.h"
#include "gpu_testutil.h"
#include "testutil.h"

#define CK(x)                                                                                               \
  do {                                                                                                      \
    cudaError_t e_ = (x);                                                                                   \
    ck_assert_msg(e_ == cudaSuccess, "%s: %s", #x, cudaGetErrorString(e_));                                 \
  } while (0)

static float *to_device(const double *h, int64_t n) {
  float *f = malloc(sizeof(float) * (size_t)(n ? n : 1)), *d;
  for (int64_t i = 0; i < n; i++) f[i] = (float)h[i];
  CK(cudaMalloc((void **)&d, sizeof(float) * (size_t)(n ? n : 1)));
  CK(cudaMemcpy(d, f, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice));
  free(f);
  return d;
}

static void gpu_case(const char *cs) {
  golden_t g;
  golden_load(cs, &g);
  const net_layout_t *L = &g.L;
  const int B = g.c.batch, S = g.c.state_dim, K = L->K;
  const int64_t P = L->n_params, N = L->n_noise;
  cuda_dqn_ws_t gw;
  ck_assert_int_eq(cuda_dqn_ws_alloc(&gw, L, B, 0, 2), 0);
  ck_assert_msg(gw.fused.ok, "%s: the phases refused these shapes", cs);
  cuda_fused_t *f = &gw.fused;
  float *don = to_device(g.on, P), *dtg = to_device(g.tg, P), *dgrad, *dprior = NULL, *dmask = NULL;
  CK(cudaMalloc((void **)&dgrad, sizeof(float) * (size_t)P));
  CK(cudaMemset(dgrad, 0xff, sizeof(float) * (size_t)P)); /* NaN: every gradient must be written */
  /* the ensemble's fields, as learner_cuda.cu sets them, with the case's masks */
  f->ens = f->K > 1 || g.c.ensemble_mask_p < 1;
  f->beta = g.c.ensemble_prior_scale, f->lambda = g.c.hp.ensemble_diversity, f->lambda_dev = NULL;
  f->mask_p = g.c.ensemble_mask_p, f->mask_seed = g.c.seed;
  if (g.prior) f->prior = dprior = to_device(g.prior, L->n_prior);
  if (g.masks) f->mask_in = dmask = to_device(g.masks, (int64_t)B * K);
  /* the batch */
  float *x = malloc(sizeof(float) * 2 * (size_t)B * S), *r = malloc(sizeof(float) * (size_t)B);
  float *dn = malloc(sizeof(float) * (size_t)B), *w = malloc(sizeof(float) * (size_t)B);
  int32_t *a = malloc(sizeof(int32_t) * (size_t)B);
  for (int i = 0; i < B * S; i++) x[i] = (float)g.s[i], x[B * S + i] = (float)g.s2[i];
  for (int i = 0; i < B; i++) a[i] = (int32_t)g.a[i], r[i] = (float)g.r[i], dn[i] = (float)g.d[i], w[i] = (float)g.w[i];
  CK(cudaMemcpy(gw.x, x, sizeof(float) * 2 * (size_t)B * S, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(gw.a, a, sizeof(int32_t) * (size_t)B, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(gw.r, r, sizeof(float) * (size_t)B, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(gw.done, dn, sizeof(float) * (size_t)B, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(gw.w, w, sizeof(float) * (size_t)B, cudaMemcpyHostToDevice));
  if (N) { /* the raw eps through the learner's own f(x) = sign(x) sqrt|x| */
    float *fo = malloc(sizeof(float) * (size_t)N), *ft = malloc(sizeof(float) * (size_t)N);
    for (int64_t i = 0; i < N; i++) fo[i] = (float)g.eps_on[i], ft[i] = (float)g.eps_tg[i];
    noisy_transform_f32(fo, N);
    noisy_transform_f32(ft, N);
    CK(cudaMemcpy(gw.fn_on, fo, sizeof(float) * (size_t)N, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(gw.fn_tg, ft, sizeof(float) * (size_t)N, cudaMemcpyHostToDevice));
    free(fo), free(ft);
  }
  cuda_dqn_hp_t ghp = {g.c.hp.gamma, g.c.v_min, g.c.v_max, g.c.leaky_slope, g.c.double_dqn, NULL, NULL};
  ck_assert_int_eq(cuda_dqn_loss_grad(L, &ghp, don, dtg, g.c.noisy, &gw, dgrad, 0), 0);
  CK(cudaDeviceSynchronize());
  float loss, *li = malloc(sizeof(float) * (size_t)B), *gg = malloc(sizeof(float) * (size_t)P);
  CK(cudaMemcpy(&loss, gw.loss, sizeof(float), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(li, gw.loss_i, sizeof(float) * (size_t)B, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(gg, dgrad, sizeof(float) * (size_t)P, cudaMemcpyDeviceToHost));
  double *ref = golden_load64(cs, "out.loss", 1);
  double e_loss = fabs(loss - ref[0]) / fabs(ref[0]);
  ck_assert_msg(e_loss <= 1e-5, "%s: GPU loss %.10g vs autograd %.10g", cs, (double)loss, ref[0]);
  free(ref);
  double *lps = golden_load64(cs, "out.loss_per_sample", B), *mine = malloc(sizeof(double) * (size_t)(P > B ? P : B));
  for (int i = 0; i < B; i++) mine[i] = li[i];
  int64_t worst = 0;
  double e_lps = tu_rel_err(mine, lps, B, &worst);
  ck_assert_msg(e_lps <= 1e-5, "%s: per-sample loss rel err %.3g (sample %lld)", cs, e_lps, (long long)worst);
  free(lps);
  /* every gradient tensor by its registry name */
  model_t *M = golden_registry(&g.c);
  double e_g = 0, e_kb = 0;
  char g_worst[96] = "";
  int checked = 0;
  for (int pi = 0; pi < M->n; pi++) {
    const model_param_t *mp = &M->p[pi];
    if (mp->vec != MODEL_VEC_NET) continue;
    char nm[96];
    snprintf(nm, sizeof nm, "grad.%s", mp->name);
    int64_t cnt = model_param_count(mp), off = mp->offset;
    double *gr = golden_load64(cs, nm, cnt);
    for (int64_t k = 0; k < cnt; k++) {
      ck_assert_msg(isfinite(gg[off + k]), "%s: %s[%lld] not written", cs, nm, (long long)k);
      mine[k] = gg[off + k];
    }
    if (!strcmp(mp->name, "attn.k.bias")) {
      for (int64_t k = 0; k < cnt; k++) e_kb = fmax(e_kb, fabs(mine[k] - gr[k]));
      ck_assert_msg(e_kb <= 1e-6, "%s: %s abs err %.3g", cs, nm, e_kb);
    } else {
      double e = tu_rel_err(mine, gr, cnt, &worst);
      ck_assert_msg(e <= 1e-4, "%s: %s rel err %.3g (worst %lld: %.6g vs %.6g)", cs, nm, e, (long long)worst,
                    mine[worst], gr[worst]);
      if (e >= e_g) e_g = e, snprintf(g_worst, sizeof g_worst, "%s", mp->name);
    }
    checked++;
    free(gr);
  }
  printf("%s (GPU phases, K %d, attention %s, priors %s): rel err loss %.2g, per-sample %.2g, worst of %d gradient "
         "tensors %.2g (%s)%s\n",
         cs, K, L->attn.T ? "on" : "off", g.prior ? "on" : "off", e_loss, e_lps, checked, e_g, g_worst,
         L->attn.T ? "" : "");
  if (L->attn.T) printf("%s: attn.k.bias abs err %.2g\n", cs, e_kb);
  cuda_dqn_ws_free(&gw);
  cudaFree(don), cudaFree(dtg), cudaFree(dgrad), cudaFree(dprior), cudaFree(dmask);
  free(x), free(r), free(dn), free(w), free(a), free(li), free(gg), free(mine);
  golden_free(&g);
}

/* the plain network, then attention, the ensemble, and everything together */
START_TEST(test_gpu_golden_small) { gpu_case("small"); }
END_TEST
START_TEST(test_gpu_golden_noisy) { gpu_case("noisy"); }
END_TEST
START_TEST(test_gpu_golden_attn) { gpu_case("attn"); }
END_TEST
START_TEST(test_gpu_golden_ens) { gpu_case("ens"); }
END_TEST
START_TEST(test_gpu_golden_all) { gpu_case("all"); }
END_TEST

int main(void) {
  tu_gpu_or_skip();
  snprintf(golden_dir, sizeof golden_dir, "%s", tu_golden_dir());
  Suite *s = suite_create("gpu-golden");
  TCase *tc = tcase_create("pytorch-autograd");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_gpu_golden_small);
  tcase_add_test(tc, test_gpu_golden_noisy);
  tcase_add_test(tc, test_gpu_golden_attn);
  tcase_add_test(tc, test_gpu_golden_ens);
  tcase_add_test(tc, test_gpu_golden_all);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
