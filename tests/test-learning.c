/*
 * test-learning.c — the CPU learner must solve the built-in meanrev
 * environment (client/demo_env.h): its greedy policy reaches >= 90% of the
 * optimal policy's return on held-out episodes within a fixed step budget.
 * The oracle is the closed-form optimal policy of the environment.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo_env.h"
#include "learner.h"
#include "testutil.h"

/* iteration 0 is the untrained net: no training loss exists yet, so none is printed */
static void progress(void *ctx, const demo_point_t *p) {
  (void)ctx;
  char loss[32];
  if (p->iteration > 0)
    snprintf(loss, sizeof loss, "%.4f", p->loss);
  else
    snprintf(loss, sizeof loss, "n/a");
  printf("iter %4d step %6llu loss %s return %.3f (optimal %.3f, random %.3f) = %.1f%% of optimal\n",
         p->iteration, (unsigned long long)p->learner_step, loss, p->policy_return, p->optimal_return,
         p->random_return, 100.0 * p->policy_return / p->optimal_return);
  fflush(stdout);
}

START_TEST(test_meanrev_solved) {
  learner_config_t c;
  demo_env_learner_config(&c);
  learner_t *l;
  char err[256];
  ck_assert_msg(learner_create(&c, LEARNER_BACKEND_CPU, &l, err, sizeof err) == 0, "%s", err);
  demo_driver_t drv;
  demo_driver_learner(&drv, l);
  demo_opts_t o;
  demo_opts_default(&o);
  /* demo_evaluate fills only the three returns; the rest of the point is ours
   * (iteration, learner_step and loss were printed uninitialised before) */
  demo_point_t before, fin;
  memset(&before, 0, sizeof before);
  memset(&fin, 0, sizeof fin);
  learner_stats_t st0;
  ck_assert_int_eq(learner_get_stats(l, &st0), 0);
  before.iteration = 0;
  before.learner_step = st0.step; /* 0: nothing trained yet */
  before.loss = NAN;              /* no training loss before the first step (not printed) */
  ck_assert_int_eq(demo_evaluate(&drv, o.seed, o.eval_episodes, &before), 0);
  progress(NULL, &before);
  ck_assert_int_eq(demo_train(&drv, &o, progress, NULL, &fin), 0);
  /* the untrained net must not already be good, or the test proves nothing */
  ck_assert_msg(before.policy_return < 0.5 * before.optimal_return, "untrained policy already at %.3f",
                before.policy_return);
  ck_assert_msg(fin.optimal_return > 0, "optimal return %.3f", fin.optimal_return);
  ck_assert_msg(fin.policy_return >= 0.9 * fin.optimal_return, "policy %.3f < 90%% of optimal %.3f",
                fin.policy_return, fin.optimal_return);
  learner_destroy(l);
}
END_TEST

int main(void) {
  Suite *s = suite_create("learning");
  TCase *tc = tcase_create("meanrev");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_meanrev_solved);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
