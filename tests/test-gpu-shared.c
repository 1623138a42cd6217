/*
 * test-gpu-shared.c — trainers of different shapes sharing one GPU in one
 * process (docs/testing.md): a kernel's shared-memory attribute belongs to
 * the kernel, not to a learner, so a learner must never lower it under
 * another's captured graph. Two shapes whose attention row kernels and
 * ensemble loss both need more than the default 48 KB, at different sizes:
 *   wide:   trunk 512 in 8 tokens of 64 (the row kernels ~79 / 83 KB), K = 5
 *   narrow: trunk 448 in 8 tokens of 56 (~62 / 66 KB), K = 3
 * The wide learner captures its graph and steps, the narrow one is created
 * and steps (its launches set the attributes for its own sizes), then the
 * wide one replays its graph again; each must end bit for bit equal to a
 * twin of its config stepped alone afterwards (the oracle: the same
 * learner, undisturbed), with every step's loss finite. The same order with
 * cuda_graph = 0 (the attributes set between launches instead of before a
 * capture) must hold too. Exits 77 with no usable GPU.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "feed.h"
#include "gpu_testutil.h"
#include "learner.h"
#include "testutil.h"

static learner_config_t shaped(int wide, int graph) {
  learner_config_t c;
  learner_config_default(&c);
  const char *f[][2] = {{"state_dim", "16"},     {"trunk_h1", "64"},        {"trunk_h2", wide ? "512" : "448"},
                        {"attn_tokens", "8"},    {"attn_heads", "2"},       {"ensemble_k", wide ? "5" : "3"},
                        {"ensemble_prior_scale", "1"}, {"ensemble_mask_p", "0.5"}, {"ensemble_diversity", "0.1"},
                        {"batch", "32"},         {"replay_capacity", "2000"}, {"seed", wide ? "5" : "6"},
                        {"lr", "0.001"},         {"target_period", "10"},   {"cuda_graph", graph ? "1" : "0"}};
  char err[256];
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
    ck_assert_msg(learner_config_set(&c, f[i][0], f[i][1], err, sizeof err) == 0, "%s: %s", f[i][0], err);
  return c;
}

static learner_t *make(const learner_config_t *c, uint64_t tag) {
  learner_t *l;
  char err[256];
  ck_assert_msg(learner_create(c, LEARNER_BACKEND_CUDA, &l, err, sizeof err) == 0, "%s", err);
  tu_feed(l, 1500, tag);
  return l;
}

static void steps(learner_t *l, int n, const char *who) {
  learner_stats_t s;
  char err[256];
  ck_assert_msg(learner_step(l, n, &s, err, sizeof err) == 0, "%s: %s", who, err);
  ck_assert_msg(isfinite(s.loss_last), "%s: loss %g", who, (double)s.loss_last);
}

static int same_params(learner_t *a, learner_t *b) {
  const int64_t P = learner_config_num_params(learner_config(a));
  float *x = malloc(sizeof(float) * (size_t)P), *y = malloc(sizeof(float) * (size_t)P);
  ck_assert_ptr_nonnull(x);
  ck_assert_ptr_nonnull(y);
  ck_assert_int_eq(learner_get_params(a, 0, x, P), 0);
  ck_assert_int_eq(learner_get_params(b, 0, y, P), 0);
  const int same = memcmp(x, y, sizeof(float) * (size_t)P) == 0;
  free(x), free(y);
  return same;
}

/* _i: 0 with CUDA graphs, 1 without */
START_TEST(test_shapes_share_the_gpu) {
  const int graph = _i == 0;
  learner_config_t cw = shaped(1, graph), cn = shaped(0, graph);
  learner_t *wide = make(&cw, 1);
  steps(wide, 15, "wide, first");
  learner_t *narrow = make(&cn, 2);
  steps(narrow, 15, "narrow");
  steps(wide, 15, "wide, after the narrow learner's steps");
  steps(narrow, 5, "narrow, again");
  /* the oracles: the same configs and data, stepped with nothing between */
  learner_t *wide2 = make(&cw, 1), *narrow2 = make(&cn, 2);
  steps(wide2, 30, "wide twin");
  steps(narrow2, 20, "narrow twin");
  ck_assert_msg(same_params(wide, wide2), "graph %d: the wide learner differs from its twin", graph);
  ck_assert_msg(same_params(narrow, narrow2), "graph %d: the narrow learner differs from its twin", graph);
  /* and the check can fail: another step apart */
  steps(wide2, 1, "wide twin, one more");
  ck_assert_msg(!same_params(wide, wide2), "graph %d: a step more changed nothing", graph);
  learner_destroy(wide), learner_destroy(narrow), learner_destroy(wide2), learner_destroy(narrow2);
}
END_TEST

int main(void) {
  tu_gpu_or_skip();
  Suite *s = suite_create("gpu-shared");
  TCase *tc = tcase_create("shapes");
  tcase_set_timeout(tc, 300);
  tcase_add_loop_test(tc, test_shapes_share_the_gpu, 0, 2);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
