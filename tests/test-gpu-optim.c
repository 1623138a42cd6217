/*
 * test-gpu-optim.c — the GPU optimiser kernels (kernels/cuda/optim.cu)
 * against kernels/cpu/optim.c on fresh random inputs: the global gradient
 * norm within 1e-6 relative, the clipped AdamW update (parameters and both
 * moments) within 1e-6 relative over several steps with clipping on and off
 * and weight decay, Polyak and periodic hard target updates. Exits 77 with
 * no usable GPU.
 */
#include <check.h>
#include <cuda_runtime.h>
#include <string.h>

#include "optim.cuh"
#include "optim.h"
#include "gpu_testutil.h"
#include "testutil.h"


#define CK(x)                                                                                               \
  do {                                                                                                      \
    cudaError_t e_ = (x);                                                                                   \
    ck_assert_msg(e_ == cudaSuccess, "%s: %s", #x, cudaGetErrorString(e_));                                 \
  } while (0)

static double rel(const float *a, const float *b, long long n) {
  double num = 0, den = 0;
  for (long long i = 0; i < n; i++) num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += (double)b[i] * b[i];
  return den ? sqrt(num / den) : sqrt(num);
}

static void adam_case(float clip, float wd, uint64_t seed) {
  const long long n = 100003;
  size_t bytes = sizeof(float) * (size_t)n;
  float *p = malloc(bytes), *g = malloc(bytes), *m = calloc(1, bytes), *v = calloc(1, bytes);
  float *gp = malloc(bytes), *gm = malloc(bytes), *gv = malloc(bytes);
  tu_fill_uniform_f32(p, n, -1, 1, seed, 1);
  learner_hparams_t hp;
  learner_config_t c;
  learner_config_default(&c);
  hp = c.hp;
  hp.lr = 3e-3f, hp.grad_clip = clip, hp.weight_decay = wd;
  float *dp, *dg, *dm, *dv, *dnorm;
  double *dscratch;
  unsigned long long *dstep;
  learner_hparams_t *dhp;
  CK(cudaMalloc((void **)&dp, bytes));
  CK(cudaMalloc((void **)&dg, bytes));
  CK(cudaMalloc((void **)&dm, bytes));
  CK(cudaMalloc((void **)&dv, bytes));
  CK(cudaMalloc((void **)&dnorm, 4));
  CK(cudaMalloc((void **)&dscratch, CUDA_NORM_SCRATCH * 8));
  CK(cudaMalloc((void **)&dstep, 8));
  CK(cudaMalloc((void **)&dhp, sizeof hp));
  CK(cudaMemcpy(dp, p, bytes, cudaMemcpyHostToDevice));
  CK(cudaMemset(dm, 0, bytes));
  CK(cudaMemset(dv, 0, bytes));
  CK(cudaMemcpy(dhp, &hp, sizeof hp, cudaMemcpyHostToDevice));
  for (unsigned long long t = 0; t < 5; t++) {
    tu_fill_uniform_f32(g, n, -0.05f, 0.05f, seed, 10 + t);
    CK(cudaMemcpy(dg, g, bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dstep, &t, 8, cudaMemcpyHostToDevice));
    double norm = grad_norm(g, n);
    ck_assert_int_eq(cuda_grad_norm(dg, n, dnorm, dscratch, 0), 0);
    float gnorm;
    CK(cudaMemcpy(&gnorm, dnorm, 4, cudaMemcpyDeviceToHost));
    ck_assert_msg(fabs(gnorm - norm) <= 1e-6 * norm, "norm %.9g vs %.9g", gnorm, norm);
    float fnorm = (float)norm; /* both sides clip by the same norm */
    CK(cudaMemcpy(dnorm, &fnorm, 4, cudaMemcpyHostToDevice));
    adamw_update(p, g, m, v, n, grad_clip_scale(fnorm, clip), hp.lr, hp.adam_beta1, hp.adam_beta2, hp.adam_eps, wd, t + 1);
    ck_assert_int_eq(cuda_adamw_update(dp, dg, dm, dv, n, dnorm, dstep, dhp, 0), 0);
    CK(cudaDeviceSynchronize());
  }
  CK(cudaMemcpy(gp, dp, bytes, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(gm, dm, bytes, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(gv, dv, bytes, cudaMemcpyDeviceToHost));
  double ep = rel(gp, p, n), em = rel(gm, m, n), ev = rel(gv, v, n);
  printf("AdamW clip %g wd %g: params %.2e, m %.2e, v %.2e (relative)\n", clip, wd, ep, em, ev);
  ck_assert_msg(ep <= 1e-6 && em <= 1e-6 && ev <= 1e-6, "AdamW rel err p %.3g m %.3g v %.3g", ep, em, ev);
  /* target updates */
  float *tg = malloc(bytes), *gt = malloc(bytes), *dtg;
  tu_fill_uniform_f32(tg, n, -1, 1, seed, 99);
  CK(cudaMalloc((void **)&dtg, bytes));
  CK(cudaMemcpy(dtg, tg, bytes, cudaMemcpyHostToDevice));
  target_update(tg, p, n, 0.01f);
  ck_assert_int_eq(cuda_target_update(dtg, dp, n, dstep, dhp, 0.01f, 0), 0);
  CK(cudaMemcpy(gt, dtg, bytes, cudaMemcpyDeviceToHost));
  ck_assert_msg(rel(gt, tg, n) <= 1e-6, "Polyak rel err %.3g", rel(gt, tg, n));
  hp.tau = 0, hp.target_period = 5; /* step 4 -> (4 + 1) % 5 == 0: a hard copy */
  CK(cudaMemcpy(dhp, &hp, sizeof hp, cudaMemcpyHostToDevice));
  ck_assert_int_eq(cuda_target_update(dtg, dp, n, dstep, dhp, 0.0f, 0), 0);
  CK(cudaMemcpy(gt, dtg, bytes, cudaMemcpyDeviceToHost));
  ck_assert_msg(memcmp(gt, gp, bytes) == 0, "the periodic hard copy did not copy");
  free(p), free(g), free(m), free(v), free(gp), free(gm), free(gv), free(tg), free(gt);
  cudaFree(dp), cudaFree(dg), cudaFree(dm), cudaFree(dv), cudaFree(dnorm), cudaFree(dstep), cudaFree(dhp), cudaFree(dtg), cudaFree(dscratch);
}

START_TEST(test_adamw_clip) { adam_case(0.5f, 0.0f, 1); }
END_TEST
START_TEST(test_adamw_noclip_decay) { adam_case(0.0f, 0.1f, 2); }
END_TEST

int main(void) {
  tu_gpu_or_skip();
  Suite *s = suite_create("gpu-optim");
  TCase *tc = tcase_create("parity");
  tcase_add_test(tc, test_adamw_clip);
  tcase_add_test(tc, test_adamw_noclip_decay);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
