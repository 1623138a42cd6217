/*
 * test-her.c — the replay's episodes, hindsight relabelling and n-step
 * returns (DESIGN.md §6.3; kernels/her.h, kernels/cpu/her.c) against brute
 * force: episode bounds and eligibility through the ring's wrap-around
 * (unfinished and overwritten episodes are never relabelled), each
 * strategy's donor distribution by chi-square (future includes the row
 * itself), the reward and done rules in both norms, n-step targets against a
 * double-precision sum over the stored episode, a restore that rebuilds the
 * bounds, and the learner: n_step = 1 with HER off is today's step, a HER
 * learner's step survives save and load bit for bit.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "her.h"
#include "her_cpu.h"
#include "replay.h"
#include "testutil.h"

#define S 5 /* obs 1 | achieved 2 | desired 2 */
#define G 2
#define O 1

/* One transition per call; the stored s'[O..O+G) (achieved) is (count, -count),
 * the reward count/10, done and end as given. */
static void add1(replay_t *rp, int done, int end) {
  float s[S] = {0}, s2[S];
  float c = (float)rp->total;
  for (int k = 0; k < S; k++) s2[k] = 100 + k;
  s2[O] = c, s2[O + 1] = -c;
  s[O] = c - 1, s[O + 1] = 1 - c;
  int32_t a = 0;
  float r = c / 10;
  uint8_t d = (uint8_t)done, e = (uint8_t)end;
  learner_transitions_t t = {1, s, &a, &r, s2, &d, NULL, &e};
  replay_add(rp, &t);
}

/* brute force: the episodes of the insertion sequence (ends[c] for every count) */
static void expect_bounds(const replay_t *rp, const uint8_t *ends, int64_t n_total) {
  int64_t first = 0;
  int64_t *f = malloc(sizeof(int64_t) * (size_t)n_total), *l = malloc(sizeof(int64_t) * (size_t)n_total);
  for (int64_t c = 0; c < n_total; c++) {
    f[c] = first;
    l[c] = -1;
    if (ends[c]) {
      for (int64_t x = first; x <= c; x++) l[x] = c;
      first = c + 1;
    }
  }
  for (int64_t c = rp->total - rp->size; c < rp->total; c++) {
    int64_t slot = her_slot(c, rp->head, rp->total, rp->cap);
    ck_assert_msg(rp->ep_first[slot] == f[c] && rp->ep_last[slot] == l[c],
                  "count %lld (slot %lld): bounds [%lld, %lld], expected [%lld, %lld]", (long long)c, (long long)slot,
                  (long long)rp->ep_first[slot], (long long)rp->ep_last[slot], (long long)f[c], (long long)l[c]);
    int elig = her_eligible(rp->ep_first[slot], rp->ep_last[slot], rp->total, rp->size);
    int want = l[c] >= 0 && f[c] >= rp->total - rp->size; /* ended, and its first transition still stored */
    ck_assert_int_eq(elig, want);
  }
  free(f), free(l);
}

START_TEST(test_bounds_and_eligibility) {
  replay_t rp;
  ck_assert_int_eq(replay_init(&rp, 10, S, 0, 0.5f), 0);
  uint8_t ends[200] = {0};
  /* episodes of 4 (terminal), 3 (truncated), then a long one that wraps the ring
   * while open, then short ones; after every insertion the bounds are checked */
  const int lens[] = {4, 3, 14, 2, 5, 1, 6};
  const int trunc[] = {0, 1, 0, 1, 0, 0, 1};
  int64_t c = 0;
  int saw_overwritten = 0, saw_open = 0;
  for (int e = 0; e < 7; e++)
    for (int k = 0; k < lens[e]; k++, c++) {
      int last = k == lens[e] - 1;
      ends[c] = (uint8_t)last;
      add1(&rp, last && !trunc[e], last && trunc[e]);
      expect_bounds(&rp, ends, c + 1);
      for (int64_t x = rp.total - rp.size; x < rp.total; x++) {
        int64_t slot = her_slot(x, rp.head, rp.total, rp.cap);
        saw_open |= rp.ep_last[slot] < 0;
        saw_overwritten |= rp.ep_last[slot] >= 0 && rp.ep_first[slot] < rp.total - rp.size;
      }
    }
  ck_assert_msg(saw_open && saw_overwritten, "the sequence must show open and overwritten episodes");
  /* a restore rebuilds the same bounds (the ring wrapped: the oldest stored episode
   * counts as overwritten, which it is here since its start is gone) */
  replay_t cp = rp;
  int64_t *f = malloc(80), *l = malloc(80);
  memcpy(f, rp.ep_first, 80), memcpy(l, rp.ep_last, 80);
  replay_rebuild_episodes(&rp);
  for (int64_t x = rp.total - rp.size; x < rp.total; x++) {
    int64_t slot = her_slot(x, rp.head, rp.total, rp.cap);
    int e1 = her_eligible(f[slot], l[slot], rp.total, rp.size), e2 = her_eligible(rp.ep_first[slot], rp.ep_last[slot], rp.total, rp.size);
    ck_assert_int_eq(l[slot], rp.ep_last[slot]);
    ck_assert_int_eq(e1, e2);
  }
  ck_assert_int_eq(cp.open_first, rp.open_first);
  free(f), free(l);
  replay_free(&rp);
}
END_TEST

static double chi2_uniform(const int64_t *cnt, int n, int64_t draws) {
  double e = (double)draws / n, x = 0;
  for (int i = 0; i < n; i++) x += (cnt[i] - e) * (cnt[i] - e) / e;
  return x;
}
/* a loose p ~ 1e-4 bound for df degrees of freedom */
static double chi2_bound(int df) { return df + 5 * sqrt(2.0 * df) + 10; }

START_TEST(test_donor_distributions) {
  const int64_t first = 20, last = 31, c = 25, size = 64, total = 100, head = 36, cap = 64;
  const int draws = 120000;
  int64_t cnt[64];
  for (int strat = 0; strat < 4; strat++) {
    memset(cnt, 0, sizeof cnt);
    for (int k = 0; k < draws; k++) {
      int64_t slot = her_donor_slot(7, (uint64_t)k, 3, strat, c, first, last, head, total, size, cap);
      ck_assert(slot >= 0 && slot < cap);
      cnt[slot]++;
    }
    int64_t lo = strat == LEARNER_HER_FUTURE ? c : first, hi = last;
    if (strat == LEARNER_HER_FINAL) {
      ck_assert_int_eq(cnt[her_slot(last, head, total, cap)], draws);
      continue;
    }
    int64_t v[64];
    int n = 0;
    if (strat == LEARNER_HER_RANDOM) {
      for (int s = 0; s < size; s++) v[n++] = cnt[s];
    } else {
      int64_t in = 0;
      for (int64_t x = lo; x <= hi; x++) v[n++] = cnt[her_slot(x, head, total, cap)], in += v[n - 1];
      ck_assert_msg(in == draws, "strategy %d drew outside [%lld, %lld]", strat, (long long)lo, (long long)hi);
    }
    double x2 = chi2_uniform(v, n, draws);
    ck_assert_msg(x2 < chi2_bound(n - 1), "strategy %d: chi-square %.1f over %d cells", strat, x2, n);
    if (strat == LEARNER_HER_FUTURE) ck_assert_msg(cnt[her_slot(c, head, total, cap)] > 0, "future must include the row itself");
  }
  /* the rows' draws are independent of each other: row 3 and row 4 differ */
  int same = 0;
  for (int k = 0; k < 1000; k++)
    same += her_donor_slot(7, (uint64_t)k, 3, 2, c, first, last, head, total, size, cap) ==
            her_donor_slot(7, (uint64_t)k, 4, 2, c, first, last, head, total, size, cap);
  ck_assert_msg(same < 200, "rows 3 and 4 share their donor %d times in 1000", same);
}
END_TEST

START_TEST(test_reward_rules) {
  int ok;
  float a[3] = {1, 2, 3}, g1[3] = {1.5f, 2, 2.9f}, g2[3] = {1, 2, 3};
  /* inf: max |a - g| = 0.5; l2: sqrt(0.25 + 0.01) */
  ck_assert_float_eq(her_reward(a, g1, 3, LEARNER_HER_NORM_INF, 0.5f, 2, &ok), 0.0f);
  ck_assert_int_eq(ok, 1);
  ck_assert_float_eq(her_reward(a, g1, 3, LEARNER_HER_NORM_INF, 0.49f, 2, &ok), -2.0f);
  ck_assert_int_eq(ok, 0);
  ck_assert_float_eq(her_reward(a, g1, 3, LEARNER_HER_NORM_L2, 0.51f, 1, &ok), 0.0f);
  ck_assert_float_eq(her_reward(a, g1, 3, LEARNER_HER_NORM_L2, 0.50f, 1, &ok), -1.0f);
  ck_assert_float_eq(her_reward(a, g2, 3, LEARNER_HER_NORM_INF, 0, 1, &ok), 0.0f);
  ck_assert_int_eq(ok, 1);

  /* a batch through the spec: every row of an ended episode relabelled (ratio 1) */
  replay_t rp;
  ck_assert_int_eq(replay_init(&rp, 32, S, 0, 0.5f), 0);
  for (int k = 0; k < 6; k++) add1(&rp, k == 5, 0);
  learner_config_t c;
  learner_config_default(&c);
  c.state_dim = S, c.her_goal_dim = G, c.batch = 6, c.seed = 3;
  c.hp.her_ratio = 1, c.hp.her_strategy = LEARNER_HER_FINAL, c.hp.her_eps = 0, c.hp.her_reward_scale = 1;
  c.hp.her_done_on_success = 1;
  int64_t idx[6] = {0, 1, 2, 3, 4, 5};
  float x[12 * S], r[6], done[6], gd[6];
  for (int i = 0; i < 6; i++) {
    memcpy(x + i * S, rp.s + i * S, sizeof(float) * S);
    memcpy(x + (6 + i) * S, rp.s2 + i * S, sizeof(float) * S);
    r[i] = rp.r[i], done[i] = rp.done[i];
  }
  ck_assert_int_eq(her_batch_cpu(&rp, &c, 0, 6, idx, x, r, done, gd), 0);
  for (int i = 0; i < 6; i++) {
    /* final: the goal is s'_5's achieved goal (5, -5) in s and s' */
    ck_assert_float_eq(x[i * S + O + G], 5.0f);
    ck_assert_float_eq(x[i * S + O + G + 1], -5.0f);
    ck_assert_float_eq(x[(6 + i) * S + O + G], 5.0f);
    ck_assert_float_eq(x[(6 + i) * S + O], (float)i); /* achieved goals untouched */
    ck_assert_float_eq(r[i], i == 5 ? 0.0f : -1.0f);
    ck_assert_float_eq(done[i], i == 5 ? 1.0f : 0.0f); /* done = success */
  }
  /* an open episode (no end yet) is never relabelled */
  add1(&rp, 0, 0);
  add1(&rp, 0, 0);
  int64_t idx2[6] = {6, 7, 6, 7, 6, 7};
  for (int i = 0; i < 6; i++) {
    memcpy(x + i * S, rp.s + idx2[i] * S, sizeof(float) * S);
    memcpy(x + (6 + i) * S, rp.s2 + idx2[i] * S, sizeof(float) * S);
    r[i] = rp.r[idx2[i]], done[i] = 0;
  }
  her_batch_cpu(&rp, &c, 0, 6, idx2, x, r, done, gd);
  for (int i = 0; i < 6; i++) {
    ck_assert_float_eq(x[i * S + O + G], 0.0f); /* the stored desired goal (0) */
    ck_assert_float_eq(r[i], rp.r[idx2[i]]);
  }
  replay_free(&rp);
}
END_TEST

START_TEST(test_nstep_brute_force) {
  replay_t rp;
  const int cap = 40;
  ck_assert_int_eq(replay_init(&rp, cap, S, 0, 0.5f), 0);
  uint8_t ends[400] = {0}, dn[400] = {0};
  float rew[400];
  uint64_t rng = 12345;
  int64_t n_total = 0;
  while (n_total < 97) { /* wraps the ring twice; random episode lengths, some truncated */
    int len = 1 + (int)((rng = rng * 6364136223846793005ULL + 1442695040888963407ULL) >> 60);
    int trunc = (int)((rng >> 20) & 1);
    for (int k = 0; k < len && n_total < 97; k++, n_total++) {
      int last = k == len - 1;
      ends[n_total] = (uint8_t)last;
      dn[n_total] = (uint8_t)(last && !trunc);
      add1(&rp, dn[n_total], last && trunc);
      rew[n_total] = rp.r[her_slot(n_total, rp.head, rp.total, rp.cap)];
    }
  }
  learner_config_t c;
  learner_config_default(&c);
  c.state_dim = S, c.batch = cap, c.hp.gamma = 0.9f;
  for (int n = 1; n <= 5; n += 2) {
    c.hp.n_step = n;
    int64_t idx[cap];
    float x[2 * cap * S], r[cap], done[cap], gd[cap];
    for (int i = 0; i < cap; i++) {
      idx[i] = i;
      memcpy(x + i * S, rp.s + i * S, sizeof(float) * S);
      memcpy(x + (cap + i) * S, rp.s2 + i * S, sizeof(float) * S);
      r[i] = rp.r[i], done[i] = rp.done[i];
    }
    int any = her_batch_cpu(&rp, &c, 0, cap, idx, x, r, done, gd);
    ck_assert_int_eq(any, n > 1);
    for (int i = 0; i < cap; i++) {
      int64_t cnt = replay_insertion_count(&rp, i);
      /* brute force over the insertion sequence: up to n steps, stop after the episode's end */
      double R = 0, g = 1;
      int64_t k = cnt;
      for (int m = 0; m < n && k < n_total; m++, k++) {
        R += g * rew[k];
        g *= 0.9;
        if (ends[k]) {
          k++;
          break;
        }
      }
      int64_t lastc = k - 1, lslot = her_slot(lastc, rp.head, rp.total, rp.cap);
      ck_assert_msg(fabs(r[i] - R) <= 1e-5 * (1 + fabs(R)), "n %d count %lld: return %.7g, brute force %.7g", n,
                    (long long)cnt, (double)r[i], R);
      if (any) ck_assert_msg(fabs(gd[i] - g) <= 1e-6, "n %d count %lld: discount %.7g, expected %.7g", n, (long long)cnt,
                             (double)gd[i], g);
      ck_assert_float_eq(done[i], (float)dn[lastc]);
      ck_assert_float_eq(x[(cap + i) * S + O], rp.s2[lslot * S + O]); /* s' of the m-th transition */
    }
  }
  replay_free(&rp);
}
END_TEST

/* learner-level: a HER + n-step + PER learner's step is deterministic and
 * survives save and load (a ring that never wrapped rebuilds the same bounds) */
static learner_config_t her_config(void) {
  learner_config_t c;
  learner_config_default(&c);
  c.state_dim = 9, c.her_goal_dim = 3, c.trunk_h1 = 32, c.trunk_h2 = 32, c.value_hidden = 16, c.adv_hidden = 16;
  c.atoms = 11, c.n_branches = 1, c.branch_sizes[0] = 4, c.batch = 16, c.replay_capacity = 4000;
  c.prioritized = 1, c.seed = 5, c.hp.n_step = 3, c.hp.her_ratio = 0.5f, c.hp.lr = 1e-3f;
  return c;
}

static void feed_episodes(learner_t *l, int n, int ep_len) {
  const int S9 = 9;
  float *s = calloc((size_t)n * S9, 4), *s2 = calloc((size_t)n * S9, 4), *r = calloc((size_t)n, 4);
  int32_t *a = calloc((size_t)n, 4);
  uint8_t *d = calloc((size_t)n, 1), *e = calloc((size_t)n, 1);
  tu_fill_uniform_f32(s, (int64_t)n * S9, -1, 1, 1, 2);
  tu_fill_uniform_f32(s2, (int64_t)n * S9, -1, 1, 1, 3);
  for (int i = 0; i < n; i++) {
    a[i] = i % 4;
    r[i] = -1;
    e[i] = (i % ep_len) == ep_len - 1;
    d[i] = e[i] && (i / ep_len) % 2; /* every other episode ends truncated */
  }
  learner_transitions_t t = {n, s, a, r, s2, d, NULL, e};
  char err[256];
  ck_assert_msg(learner_submit(l, &t, err, sizeof err) == 0, "%s", err);
  free(s), free(s2), free(r), free(a), free(d), free(e);
}

START_TEST(test_learner_save_load) {
  learner_config_t c = her_config();
  learner_t *a, *b;
  char err[256];
  ck_assert_msg(learner_create(&c, LEARNER_BACKEND_CPU, &a, err, sizeof err) == 0, "%s", err);
  feed_episodes(a, 300, 7);
  learner_stats_t st;
  ck_assert_int_eq(learner_step(a, 5, &st, err, sizeof err), 0);
  membuf_t m = {0};
  ck_assert_int_eq(learner_save(a, 1, mem_write, &m, err, sizeof err), 0);
  ck_assert_msg(learner_load(mem_read, &m, LEARNER_BACKEND_CPU, &b, err, sizeof err) == 0, "%s", err);
  learner_stats_t sa, sb;
  ck_assert_int_eq(learner_step(a, 20, &sa, err, sizeof err), 0);
  ck_assert_int_eq(learner_step(b, 20, &sb, err, sizeof err), 0);
  ck_assert_msg(sa.loss_last == sb.loss_last && sa.loss_mean == sb.loss_mean, "loaded: loss %.9g / %.9g vs %.9g / %.9g",
                sa.loss_last, sa.loss_mean, sb.loss_last, sb.loss_mean);
  /* and HER with n-step changes the step (the test can fail) */
  learner_config_t c0 = c;
  c0.her_goal_dim = 0, c0.hp.n_step = 1;
  learner_t *z;
  ck_assert_int_eq(learner_create(&c0, LEARNER_BACKEND_CPU, &z, err, sizeof err), 0);
  feed_episodes(z, 300, 7);
  learner_stats_t s0;
  ck_assert_int_eq(learner_step(z, 25, &s0, err, sizeof err), 0);
  ck_assert_msg(s0.loss_last != sa.loss_last, "HER and n-step made no difference");
  free(m.p);
  learner_destroy(a), learner_destroy(b), learner_destroy(z);
}
END_TEST

/* with the ensemble (K 3, masks, priors, diversity): HER's rows reach every head's target */
START_TEST(test_learner_ensemble) {
  learner_config_t c = her_config();
  c.ensemble_k = 3, c.ensemble_mask_p = 0.5f, c.ensemble_prior_scale = 1, c.hp.ensemble_diversity = 0.1f;
  learner_t *a, *b;
  char err[256];
  ck_assert_msg(learner_create(&c, LEARNER_BACKEND_CPU, &a, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(learner_create(&c, LEARNER_BACKEND_CPU, &b, err, sizeof err) == 0, "%s", err);
  feed_episodes(a, 300, 7);
  feed_episodes(b, 300, 7);
  learner_stats_t sa, sb;
  ck_assert_int_eq(learner_step(a, 10, &sa, err, sizeof err), 0);
  learner_hparams_t hp;
  learner_get_hparams(b, &hp);
  hp.her_ratio = 0; /* the same learner with no row relabelled */
  ck_assert_int_eq(learner_set_hparams(b, &hp, err, sizeof err), 0);
  ck_assert_int_eq(learner_step(b, 10, &sb, err, sizeof err), 0);
  ck_assert_msg(isfinite(sa.loss_last) && sa.loss_last != sb.loss_last, "ensemble: HER changed nothing (%g, %g)",
                sa.loss_last, sb.loss_last);
  learner_destroy(a), learner_destroy(b);
}
END_TEST

START_TEST(test_config_checks) {
  learner_config_t c;
  learner_config_default(&c);
  char err[256];
  c.state_dim = 5, c.her_goal_dim = 3;
  ck_assert_int_eq(learner_config_validate(&c, err, sizeof err), LEARNER_EINVAL);
  ck_assert_msg(strstr(err, "her_goal_dim"), "%s", err);
  c.her_goal_dim = 2;
  ck_assert_msg(learner_config_validate(&c, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(learner_config_set(&c, "n_step", "0", err, sizeof err), LEARNER_EINVAL);
  ck_assert_msg(strstr(err, "n_step"), "%s", err);
  ck_assert_int_eq(learner_config_set(&c, "her_strategy", "episode", err, sizeof err), 0);
  ck_assert_int_eq(c.hp.her_strategy, LEARNER_HER_EPISODE);
  ck_assert_int_eq(learner_config_set(&c, "her_strategy", "later", err, sizeof err), LEARNER_EINVAL);
  ck_assert_int_eq(learner_config_set(&c, "her_norm", "l2", err, sizeof err), 0);
  ck_assert_int_eq(c.hp.her_norm, LEARNER_HER_NORM_L2);
}
END_TEST

int main(void) {
  Suite *s = suite_create("her");
  TCase *tc = tcase_create("her");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_bounds_and_eligibility);
  tcase_add_test(tc, test_donor_distributions);
  tcase_add_test(tc, test_reward_rules);
  tcase_add_test(tc, test_nstep_brute_force);
  tcase_add_test(tc, test_learner_save_load);
  tcase_add_test(tc, test_learner_ensemble);
  tcase_add_test(tc, test_config_checks);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
