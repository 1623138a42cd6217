/*
 * test-gpu-memory.c — the CUDA memory estimate against what a learner takes
 * (docs/architecture.md, "Memory"). CreateTrainer refuses a trainer, or a
 * population, whose estimate exceeds the GPU's free memory, so the estimate
 * must not fall short of what the learner then allocates (it would fail
 * later, at creation, or leave the next trainer without room), nor be far
 * above it (it would refuse trainers that fit). The oracle is the device's
 * own count: cudaMemGetInfo's free memory before the learner is created and
 * after it has captured its graph, stepped and had every member act on
 * more states than one pass of Act takes (learner_memory_available), each
 * shape created once first so that the kernels' code is already loaded.
 * Bounds: measured <= estimate <= measured + 25% + 96 MiB (the estimate's
 * 64 MiB for the device-dependent split-K plan and the graph, of which a
 * population counts 56 once: counted once a member, eight members'
 * estimate passed this bound). Exits 77 with no usable GPU.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feed.h"
#include "gpu_testutil.h"
#include "learner.h"
#include "population.h"
#include "testutil.h"

enum { SHAPES = 6 };

static learner_config_t shape(int which, const char **name) {
  learner_config_t c;
  learner_config_default(&c);
  c.replay_capacity = 100000, c.batch = 256;
  char err[256];
#define SET(k, v) ck_assert_msg(learner_config_set(&c, k, v, err, sizeof err) == 0, "%s: %s", k, err)
  switch (which) {
  case 0: *name = "ref, batch 256, fp32"; break;
  case 1:
    *name = "ref, batch 64, TF32, PER over 10^6, NoisyNet";
    c.batch = 64, c.tensor_cores = 1, c.prioritized = 1, c.noisy = 1, c.replay_capacity = 1000000;
    break;
  case 2:
    *name = "K 5 with priors, attention 8 x 2, batch 256, TF32";
    c.tensor_cores = 1;
    SET("ensemble_k", "5"), SET("ensemble_prior_scale", "1"), SET("attn_tokens", "8"), SET("attn_heads", "2");
    break;
  case 3:
    *name = "ref + Decision Transformer (3 layers, batch 64)";
    SET("dt_layers", "3");
    break;
  case 4:
    *name = "trunk 2048-2048, batch 256 (the generic split-K scratch)";
    c.trunk_h1 = 2048, c.trunk_h2 = 2048;
    break;
  default: *name = "population of 8, ref, batch 256, TF32"; c.tensor_cores = 1; break;
  }
#undef SET
  return c;
}

/* create, feed, step (the graph captured), each member act on 5,000 states
 * (more than one pass of Act: its buffers at their largest); destroyed by
 * the caller */
static learner_pop_t *use(const learner_config_t *c, int members) {
  learner_pop_t *p;
  char err[512];
  ck_assert_msg(learner_pop_create(c, members, NULL, LEARNER_BACKEND_CUDA, &p, err, sizeof err) == 0, "%s", err);
  for (int i = 0; i < members; i++) tu_feed(learner_pop_member(p, i), 2000, 7 + (uint64_t)i);
  learner_stats_t st[8];
  ck_assert_msg(learner_pop_step_until(p, 3, NULL, st, NULL, err, sizeof err) == 0, "%s", err);
  enum { NA = 5000 };
  float *s = calloc((size_t)NA * c->state_dim, sizeof(float));
  int32_t *a = malloc(sizeof(int32_t) * NA);
  for (int i = 0; i < members; i++)
    ck_assert_msg(learner_act(learner_pop_member(p, i), s, NA, 0, a, NULL, err, sizeof err) == 0, "%s", err);
  free(s), free(a);
  return p;
}

START_TEST(test_estimate_covers_use) {
  const char *name;
  const learner_config_t c = shape(_i, &name);
  const int members = _i == SHAPES - 1 ? 8 : 1;
  learner_pop_destroy(use(&c, members)); /* the kernels' code loaded, once */
  const int64_t before = learner_memory_available(LEARNER_BACKEND_CUDA);
  learner_pop_t *p = use(&c, members);
  const int64_t after = learner_memory_available(LEARNER_BACKEND_CUDA);
  learner_pop_destroy(p);
  const int64_t used = before - after, est = learner_pop_memory_estimate(&c, members, LEARNER_BACKEND_CUDA);
  const double mib = 1.0 / (1 << 20);
  printf("%-58s measured %9.1f MiB, estimate %9.1f MiB (%+.1f)\n", name, used * mib, est * mib,
         (est - used) * mib);
  ck_assert_msg(before > 0 && after > 0, "cudaMemGetInfo failed");
  ck_assert_msg(used <= est, "%s: the learner took %.1f MiB, the estimate says %.1f", name, used * mib, est * mib);
  ck_assert_msg(est <= used + used / 4 + (96LL << 20), "%s: the estimate %.1f MiB is far above the %.1f taken", name,
                est * mib, used * mib);
}
END_TEST

int main(void) {
  tu_gpu_or_skip();
  Suite *s = suite_create("gpu-memory");
  TCase *tc = tcase_create("estimate");
  tcase_set_timeout(tc, 300);
  tcase_add_loop_test(tc, test_estimate_covers_use, 0, SHAPES);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
