/*
 * test-gpu-forward.c — the CUDA network forward (cuda_net_forward,
 * kernels/cuda/generic_forward.cu) against the CPU reference (net_forward_f32)
 * on fresh random inputs: per branch, the log-probabilities within 1e-5
 * relative (||gpu - cpu|| / ||cpu||), and the Q values within 1e-5 relative
 * of c51_q_values_f32 on the CPU's log-probabilities; every log-probability
 * finite (the outputs poisoned with NaN first); and a second GPU run, on
 * outputs poisoned again, bit-identical to the first (log-probabilities and
 * Q values). NoisyNet: the device composes the effective weights from
 * random sigmas and noise (cuda_effective_weights) and the forward on them
 * is held to the same checks against the CPU forward on net_weights_f32's;
 * the composed weights are not compared directly. Shapes: the `ref` config
 * at batch 256 and 1000, and odd ones (batch 37, branches 4,7, 21 atoms,
 * state_dim 13; batch 5 with one branch of 2); NoisyNet on the ref config at
 * batch 256 and on the batch-37 shape. Exits 77 (skipped) with no usable GPU.
 */
#include <check.h>
#include <cuda_runtime.h>
#include <string.h>

#include "dqn_math.h"
#include "generic_loss.cuh"
#include "generic_forward.cuh"
#include "gpu_testutil.h"
#include "testutil.h"


#define CK(x)                                                                                               \
  do {                                                                                                      \
    cudaError_t e_ = (x);                                                                                   \
    ck_assert_msg(e_ == cudaSuccess, "%s: %s", #x, cudaGetErrorString(e_));                                 \
  } while (0)

static void run_n(const char *what, int S, int H1, int H2, int VH, int AH, int Z, int nb, const int *br, int B,
                  uint64_t seed, int noisy) {
  learner_config_t c;
  learner_config_default(&c);
  c.state_dim = S, c.trunk_h1 = H1, c.trunk_h2 = H2, c.value_hidden = VH, c.adv_hidden = AH, c.atoms = Z;
  c.n_branches = nb;
  for (int d = 0; d < nb; d++) c.branch_sizes[d] = br[d];
  c.batch = B;
  c.replay_capacity = B;
  c.noisy = noisy;
  net_layout_t L;
  net_layout_init(&L, &c);
  float *P = malloc(sizeof(float) * (size_t)L.n_params), *X = malloc(sizeof(float) * (size_t)B * S);
  float *weff = malloc(sizeof(float) * (size_t)L.n_params), *fn = malloc(sizeof(float) * (size_t)(L.n_noise + 1));
  int noisy_layers = 0;
  for (int li = 0; li < L.n_layers; li++) {
    const net_layer_t *l = &L.layer[li];
    float bd = 1.0f / sqrtf((float)l->in);
    tu_fill_uniform_f32(P + l->off_w, (int64_t)l->in * l->out, -bd, bd, seed, (uint64_t)(2 * li));
    tu_fill_uniform_f32(P + l->off_b, l->out, -bd, bd, seed, (uint64_t)(2 * li + 1));
    if (!l->noisy) continue;
    noisy_layers++;
    /* sigma around sigma0/sqrt(in), varied per element so a misplaced index shows */
    float s0 = 0.5f * bd;
    tu_fill_uniform_f32(P + l->off_sw, (int64_t)l->in * l->out, 0.5f * s0, 1.5f * s0, seed, (uint64_t)(100 + 2 * li));
    tu_fill_uniform_f32(P + l->off_sb, l->out, 0.5f * s0, 1.5f * s0, seed, (uint64_t)(101 + 2 * li));
  }
  ck_assert_int_eq(noisy_layers > 0, noisy);
  tu_fill_uniform_f32(X, (int64_t)B * S, -2, 2, seed, 1000);
  tu_fill_uniform_f32(fn, L.n_noise, -2, 2, seed, 2000); /* any values: f() is applied before either side */
  noisy_transform_f32(fn, L.n_noise);

  /* CPU reference */
  net_acts_f32_t ca;
  ck_assert_int_eq(net_acts_alloc_f32(&ca, &L, B), 0);
  net_weights_f32_t w;
  net_weights_f32(&L, P, noisy ? fn : NULL, weff, &w);
  net_forward_f32(&L, &w, X, B, c.leaky_slope, &ca);
  float sup[LEARNER_MAX_ATOMS];
  for (int z = 0; z < Z; z++) sup[z] = c.v_min + (c.v_max - c.v_min) * z / (Z - 1);

  /* GPU */
  float *dP, *dX, *dW = NULL, *dF = NULL;
  CK(cudaMalloc((void **)&dP, sizeof(float) * (size_t)L.n_params));
  CK(cudaMalloc((void **)&dX, sizeof(float) * (size_t)B * S));
  CK(cudaMemcpy(dP, P, sizeof(float) * (size_t)L.n_params, cudaMemcpyHostToDevice));
  if (noisy) { /* the device composes the effective weights from the same noise */
    CK(cudaMalloc((void **)&dW, sizeof(float) * (size_t)L.n_params));
    CK(cudaMalloc((void **)&dF, sizeof(float) * (size_t)L.n_noise));
    CK(cudaMemcpy(dF, fn, sizeof(float) * (size_t)L.n_noise, cudaMemcpyHostToDevice));
    ck_assert_int_eq(cuda_effective_weights(&L, dP, dF, dW, 0), 0);
    CK(cudaDeviceSynchronize());
  }
  const float *dWeights = noisy ? dW : dP;
  CK(cudaMemcpy(dX, X, sizeof(float) * (size_t)B * S, cudaMemcpyHostToDevice));
  cuda_acts_t ga;
  ck_assert_int_eq(cuda_acts_alloc(&ga, &L, B), 0);
  size_t total = 0;
  {
    size_t r = (size_t)B;
    total = r * (2 * L.H1 + 2 * L.H2 + 2 * L.VH + L.Z) + r * (size_t)L.D * 2 * L.AH + r * (size_t)L.a_width * 2 +
            r * (size_t)L.q_width;
  }
  CK(cudaMemset(ga.mem, 0xff, total * sizeof(float))); /* NaN everywhere: unwritten outputs show */
  ck_assert_int_eq(cuda_net_forward(&L, dWeights, dX, B, c.leaky_slope, c.v_min, c.v_max, &ga, 0), 0);
  CK(cudaDeviceSynchronize());
  float *q = malloc(sizeof(float) * (size_t)B * L.q_width), *q2 = malloc(sizeof(float) * (size_t)B * L.q_width);
  CK(cudaMemcpy(q, ga.q, sizeof(float) * (size_t)B * L.q_width, cudaMemcpyDeviceToHost));
  int qoff = 0;
  float *lps[LEARNER_MAX_BRANCHES];
  for (int d = 0; d < nb; d++) {
    int nz = br[d] * Z;
    size_t cnt = (size_t)B * nz;
    float *lp = lps[d] = malloc(sizeof(float) * cnt);
    CK(cudaMemcpy(lp, ga.logp[d], sizeof(float) * cnt, cudaMemcpyDeviceToHost));
    double *g = malloc(sizeof(double) * cnt), *r = malloc(sizeof(double) * cnt);
    for (size_t i = 0; i < cnt; i++) {
      ck_assert_msg(isfinite(lp[i]), "%s: logp[%d][%zu] not written", what, d, i);
      g[i] = lp[i];
      r[i] = ca.logp[d][i];
    }
    int64_t worst;
    double e = tu_rel_err(g, r, (int64_t)cnt, &worst);
    ck_assert_msg(e <= 1e-5, "%s: branch %d logp rel err %.3g (worst %lld: %.8g vs %.8g)", what, d, e,
                  (long long)worst, g[worst], r[worst]);
    /* Q values */
    double *gq = malloc(sizeof(double) * (size_t)B * br[d]), *rq = malloc(sizeof(double) * (size_t)B * br[d]);
    float qr[4096];
    for (int i = 0; i < B; i++) {
      c51_q_values_f32(ca.logp[d] + (size_t)i * nz, br[d], Z, sup, qr);
      for (int a = 0; a < br[d]; a++) {
        gq[i * br[d] + a] = q[(size_t)i * L.q_width + qoff + a];
        rq[i * br[d] + a] = qr[a];
      }
    }
    e = tu_rel_err(gq, rq, (int64_t)B * br[d], &worst);
    ck_assert_msg(e <= 1e-5, "%s: branch %d Q rel err %.3g", what, d, e);
    qoff += br[d];
    free(g), free(r), free(gq), free(rq);
  }
  /* a second run (on poisoned outputs) gives the same bits, log-probabilities and Q */
  CK(cudaMemset(ga.mem, 0xff, total * sizeof(float)));
  ck_assert_int_eq(cuda_net_forward(&L, dWeights, dX, B, c.leaky_slope, c.v_min, c.v_max, &ga, 0), 0);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(q2, ga.q, sizeof(float) * (size_t)B * L.q_width, cudaMemcpyDeviceToHost));
  ck_assert_msg(memcmp(q, q2, sizeof(float) * (size_t)B * L.q_width) == 0, "%s: rerun Q not bit-identical", what);
  for (int d = 0; d < nb; d++) {
    size_t cnt = (size_t)B * br[d] * Z;
    float *lp2 = malloc(sizeof(float) * cnt);
    CK(cudaMemcpy(lp2, ga.logp[d], sizeof(float) * cnt, cudaMemcpyDeviceToHost));
    ck_assert_msg(memcmp(lps[d], lp2, sizeof(float) * cnt) == 0, "%s: rerun logp of branch %d not bit-identical", what,
                  d);
    free(lp2), free(lps[d]);
  }
  printf("%s%s: ok\n", what, noisy ? " (NoisyNet)" : "");
  cuda_acts_free(&ga);
  cudaFree(dP), cudaFree(dX), cudaFree(dW), cudaFree(dF);
  net_acts_free_f32(&ca);
  free(P), free(X), free(q), free(q2), free(weff), free(fn);
}

static void run(const char *what, int S, int H1, int H2, int VH, int AH, int Z, int nb, const int *br, int B,
                uint64_t seed) {
  run_n(what, S, H1, H2, VH, AH, Z, nb, br, B, seed, 0);
}

START_TEST(test_ref_256) { run("ref B=256", 64, 256, 256, 128, 128, 51, 3, (int[]){9, 3, 3}, 256, 1); }
END_TEST
START_TEST(test_ref_1000) { run("ref B=1000", 64, 256, 256, 128, 128, 51, 3, (int[]){9, 3, 3}, 1000, 2); }
END_TEST
START_TEST(test_odd) { run("odd B=37 br=4,7 Z=21 S=13", 13, 40, 24, 10, 18, 21, 2, (int[]){4, 7}, 37, 3); }
END_TEST
START_TEST(test_one_branch) { run("one branch B=5", 3, 8, 8, 4, 4, 5, 1, (int[]){2}, 5, 4); }
END_TEST
START_TEST(test_noisy_ref) { run_n("ref B=256", 64, 256, 256, 128, 128, 51, 3, (int[]){9, 3, 3}, 256, 5, 1); }
END_TEST
START_TEST(test_noisy_odd) { run_n("odd B=37 br=4,7 Z=21 S=13", 13, 40, 24, 10, 18, 21, 2, (int[]){4, 7}, 37, 6, 1); }
END_TEST

int main(void) {
  tu_gpu_or_skip();
  Suite *s = suite_create("gpu-forward");
  TCase *tc = tcase_create("parity");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_ref_256);
  tcase_add_test(tc, test_ref_1000);
  tcase_add_test(tc, test_odd);
  tcase_add_test(tc, test_one_branch);
  tcase_add_test(tc, test_noisy_ref);
  tcase_add_test(tc, test_noisy_odd);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
