/*
 * test-gpu-optim.c — the GPU optimiser kernels (kernels/cuda/optim.cu)
 * against kernels/cpu/optim.c on fresh random inputs: the global gradient
 * norm within 1e-6 relative, the clipped AdamW update (parameters and both
 * moments) within 1e-6 relative over several steps with clipping on and off
 * and weight decay, Polyak and periodic hard target updates, and the step's
 * fused norm + AdamW + target launch pair. Exits 77 with
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

#define ALONE ((cuda_pz_t){1, 0}) /* one learner (pz.cuh) */

/* The step's fused launch pair (cuda_norm_adamw_target: the norm's final
 * sum inside the AdamW + Polyak launch) against the CPU (norm, clip, AdamW,
 * target within 1e-6) and bit for bit against the separate launches
 * (cuda_grad_norm then cuda_adamw_target) on a second copy of the state;
 * tau 0: hard copies every `period` steps. The target's stale word (pack.cu)
 * set to whether the step changed the target. */
static void fused_case(float clip, float tau, int period, uint64_t seed) {
  const long long n = 70001;
  const size_t bytes = sizeof(float) * (size_t)n;
  float *h[8]; /* p, g, m, v, tg on the CPU; then three read-backs */
  for (int i = 0; i < 8; i++) h[i] = calloc(1, bytes);
  float *p = h[0], *g = h[1], *m = h[2], *v = h[3], *tg = h[4];
  tu_fill_uniform_f32(p, n, -1, 1, seed, 1);
  tu_fill_uniform_f32(tg, n, -1, 1, seed, 2);
  learner_config_t c;
  learner_config_default(&c);
  learner_hparams_t hp = c.hp;
  hp.lr = 3e-3f, hp.grad_clip = clip, hp.weight_decay = 0.01f, hp.tau = tau, hp.target_period = period;
  /* k = 0: norm + AdamW in two launches; 1: the separate launches; 2: the norm
   * as two cuda_norm_partial launches on two streams (the layer-GEMM step's
   * split), then AdamW */
  float *d[3][5], *dnorm[3];
  double *dscratch, *dscratch2;
  cudaStream_t s1;
  cudaEvent_t ev;
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  const long long n0 = n / 7; /* part 1: [0, n0), part 0: [n0, n) */
  unsigned long long *dstep;
  learner_hparams_t *dhp;
  int *dstale;
  CK(cudaMalloc((void **)&dstale, sizeof(int)));
  for (int k = 0; k < 3; k++) {
    for (int i = 0; i < 5; i++) CK(cudaMalloc((void **)&d[k][i], bytes));
    CK(cudaMemcpy(d[k][0], p, bytes, cudaMemcpyHostToDevice));
    CK(cudaMemset(d[k][2], 0, bytes));
    CK(cudaMemset(d[k][3], 0, bytes));
    CK(cudaMemcpy(d[k][4], tg, bytes, cudaMemcpyHostToDevice));
    CK(cudaMalloc((void **)&dnorm[k], 4));
  }
  CK(cudaMalloc((void **)&dscratch, CUDA_NORM_SCRATCH * 8));
  CK(cudaMemset(dscratch, 0, CUDA_NORM_SCRATCH * 8));
  CK(cudaMalloc((void **)&dscratch2, CUDA_NORM_SCRATCH * 8));
  CK(cudaMemset(dscratch2, 0, CUDA_NORM_SCRATCH * 8));
  CK(cudaMalloc((void **)&dstep, 8));
  CK(cudaMalloc((void **)&dhp, sizeof hp));
  CK(cudaMemcpy(dhp, &hp, sizeof hp, cudaMemcpyHostToDevice));
  for (unsigned long long t = 0; t < 4; t++) {
    tu_fill_uniform_f32(g, n, -0.05f, 0.05f, seed, 10 + t);
    for (int k = 0; k < 3; k++) CK(cudaMemcpy(d[k][1], g, bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dstep, &t, 8, cudaMemcpyHostToDevice));
    if (t % 2) ck_assert_int_eq(cuda_adam_prep(dscratch, dstep, dhp, 0), 0); /* both ways of the prep */
    const int junk = 7;
    CK(cudaMemcpy(dstale, &junk, sizeof junk, cudaMemcpyHostToDevice));
    ck_assert_int_eq(cuda_norm_adamw_target(d[0][0], d[0][1], d[0][2], d[0][3], d[0][4], n, dnorm[0], dscratch, dstep,
                                            dhp, (int)(t % 2), NULL, NULL, dstale, ALONE, 0), 0);
    ck_assert_int_eq(cuda_grad_norm(d[1][1], n, dnorm[1], dscratch, 0), 0);
    ck_assert_int_eq(cuda_adamw_target(d[1][0], d[1][1], d[1][2], d[1][3], d[1][4], n, dnorm[1], dstep, dhp, 0), 0);
    ck_assert_int_eq(cuda_adam_prep(dscratch2, dstep, dhp, 0), 0);
    CK(cudaEventRecord(ev, 0));
    CK(cudaStreamWaitEvent(s1, ev, 0));
    ck_assert_int_eq(cuda_norm_partial(d[2][1] + n0, n - n0, dscratch2, 0, 120, dnorm[2], dstep, dhp, NULL, ALONE, s1), 0);
    ck_assert_int_eq(cuda_norm_partial(d[2][1], n0, dscratch2, 120, 8, dnorm[2], dstep, dhp, NULL, ALONE, 0), 0);
    CK(cudaEventRecord(ev, s1));
    CK(cudaStreamWaitEvent(0, ev, 0));
    ck_assert_int_eq(cuda_norm_adamw_target(d[2][0], d[2][1], d[2][2], d[2][3], d[2][4], n, dnorm[2], dscratch2,
                                            dstep, dhp, 2, NULL, NULL, NULL, ALONE, 0), 0);
    /* slots outside CUDA_NORM_PARTS are refused */
    ck_assert_int_ne(cuda_norm_partial(d[2][1], n0, dscratch2, 120, 9, dnorm[2], dstep, dhp, NULL, ALONE, 0), 0);
    CK(cudaDeviceSynchronize());
    const double norm = grad_norm(g, n);
    float gn[3];
    for (int k = 0; k < 3; k++) CK(cudaMemcpy(&gn[k], dnorm[k], 4, cudaMemcpyDeviceToHost));
    ck_assert_msg(fabs(gn[0] - norm) <= 1e-6 * norm, "step %llu: norm %.9g vs CPU %.9g", t, gn[0], norm);
    ck_assert_msg(fabs(gn[2] - norm) <= 1e-6 * norm, "step %llu: split norm %.9g vs CPU %.9g", t, gn[2], norm);
    ck_assert_msg(gn[0] == gn[1], "step %llu: fused norm %.9g vs two launches %.9g", t, gn[0], gn[1]);
    adamw_update(p, g, m, v, n, grad_clip_scale(gn[0], clip), hp.lr, hp.adam_beta1, hp.adam_beta2, hp.adam_eps,
                 hp.weight_decay, t + 1);
    const int copied = tau > 0 || (period > 0 && (t + 1) % (unsigned long long)period == 0);
    if (tau > 0) target_update(tg, p, n, tau);
    else if (copied) memcpy(tg, p, bytes);
    int stale;
    CK(cudaMemcpy(&stale, dstale, sizeof stale, cudaMemcpyDeviceToHost));
    ck_assert_msg(stale == copied, "step %llu: the target's stale word %d, the target %s", t, stale,
                  copied ? "changed" : "did not change");
  }
  const char *what[5] = {"params", "grad", "m", "v", "target"};
  for (int i = 0; i < 5; i++) {
    if (i == 1) continue;
    CK(cudaMemcpy(h[5], d[0][i], bytes, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h[6], d[1][i], bytes, cudaMemcpyDeviceToHost));
    const double e = rel(h[5], h[i], n);
    printf("fused norm + AdamW + target (tau %g, period %d), clip %g: %s %.2e relative to the CPU\n", tau, period, clip,
           what[i], e);
    ck_assert_msg(e <= 1e-6, "%s rel err %.3g", what[i], e);
    ck_assert_msg(memcmp(h[5], h[6], bytes) == 0, "%s: fused and separate launches differ", what[i]);
    CK(cudaMemcpy(h[7], d[2][i], bytes, cudaMemcpyDeviceToHost));
    const double e2 = rel(h[7], h[i], n);
    printf("  the norm split over two streams: %s %.2e relative to the CPU\n", what[i], e2);
    ck_assert_msg(e2 <= 1e-6, "split norm: %s rel err %.3g", what[i], e2);
  }
  cudaStreamDestroy(s1), cudaEventDestroy(ev), cudaFree(dscratch2);
  for (int k = 0; k < 3; k++) {
    for (int i = 0; i < 5; i++) cudaFree(d[k][i]);
    cudaFree(dnorm[k]);
  }
  cudaFree(dscratch), cudaFree(dstep), cudaFree(dhp), cudaFree(dstale);
  for (int i = 0; i < 8; i++) free(h[i]);
}

START_TEST(test_norm_adamw_target) {
  fused_case(0.5f, 0.01f, 0, 3); /* clipping on */
  fused_case(0.0f, 0.005f, 0, 4);
  fused_case(0.5f, 0.0f, 2, 5); /* hard copies at steps 1 and 3 */
}
END_TEST

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
  tcase_add_test(tc, test_norm_adamw_target);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
