/*
 * test-gpu-dt-adamw.c — the Decision Transformer's step end on CUDA
 * (kernels/cuda/dt_train.cu: dt_norm_partial_kernel, dt_adamw_kernel, run by
 * cuda_dt_train_apply) against the CPU spec's (kernels/cpu/dt_train.c:
 * grad_norm, dt_lr_at, grad_clip_scale, adamw_update) on the same
 * gradients: the norm within 1e-6 relative; the warm-up's lr, the clip's
 * scale (taken from the CUDA norm), the step size, sqrt(1 - beta2^t) and
 * the decay equal; then p, m and v bit for bit over several steps, since
 * both backends update each element in the same order with no fused
 * multiply-adds (adam_scalars.cuh's adamw_element). A small layout (a
 * partial last block) and one of over 2,097,152 parameters (the kernel's
 * grid of 2,048 blocks takes that many a pass, so two passes); the warm-up,
 * weight decay, the clip on and off; an lr and weight decay whose decay a
 * fused multiply-add would round differently. A step with no window drawn,
 * and one after the call halted, change nothing and are not counted. Exits
 * 77 with no usable GPU.
 */
#include <check.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dt.h"
#include "dt_train_cuda.cuh"
#include "learner.h"
#include "model.h"
#include "optim.h"
#include "dt_gpu_testutil.h"
#include "gpu_testutil.h"
#include "testutil.h"

/* the elements where a and b differ in bits */
static long long differing(const float *a, const float *b, long long n) {
  long long c = 0;
  for (long long i = 0; i < n; i++) c += memcmp(a + i, b + i, sizeof(float)) != 0;
  return c;
}

/* steps of the step end on layers x embed (at least min_params parameters),
 * the gradient uniform in [-gmax, gmax], clip dt_clip, lr, weight decay wd,
 * warm-up */
static void apply_case(int layers, int embed, long long min_params, float gmax, float clip, float lr0, float wd,
                       int64_t warmup, uint64_t seed) {
  static model_t reg;
  dt_layout_t L;
  const int n[2] = {3, 4}, B = 4, steps = 4;
  dtu_build(&reg, &L, 6, 2, n, layers, embed, 50, 4, 2);
  const long long P = L.n_params;
  ck_assert_msg(P >= min_params, "%lld parameters, fewer than the case needs (%lld)", P, min_params);
  cuda_dt_train_t t;
  ck_assert_int_eq(cuda_dt_train_alloc(&t, &L, B), 0);
  learner_config_t c;
  learner_config_default(&c);
  learner_hparams_t hp = c.hp;
  hp.dt_lr = lr0, hp.dt_warmup = warmup, hp.dt_weight_decay = wd, hp.dt_clip = clip;
  const dt_hparams_t dh = {hp.dt_lr, hp.dt_weight_decay, hp.dt_clip, hp.adam_beta1, hp.adam_beta2, hp.adam_eps,
                           1.0f, hp.dt_warmup};
  learner_hparams_t *dhp;
  CK(cudaMalloc((void **)&dhp, sizeof hp));
  CK(cudaMemcpy(dhp, &hp, sizeof hp, cudaMemcpyHostToDevice));
  const size_t bytes = sizeof(float) * (size_t)P;
  float *p = malloc(bytes), *g = malloc(bytes), *m = calloc(1, bytes), *v = calloc(1, bytes), *back = malloc(bytes);
  ck_assert(p && g && m && v && back);
  tu_fill_uniform_f32(p, P, -1, 1, seed, 1);
  CK(cudaMemcpy(t.dt.p, p, bytes, cudaMemcpyHostToDevice));
  ck_assert_int_eq(cuda_dt_call_begin(&t, 0), 0);
  const float one = 1.0f, loss = 1.5f;
  for (int s = 0; s < steps; s++) {
    tu_fill_uniform_f32(g, P, -gmax, gmax, seed, 10 + (uint64_t)s);
    CK(cudaMemcpy(t.dt.g, g, bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(t.dt.sums, &loss, sizeof loss, cudaMemcpyHostToDevice));          /* a finite loss */
    CK(cudaMemcpy(t.sums + DT_SUM_ROWS_ANY + s % B, &one, sizeof one, cudaMemcpyHostToDevice)); /* a window */
    ck_assert_int_eq(cuda_dt_train_apply(&t, dhp, 0), 0);
    CK(cudaDeviceSynchronize());
    float sc[DT_SUM_ROWS_ANY];
    CK(cudaMemcpy(sc, t.sums, sizeof sc, cudaMemcpyDeviceToHost));
    const double norm = grad_norm(g, P);
    const float lr = dt_lr_at(&dh, (uint64_t)s), scale = grad_clip_scale(sc[DT_SUM_NORM], clip);
    printf("%d layers of %d (%lld parameters), clip %g, step %d: norm %.9g (CPU %.9g), lr %g, scale %g\n", layers,
           embed, P, (double)clip, s + 1, (double)sc[DT_SUM_NORM], norm, (double)lr, (double)scale);
    ck_assert_msg(sc[DT_SUM_APPLY] == 1, "step %d did not apply (why %g)", s + 1, (double)sc[DT_SUM_WHY]);
    ck_assert_msg(fabs(sc[DT_SUM_NORM] - norm) <= 1e-6 * norm, "step %d: norm %.9g, the CPU's %.9g", s + 1,
                  (double)sc[DT_SUM_NORM], norm);
    ck_assert_msg(sc[DT_SUM_LR] == lr, "step %d: lr %.9g, the CPU's %.9g", s + 1, (double)sc[DT_SUM_LR], (double)lr);
    ck_assert_msg(sc[DT_SUM_SCALE] == scale, "step %d: scale %.9g, the CPU's %.9g", s + 1, (double)sc[DT_SUM_SCALE],
                  (double)scale);
    ck_assert_msg(clip == 0 || scale < 1, "step %d: the clip was meant to act (norm %g)", s + 1, norm);
    /* the step's scalars as kernels/cpu/optim.c's adamw_update takes them */
    const uint64_t t1 = (uint64_t)s + 1;
    const float bc1 = (float)(1.0 - pow(hp.adam_beta1, (double)t1));
    const float wsc[3] = {lr / bc1, (float)sqrt(1.0 - pow(hp.adam_beta2, (double)t1)), 1.0f - lr * wd};
    const int at[3] = {DT_SUM_STEP_SIZE, DT_SUM_BC2_SQRT, DT_SUM_DECAY};
    const char *name[3] = {"step size", "sqrt(1 - beta2^t)", "decay"};
    for (int k = 0; k < 3; k++)
      ck_assert_msg(sc[at[k]] == wsc[k], "step %d: %s %.9g, the CPU's %.9g", s + 1, name[k], (double)sc[at[k]],
                    (double)wsc[k]);
    adamw_update(p, g, m, v, P, scale, lr, hp.adam_beta1, hp.adam_beta2, hp.adam_eps, hp.dt_weight_decay,
                 (uint64_t)s + 1);
  }
  const float *want[3] = {p, m, v};
  float *got[3] = {t.dt.p, t.m, t.v};
  const char *what[3] = {"p", "m", "v"};
  for (int k = 0; k < 3; k++) {
    CK(cudaMemcpy(back, got[k], bytes, cudaMemcpyDeviceToHost));
    const long long d = differing(back, want[k], P);
    printf("  after %d steps, %s: %lld of %lld elements differ from the CPU's\n", steps, what[k], d, P);
    ck_assert_msg(d == 0, "%s: %lld of %lld elements differ from the CPU's", what[k], d, P);
  }
  unsigned long long ctr;
  CK(cudaMemcpy(&ctr, t.ctr, sizeof ctr, cudaMemcpyDeviceToHost));
  ck_assert_int_eq((int)ctr, steps);
  /* no window drawn: nothing applies, the step is not counted, the call halts */
  tu_fill_uniform_f32(g, P, -gmax, gmax, seed, 99);
  CK(cudaMemcpy(t.dt.g, g, bytes, cudaMemcpyHostToDevice));
  ck_assert_int_eq(cuda_dt_train_apply(&t, dhp, 0), 0);
  CK(cudaDeviceSynchronize());
  float sc[DT_SUM_ROWS_ANY];
  CK(cudaMemcpy(sc, t.sums, sizeof sc, cudaMemcpyDeviceToHost));
  ck_assert_msg(sc[DT_SUM_APPLY] == 0 && sc[DT_SUM_HALT] == 1 && sc[DT_SUM_WHY] == 1,
                "no window: apply %g, halt %g, why %g", (double)sc[DT_SUM_APPLY], (double)sc[DT_SUM_HALT],
                (double)sc[DT_SUM_WHY]);
  for (int k = 0; k < 3; k++) {
    CK(cudaMemcpy(back, got[k], bytes, cudaMemcpyDeviceToHost));
    ck_assert_msg(differing(back, want[k], P) == 0, "a step with no window changed %s", what[k]);
  }
  CK(cudaMemcpy(&ctr, t.ctr, sizeof ctr, cudaMemcpyDeviceToHost));
  ck_assert_int_eq((int)ctr, steps);
  /* a window drawn, but the call has halted: nothing applies until the next call */
  CK(cudaMemcpy(t.sums + DT_SUM_ROWS_ANY, &one, sizeof one, cudaMemcpyHostToDevice));
  ck_assert_int_eq(cuda_dt_train_apply(&t, dhp, 0), 0);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(sc, t.sums, sizeof sc, cudaMemcpyDeviceToHost));
  ck_assert_msg(sc[DT_SUM_APPLY] == 0 && sc[DT_SUM_HALT] == 1 && sc[DT_SUM_WHY] == 1,
                "halted: apply %g, halt %g, why %g", (double)sc[DT_SUM_APPLY], (double)sc[DT_SUM_HALT],
                (double)sc[DT_SUM_WHY]);
  CK(cudaMemcpy(back, t.dt.p, bytes, cudaMemcpyDeviceToHost));
  ck_assert_msg(differing(back, p, P) == 0, "a step after the call halted changed the parameters");
  CK(cudaMemcpy(&ctr, t.ctr, sizeof ctr, cudaMemcpyDeviceToHost));
  ck_assert_int_eq((int)ctr, steps);
  cudaFree(dhp);
  cuda_dt_train_free(&t);
  free(p), free(g), free(m), free(v), free(back);
}

START_TEST(test_small_clip) { apply_case(1, 16, 0, 1.0f, 0.25f, 1e-3f, 0.01f, 3, 1); }
END_TEST
START_TEST(test_small_noclip) { apply_case(1, 16, 0, 1.0f, 0.0f, 1e-3f, 0.01f, 3, 2); }
END_TEST
START_TEST(test_two_passes) { apply_case(4, 256, 2097153, 0.05f, 0.25f, 1e-3f, 0.01f, 3, 3); }
END_TEST
/* an lr and weight decay whose decay 1 - lr wd rounds differently when the
 * product is fused into the subtraction (one FMA) than when it is rounded
 * first, as the CPU does: a contracted decay fails here */
START_TEST(test_decay_unfused) {
  const float lr = 0.00085945718f, wd = 0.04379547f;
  ck_assert_msg(fmaf(-lr, wd, 1.0f) != 1.0f - lr * wd, "this lr and weight decay no longer tell the two apart");
  apply_case(1, 16, 0, 1.0f, 0.25f, lr, wd, 0, 4);
}
END_TEST

int main(void) {
  tu_gpu_or_skip();
  Suite *s = suite_create("gpu-dt-adamw");
  TCase *tc = tcase_create("cpu-bits");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_small_clip);
  tcase_add_test(tc, test_small_noclip);
  tcase_add_test(tc, test_two_passes);
  tcase_add_test(tc, test_decay_unfused);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
