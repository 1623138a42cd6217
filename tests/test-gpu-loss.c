/*
 * test-gpu-loss.c — the CUDA loss and backward against the CPU reference
 * dqn_loss_grad_f32 on fresh random inputs, NoisyNet on and off, Double DQN
 * on and off, done flags both ways, odd shapes. Three versions: the generic
 * kernels (kernels/cuda/generic_loss.cu), the step's phases
 * (kernels/cuda/step_phases.cuh) in fp32, and the phases in TF32
 * (tensor_cores); every case runs through the first two, all but the two
 * large-batch cases through TF32 (GPU_LOSS_VERSIONS picks fewer).
 * - fp32 (generic and phases): the batch loss within 1e-5 of the CPU's
 *   (relative), the per-sample losses within 1e-5 (||l - l*|| / ||l*||), the
 *   same Double-DQN actions, and every gradient block within 1e-4
 *   (||g - g*|| / ||g*||). Where a block misses 1e-4 (a nearly cancelling
 *   fp32 sum over thousands of rows), the oracle becomes the double instance
 *   of the CPU code: the GPU must be within 1e-4 of it, or within 2x of the
 *   fp32 CPU's error against it.
 * - TF32: losses within 1e-2, gradient blocks within 1e-1, at most 1% of the
 *   Double-DQN actions differing; no double fallback.
 * Every gradient element is written (the buffer is NaN first), and a second
 * GPU run gives the same gradient bit for bit. The phases must accept every
 * case's shapes (in TF32, with tensor cores), and their tiles are checked
 * where the shapes call for them: in fp32 on a device of at most 132 SMs,
 * every phase of the two large-batch cases on the 64 x 128 tiles; in TF32 in
 * a 90a build on an sm_90 device, F3 and F4 of the two wgmma cases on the
 * wgmma tiles. Exits 77 with no usable GPU.
 */
#include <check.h>
#include <cuda_runtime.h>
#include <string.h>

#include "generic_loss.cuh"
#include "dqnd_build_config.h"
#include "dqn_math.h"
#include "gpu_testutil.h"
#include "testutil.h"


#define CK(x)                                                                                               \
  do {                                                                                                      \
    cudaError_t e_ = (x);                                                                                   \
    ck_assert_msg(e_ == cudaSuccess, "%s: %s", #x, cudaGetErrorString(e_));                                 \
  } while (0)

typedef struct {
  const char *what;
  int S, H1, H2, VH, AH, Z, nb, br[4], B, noisy, double_dqn;
  int big; /* 1: large enough for the 64 x 128 tiles in every fp32 phase (versions 1 and 2 only) */
  int wg;  /* 1: in TF32 on an sm_90 device (a 90a build), F3 and F4 run gemm_wgmma.cu's tiles */
  int tailk; /* 1: the loss's own rows exceed its 48 KB: the tail kernel writes them (step_loss.cu) */
} gcase_t;

/* the gradient of the same inputs by the double instance of the CPU code */
static double *grad_f64(const net_layout_t *L, const dqn_hp_f32_t *hp, const float *on, const float *tg,
                        const float *fo, const float *ft, const dqn_ws_f32_t *cw, int B, int S) {
  int64_t P = L->n_params, N = L->n_noise ? L->n_noise : 1;
  double *on64 = malloc(sizeof(double) * (size_t)P), *tg64 = malloc(sizeof(double) * (size_t)P);
  double *g = malloc(sizeof(double) * (size_t)P), *fo64 = malloc(sizeof(double) * (size_t)N),
         *ft64 = malloc(sizeof(double) * (size_t)N);
  for (int64_t i = 0; i < P; i++) on64[i] = on[i], tg64[i] = tg[i];
  for (int64_t i = 0; fo && i < N; i++) fo64[i] = fo[i], ft64[i] = ft[i];
  dqn_ws_f64_t w;
  ck_assert_int_eq(dqn_ws_alloc_f64(&w, L, B), 0);
  for (int64_t i = 0; i < 2 * (int64_t)B * S; i++) w.x[i] = cw->x[i];
  for (int i = 0; i < B; i++) w.a[i] = cw->a[i], w.r[i] = cw->r[i], w.done[i] = cw->done[i], w.w[i] = cw->w[i];
  dqn_hp_f64_t h = {hp->gamma, hp->v_min, hp->v_max, hp->slope, hp->double_dqn, 0, 0, NULL};
  double qm;
  dqn_loss_grad_f64(L, &h, on64, tg64, fo ? fo64 : NULL, fo ? ft64 : NULL, &w, g, &qm);
  dqn_ws_free_f64(&w);
  free(on64), free(tg64), free(fo64), free(ft64);
  return g;
}

static void run(const gcase_t *k, uint64_t seed, int version) {
  learner_config_t c;
  learner_config_default(&c);
  c.state_dim = k->S, c.trunk_h1 = k->H1, c.trunk_h2 = k->H2, c.value_hidden = k->VH, c.adv_hidden = k->AH;
  c.atoms = k->Z, c.n_branches = k->nb, c.batch = k->B, c.replay_capacity = k->B, c.noisy = k->noisy;
  for (int d = 0; d < k->nb; d++) c.branch_sizes[d] = k->br[d];
  net_layout_t L;
  net_layout_init(&L, &c);
  int B = k->B, S = k->S, A = learner_config_joint_actions(&c);
  int64_t P = L.n_params, N = L.n_noise ? L.n_noise : 1;
  float *on = malloc(sizeof(float) * (size_t)P), *tg = malloc(sizeof(float) * (size_t)P);
  float *gc = malloc(sizeof(float) * (size_t)P), *gg = malloc(sizeof(float) * (size_t)P), *gg2 = malloc(sizeof(float) * (size_t)P);
  for (int li = 0; li < L.n_layers; li++) {
    const net_layer_t *l = &L.layer[li];
    float bd = 1.0f / sqrtf((float)l->in);
    int64_t nw = (int64_t)l->in * l->out;
    tu_fill_uniform_f32(on + l->off_w, nw, -bd, bd, seed, (uint64_t)(4 * li));
    tu_fill_uniform_f32(on + l->off_b, l->out, -bd, bd, seed, (uint64_t)(4 * li + 1));
    tu_fill_uniform_f32(tg + l->off_w, nw, -bd, bd, seed + 1, (uint64_t)(4 * li));
    tu_fill_uniform_f32(tg + l->off_b, l->out, -bd, bd, seed + 1, (uint64_t)(4 * li + 1));
    if (l->noisy) {
      tu_fill_uniform_f32(on + l->off_sw, nw, 0, bd, seed, (uint64_t)(4 * li + 2));
      tu_fill_uniform_f32(on + l->off_sb, l->out, 0, bd, seed, (uint64_t)(4 * li + 3));
      tu_fill_uniform_f32(tg + l->off_sw, nw, 0, bd, seed + 1, (uint64_t)(4 * li + 2));
      tu_fill_uniform_f32(tg + l->off_sb, l->out, 0, bd, seed + 1, (uint64_t)(4 * li + 3));
    }
  }
  float *fo = malloc(sizeof(float) * (size_t)N), *ft = malloc(sizeof(float) * (size_t)N);
  double *tmp = malloc(sizeof(double) * (size_t)N);
  tu_fill_normal_f64(tmp, N, seed, 50);
  for (int64_t i = 0; i < N; i++) fo[i] = (float)tmp[i];
  tu_fill_normal_f64(tmp, N, seed, 51);
  for (int64_t i = 0; i < N; i++) ft[i] = (float)tmp[i];
  noisy_transform_f32(fo, N);
  noisy_transform_f32(ft, N);

  /* CPU reference */
  dqn_ws_f32_t cw;
  ck_assert_int_eq(dqn_ws_alloc_f32(&cw, &L, B), 0);
  tu_fill_uniform_f32(cw.x, 2 * (int64_t)B * S, -2, 2, seed, 60);
  float *u = malloc(sizeof(float) * 4 * (size_t)B);
  tu_fill_uniform_f32(u, 4 * B, 0, 1, seed, 61);
  for (int i = 0; i < B; i++) {
    cw.a[i] = (int32_t)(u[i] * A) % A;
    cw.r[i] = -3 + 6 * u[B + i];
    cw.done[i] = u[2 * B + i] < 0.25f;
    cw.w[i] = 0.2f + 0.8f * u[3 * B + i];
  }
  dqn_hp_f32_t hp = {0.97f, c.v_min, c.v_max, c.leaky_slope, k->double_dqn, 0, 0, NULL};
  float qm;
  float loss = dqn_loss_grad_f32(&L, &hp, on, tg, k->noisy ? fo : NULL, k->noisy ? ft : NULL, &cw, gc, &qm);
  double *g64 = NULL; /* the same gradient in double, computed when a block needs it (below) */

  /* GPU */
  cuda_dqn_ws_t gw;
  ck_assert_int_eq(cuda_dqn_ws_alloc(&gw, &L, B, version == 3, 2), 0);
  if (version >= 2) ck_assert_msg(gw.fused.ok, "%s: the phases refused these shapes", k->what);
  if (version == 3) ck_assert_msg(gw.fused.tc == 1, "%s: TF32 phases refused", k->what);
  int nsm = 0;
  CK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0));
  int major = 0, minor = 0;
  CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  CK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
  if (version == 3 && k->wg && DQN_SM90A && major == 9 && minor == 0)
    for (int ph = 2; ph < 4; ph++) ck_assert_msg(gw.fused.ph_big[ph] == 2, "%s: F%d not on wgmma tiles", k->what, ph + 1);
  if (version == 2 && k->big && nsm <= 132) /* the H100/H200's 132 SMs or fewer: the planner's rule holds */
    for (int ph = 0; ph < 7; ph++) ck_assert_msg(gw.fused.ph_big[ph], "%s: phase %d not on 64 x 128 tiles", k->what, ph);
  /* tolerances: fp32 kernels 1e-5 (losses) / 1e-4 (gradients); TF32 operands
   * carry 11 significant bits, measured on the H200 at up to ~1e-3 (losses)
   * and 4e-2 (the ref network's smallest gradient blocks): held to 1e-2 / 1e-1 */
  const int tf32 = version == 3;
  const double tol_loss = tf32 ? 1e-2 : 1e-5, tol_grad = tf32 ? 1e-1 : 1e-4;
  double worst_grad = 0;
  float *don, *dtg, *dgrad;
  CK(cudaMalloc((void **)&don, sizeof(float) * (size_t)P));
  CK(cudaMalloc((void **)&dtg, sizeof(float) * (size_t)P));
  CK(cudaMalloc((void **)&dgrad, sizeof(float) * (size_t)P));
  CK(cudaMemcpy(don, on, sizeof(float) * (size_t)P, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dtg, tg, sizeof(float) * (size_t)P, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(gw.x, cw.x, sizeof(float) * 2 * (size_t)B * S, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(gw.a, cw.a, sizeof(int32_t) * (size_t)B, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(gw.r, cw.r, sizeof(float) * (size_t)B, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(gw.done, cw.done, sizeof(float) * (size_t)B, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(gw.w, cw.w, sizeof(float) * (size_t)B, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(gw.fn_on, fo, sizeof(float) * (size_t)N, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(gw.fn_tg, ft, sizeof(float) * (size_t)N, cudaMemcpyHostToDevice));
  CK(cudaMemset(dgrad, 0xff, sizeof(float) * (size_t)P)); /* NaN: every gradient must be written */
  cuda_dqn_hp_t ghp = {0.97f, c.v_min, c.v_max, c.leaky_slope, k->double_dqn, NULL, NULL};
  int (*loss_grad)(const net_layout_t *, const cuda_dqn_hp_t *, const float *, const float *, int, cuda_dqn_ws_t *,
                   float *, cudaStream_t) = version == 1 ? cuda_dqn_loss_grad_generic : cuda_dqn_loss_grad;
  ck_assert_int_eq(loss_grad(&L, &ghp, don, dtg, k->noisy, &gw, dgrad, 0), 0);
  CK(cudaDeviceSynchronize());
  /* which tail ran: the loss kernel's own rows, or the tail kernel's */
  if (version >= 2) ck_assert_int_eq(cuda_loss_takes_tail(&L, &gw.fused), !k->tailk);
  float gl, *li = malloc(sizeof(float) * (size_t)B);
  int32_t *best = malloc(sizeof(int32_t) * (size_t)B * k->nb);
  CK(cudaMemcpy(&gl, gw.loss, sizeof(float), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(li, gw.loss_i, sizeof(float) * (size_t)B, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(best, gw.best, sizeof(int32_t) * (size_t)B * k->nb, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(gg, dgrad, sizeof(float) * (size_t)P, cudaMemcpyDeviceToHost));

  ck_assert_msg(fabsf(gl - loss) <= tol_loss * fabsf(loss), "%s: loss %.9g vs %.9g", k->what, gl, loss);
  double *x = malloc(sizeof(double) * (size_t)(P > B ? P : B)), *y = malloc(sizeof(double) * (size_t)(P > B ? P : B));
  for (int i = 0; i < B; i++) x[i] = li[i], y[i] = cw.loss_i[i];
  int64_t worst;
  double e = tu_rel_err(x, y, B, &worst);
  ck_assert_msg(e <= tol_loss, "%s: per-sample loss rel err %.3g", k->what, e);
  double loss_err = e;
  int flipped = 0;
  for (int i = 0; i < B * k->nb; i++) {
    if (tf32) { /* TF32 may reorder near-tied Q values */
      flipped += best[i] != cw.best[i];
      continue;
    }
    ck_assert_msg(best[i] == cw.best[i], "%s: Double-DQN action %d: %d vs %d", k->what, i, best[i], cw.best[i]);
  }
  ck_assert_msg(flipped * 100 <= B * k->nb, "%s: %d of %d Double-DQN actions differ", k->what, flipped, B * k->nb);
  for (int li2 = 0; li2 < L.n_layers; li2++) {
    const net_layer_t *l = &L.layer[li2];
    int64_t offs[4] = {l->off_w, l->off_b, l->off_sw, l->off_sb};
    int64_t cnts[4] = {(int64_t)l->in * l->out, l->out, (int64_t)l->in * l->out, l->out};
    const char *nm[4] = {"weight", "bias", "sigma_weight", "sigma_bias"};
    for (int bk = 0; bk < (l->noisy ? 4 : 2); bk++) {
      for (int64_t j = 0; j < cnts[bk]; j++) {
        ck_assert_msg(isfinite(gg[offs[bk] + j]), "%s: %s.%s[%lld] not written", k->what, l->name, nm[bk], (long long)j);
        x[j] = gg[offs[bk] + j];
        y[j] = gc[offs[bk] + j];
      }
      e = tu_rel_err(x, y, cnts[bk], &worst);
      if (e > tol_grad && !tf32) {
        /* Two fp32 sums over thousands of rows in different orders can differ by
         * more than 1e-4 where a gradient block nearly cancels. Then the oracle
         * is the double-precision instance of the same CPU code: the GPU must
         * be as close to it as the fp32 CPU is (within 2x), or within tol_grad. */
        if (!g64) g64 = grad_f64(&L, &hp, on, tg, k->noisy ? fo : NULL, k->noisy ? ft : NULL, &cw, B, S);
        double *z = malloc(sizeof(double) * (size_t)cnts[bk]);
        for (int64_t j = 0; j < cnts[bk]; j++) z[j] = g64[offs[bk] + j];
        int64_t w2;
        double e_gpu = tu_rel_err(x, z, cnts[bk], &w2), e_cpu = tu_rel_err(y, z, cnts[bk], &w2);
        free(z);
        printf("%s: %s.%s: fp32 GPU vs CPU %.3g; against double: GPU %.3g, CPU fp32 %.3g\n", k->what, l->name,
               nm[bk], e, e_gpu, e_cpu);
        ck_assert_msg(e_gpu <= tol_grad || e_gpu <= 2 * e_cpu, "%s: %s.%s rel err against double %.3g (CPU fp32 %.3g)",
                      k->what, l->name, nm[bk], e_gpu, e_cpu);
        e = e_gpu;
      } else
        ck_assert_msg(e <= tol_grad, "%s: %s.%s rel err %.3g (worst %lld: %.8g vs %.8g)", k->what, l->name, nm[bk], e,
                      (long long)worst, x[worst], y[worst]);
      if (e > worst_grad) worst_grad = e;
    }
  }
  /* rerun: same bits */
  ck_assert_int_eq(loss_grad(&L, &ghp, don, dtg, k->noisy, &gw, dgrad, 0), 0);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(gg2, dgrad, sizeof(float) * (size_t)P, cudaMemcpyDeviceToHost));
  ck_assert_msg(memcmp(gg, gg2, sizeof(float) * (size_t)P) == 0, "%s: rerun not bit-identical", k->what);
  static const char *vn[] = {"", "generic", "phases, fp32 (default)", "phases, TF32 (tensor_cores)"};
  int nbig = 0, nwg = 0;
  for (int ph = 0; ph < 7; ph++) nbig += version >= 2 && gw.fused.ph_big[ph] == 1, nwg += version >= 2 && gw.fused.ph_big[ph] == 2;
  printf("%s [%s kernels, %d of 7 phases on 64 x 128 tiles, %d on wgmma%s]: loss %.6f (cpu %.6f), per-sample loss rel err %.2e, "
         "worst gradient block %.2e, %d actions differ ok\n",
         k->what, vn[version], nbig, nwg, version < 2 ? "" : k->tailk ? ", tail kernel" : ", rows in the loss", gl, loss,
         loss_err, worst_grad, flipped);
  cuda_dqn_ws_free(&gw);
  dqn_ws_free_f32(&cw);
  cudaFree(don), cudaFree(dtg), cudaFree(dgrad);
  free(on), free(tg), free(gc), free(gg), free(gg2), free(fo), free(ft), free(tmp), free(li), free(best), free(x), free(y), free(u);
  free(g64);
}

static const gcase_t cases[] = {
    {"ref B=256", 64, 256, 256, 128, 128, 51, 3, {9, 3, 3}, 256, 0, 1, 0, 0, 0},
    {"ref B=256 noisy", 64, 256, 256, 128, 128, 51, 3, {9, 3, 3}, 256, 1, 1, 0, 0, 0},
    {"odd B=37 br=4,7 Z=21 S=13 noisy", 13, 40, 24, 10, 18, 21, 2, {4, 7}, 37, 1, 1, 0, 0, 0},
    {"no double, one branch", 5, 16, 12, 8, 8, 11, 1, {6}, 20, 0, 0, 0, 0, 0},
    {"four branches B=1000", 9, 32, 32, 16, 16, 31, 4, {2, 3, 2, 5}, 1000, 1, 1, 0, 0, 0},
    /* more atoms than two per lane: the tail's 4- and 8-per-lane variants */
    {"Z=101 B=48 br=5,3 noisy", 16, 64, 48, 32, 32, 101, 2, {5, 3}, 48, 1, 1, 0, 0, 0},
    {"Z=200 B=33 one branch", 8, 32, 32, 16, 16, 200, 1, {4}, 33, 0, 1, 0, 0, 0},
    /* every fp32 phase on the 64 x 128 tiles (two per SM: >= 264 tiles at
     * 132 SMs; B1..B3 have B / 64 row tiles): every operand row 16-byte
     * aligned (16-byte copies throughout), then odd strides (the 4-byte
     * fallbacks) */
    {"big tiles B=4096", 32, 640, 640, 256, 384, 52, 1, {3}, 4096, 0, 1, 1, 0, 0},
    {"big tiles odd B=4099 noisy", 13, 641, 643, 257, 255, 21, 2, {2, 3}, 4099, 1, 1, 1, 0, 0},
    /* (last: a case's seed is its index) the ref network at a batch whose
     * TF32 F3 and F4 have enough 128 x 128 tiles for wgmma (24 x 4 and 24 x
     * 9), noisy; odd shapes: partial row and output tiles, k not a multiple
     * of the 32-k chunk */
    {"ref B=1024 noisy", 64, 256, 256, 128, 128, 51, 3, {9, 3, 3}, 1024, 1, 1, 0, 1, 0},
    {"odd wgmma B=1000 br=5,7 Z=37", 20, 96, 132, 68, 100, 37, 2, {5, 7}, 1000, 0, 1, 0, 1, 0},
    /* the loss's own rows (3 x 9 x 200 floats a warp) over 48 KB: the tail
     * kernel writes every log-probability and the loss reads them */
    {"tail kernel Z=200 B=40 br=8,8", 8, 32, 32, 16, 16, 200, 2, {8, 8}, 40, 0, 1, 0, 0, 1},
};

#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* every case through three versions: the generic kernels (1), the phases in
 * fp32 (2, the default) and in TF32 (3: the tensor_cores config, held to the
 * TF32 tolerances); the big cases through 1 and 2 */
static int pairs[3 * NCASES][2]; /* (case, version) run by the loop test */

START_TEST(test_case) { run(&cases[pairs[_i][0]], 100 + (uint64_t)pairs[_i][0], pairs[_i][1]); }
END_TEST

int main(void) {
  tu_gpu_or_skip();
  /* GPU_LOSS_VERSIONS=23 runs only those versions (for the slow
   * compute-sanitizer tools); every version runs by default. Only the pairs
   * that run are registered, so every check counted asserts something. */
  const char *only = getenv("GPU_LOSS_VERSIONS");
  int np = 0;
  for (int v = 1; v <= 3; v++)
    for (int c = 0; c < NCASES; c++) {
      if ((only && !strchr(only, '0' + v)) || (cases[c].big && v == 3)) continue;
      pairs[np][0] = c, pairs[np][1] = v, np++;
    }
  Suite *s = suite_create("gpu-loss");
  TCase *tc = tcase_create("parity");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_case, 0, np);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
