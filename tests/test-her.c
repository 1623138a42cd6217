/*
 * test-her.c — the replay's episodes, hindsight relabelling and n-step
 * returns (docs/learner.md, "HER and n-step"; kernels/her.h,
 * kernels/cpu/her_cpu.c) against brute force: episode bounds and eligibility
 * through the ring's wrap-around (unfinished and overwritten episodes are
 * never relabelled); each strategy's donor distribution for a stored episode
 * whose slots cross the wrap, by a chi-square test at p >= 1e-4 (the tail by
 * tu_chi2_pvalue, itself checked against published critical values); the
 * reward and done rules in both norms; n-step targets against a
 * double-precision sum over the stored episode; HER with n-step on one batch
 * (her_ratio 0.75: relabelled rows take their own reward rule and m = 1, the
 * others the truncated n-step return) and every one of K = 3 heads' target
 * distributions from it, within 1e-12 of a brute-force projection; a restore
 * that rebuilds the same last counts and eligibility; and the learner: a
 * HER + n-step + PER learner and its saved-and-loaded copy take the next 20
 * steps to the same last and mean loss (compared with ==), HER with n-step
 * changes the loss, and so does HER alone with the ensemble; and the config
 * checks refuse bad HER and n-step settings.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "her.h"
#include "dqn_math.h"
#include "her_cpu.h"
#include "net_layout.h"
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
  /* a restore rebuilds the same last counts and the same eligibility (the
   * ring wrapped: the oldest stored episode counts as overwritten, which it
   * is here since its start is gone); first counts are not compared */
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
  /* a replay restored without its transitions holds none at a count T > 0
   * (a state saved without its replay, loaded: size 0, head 0, the next
   * transition opens an episode): an episode submitted then is whole, and
   * stays whole through a rebuild, the restore of a save with the replay
   * (it counted as overwritten there: the ring "wrapped" unless T was 0) */
  replay_t z;
  ck_assert_int_eq(replay_init(&z, 10, S, 0, 0.5f), 0);
  z.total = 57;
  z.open_first = 57;
  for (int k = 0; k < 3; k++) add1(&z, k == 2, 0);
  for (int pass = 0; pass < 2; pass++) {
    for (int64_t x = z.total - z.size; x < z.total; x++) {
      int64_t slot = her_slot(x, z.head, z.total, z.cap);
      ck_assert_msg(her_eligible(z.ep_first[slot], z.ep_last[slot], z.total, z.size), "pass %d, count %lld", pass,
                    (long long)x);
    }
    replay_rebuild_episodes(&z);
  }
  replay_free(&z);
}
END_TEST

static double chi2_uniform(const int64_t *cnt, int n, int64_t draws) {
  double e = (double)draws / n, x = 0;
  for (int i = 0; i < n; i++) x += (cnt[i] - e) * (cnt[i] - e) / e;
  return x;
}

/* the p-value below which a distribution test fails */
#define CHI2_P_MIN 1e-4

/* the oracle's own check: published chi-square critical values */
START_TEST(test_chi2_pvalue) {
  static const struct { int df; double x, p; } t[] = {
      {1, 3.841459, 0.05}, {3, 16.266236, 0.001}, {6, 22.457744, 0.001}, {10, 23.209251, 0.01},
      {60, 79.081945, 0.05}, {63, 82.528727, 0.05}, {11, 31.264134, 0.001}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    double p = tu_chi2_pvalue(t[i].x, t[i].df);
    ck_assert_msg(fabs(p - t[i].p) <= 1e-5 * t[i].p + 1e-9, "df %d x %g: p %.9g, the table says %g", t[i].df, t[i].x,
                  p, t[i].p);
  }
}
END_TEST

/* Each strategy's donors for a row of an episode that is still stored and
 * whose slots cross the ring's wrap (counts 124..135 in a full ring of 64
 * whose head is 12: slots 60..63 then 0..7), 120,000 draws: future uniform on
 * [c, last] with c itself, episode on [first, last], final always last,
 * random on every slot; none outside, and the counts pass a chi-square test
 * of uniformity at p >= CHI2_P_MIN (the upper tail by tu_chi2_pvalue, to
 * ~1e-14). Rows 3 and 4 share their donor in fewer than 200 of 1000 draws. */
START_TEST(test_donor_distributions) {
  const int64_t first = 124, last = 135, c = 126, size = 64, total = 140, cap = 64, head = total % cap;
  ck_assert(her_eligible(first, last, total, size)); /* stored: its first count is >= total - size */
  ck_assert(her_slot(first, head, total, cap) > her_slot(last, head, total, cap)); /* and it wraps */
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
    double x2 = chi2_uniform(v, n, draws), p = tu_chi2_pvalue(x2, n - 1);
    ck_assert_msg(p >= CHI2_P_MIN, "strategy %d: chi-square %.1f over %d cells, p %.2g < %g", strat, x2, n, p,
                  CHI2_P_MIN);
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

/* HER and n-step together on one gathered batch (her_batch_cpu), then that
 * batch through the spec's loss with K = 3 head sets and priors, each
 * against brute force:
 *  - rows i < floor(her_ratio B) = 12 of an eligible episode are relabelled
 *    (her_ratio 0.75, below 1): the donor's achieved goal in s and s', the
 *    goal reward (inf norm, eps 0.5, scale 2) and done = success, discount
 *    gamma (m = 1) and their own s'; rows of open or overwritten episodes and
 *    rows >= 12 are not, and take the n-step return (n 3, truncated at their
 *    episode's end), the m-th transition's s' and done, and gamma^m (here
 *    8 rows relabelled, rows 1, 4, 7 and 10 ineligible, rows 12..15
 *    eligible but past the ratio);
 *  - every head's target distribution (ws.m [K, D, B, Z]) is, within 1e-12,
 *    the projection of r_i + gdisc_i (1 - done_i) z onto the support, under
 *    head k's target distribution at the action head k of the online net
 *    picks at s'_i (the pick itself compared exactly). */
START_TEST(test_her_nstep_heads) {
  enum { CAP = 40, B = 16, K = 3 };
  replay_t rp;
  ck_assert_int_eq(replay_init(&rp, CAP, S, 0, 0.5f), 0);
  uint8_t ends[200] = {0}, dn[200] = {0};
  float rew[200];
  int64_t n_total = 0;
  /* episodes of 5, 3 (truncated), 9, 1, 4 (truncated), 6, ... wrapping the ring; the last one open */
  static const int lens[] = {5, 3, 9, 1, 4, 6, 7, 2, 8, 5, 3, 6, 4};
  for (size_t e = 0; e < sizeof lens / sizeof lens[0]; e++)
    for (int k = 0; k < lens[e]; k++, n_total++) {
      const int last = k == lens[e] - 1 && e + 1 < sizeof lens / sizeof lens[0], trunc = e % 3 == 1;
      ends[n_total] = (uint8_t)last;
      dn[n_total] = (uint8_t)(last && !trunc);
      add1(&rp, dn[n_total], last && trunc);
      rew[n_total] = rp.r[her_slot(n_total, rp.head, rp.total, rp.cap)];
    }
  learner_config_t c;
  learner_config_default(&c);
  c.state_dim = S, c.her_goal_dim = G, c.batch = B, c.seed = 9;
  c.trunk_h1 = 8, c.trunk_h2 = 8, c.value_hidden = 6, c.adv_hidden = 6, c.atoms = 11;
  c.n_branches = 2, c.branch_sizes[0] = 3, c.branch_sizes[1] = 2, c.v_min = -4, c.v_max = 16;
  c.ensemble_k = K, c.ensemble_prior_scale = 0.5f;
  c.hp.gamma = 0.9f, c.hp.n_step = 3, c.hp.her_ratio = 0.75f, c.hp.her_strategy = LEARNER_HER_FUTURE;
  c.hp.her_eps = 0.5f, c.hp.her_norm = LEARNER_HER_NORM_INF, c.hp.her_reward_scale = 2, c.hp.her_done_on_success = 1;
  char verr[256];
  ck_assert_msg(learner_config_validate(&c, verr, sizeof verr) == 0, "%s", verr);
  /* the batch: rows 0..11 (floor(0.75 B)) eligible but for rows 1, 4, 7 and
   * 10, rows 12..15 eligible only; the eligible rows taken from the newest
   * slot back, so episodes of several steps come in */
  static const int el_rows[8] = {0, 2, 3, 5, 6, 8, 9, 11};
  int64_t idx[B];
  int ne = 0, nn = 0;
  for (int64_t x = rp.total - 1; x >= rp.total - rp.size && (ne < 12 || nn < 4); x--) {
    const int64_t j = her_slot(x, rp.head, rp.total, rp.cap);
    const int el = her_eligible(rp.ep_first[j], rp.ep_last[j], rp.total, rp.size);
    if (el && ne < 12) {
      idx[ne < 8 ? el_rows[ne] : ne + 4] = j, ne++;
    } else if (!el && nn < 4) {
      idx[3 * nn + 1] = j, nn++;
    }
  }
  ck_assert_msg(ne == 12 && nn == 4, "the ring holds %d eligible and %d ineligible rows of the 12 and 4 needed", ne, nn);
  float x[2 * B * S], r[B], done[B], gd[B];
  for (int i = 0; i < B; i++) {
    memcpy(x + i * S, rp.s + idx[i] * S, sizeof(float) * S);
    memcpy(x + (B + i) * S, rp.s2 + idx[i] * S, sizeof(float) * S);
    r[i] = rp.r[idx[i]], done[i] = rp.done[idx[i]];
  }
  const uint64_t step = 5;
  ck_assert_int_eq(her_batch_cpu(&rp, &c, step, B, idx, x, r, done, gd), 1);
  int relabelled = 0, successes = 0, nstep_rows = 0, tail_eligible = 0;
  for (int i = 0; i < B; i++) {
    const int64_t j = idx[i], cnt = replay_insertion_count(&rp, j);
    const int el = her_eligible(rp.ep_first[j], rp.ep_last[j], rp.total, rp.size);
    const float *xs = x + i * S, *xs2 = x + (B + i) * S;
    if (i < 12 && el) { /* relabelled */
      relabelled++;
      int64_t dsl = her_donor_slot(c.seed, step, i, LEARNER_HER_FUTURE, cnt, rp.ep_first[j], rp.ep_last[j], rp.head,
                                   rp.total, rp.size, rp.cap);
      const float *g = rp.s2 + dsl * S + O;
      double dist = 0;
      for (int k = 0; k < G; k++) {
        double e = fabs((double)rp.s2[j * S + O + k] - g[k]);
        dist = e > dist ? e : dist;
        ck_assert_float_eq(xs[O + G + k], g[k]);  /* the goal in s */
        ck_assert_float_eq(xs2[O + G + k], g[k]); /* and in s' */
        ck_assert_float_eq(xs2[O + k], rp.s2[j * S + O + k]); /* its own s' (m = 1) */
      }
      const int ok = dist <= 0.5;
      successes += ok;
      ck_assert_msg(r[i] == (ok ? 0.0f : -2.0f), "row %d: reward %g, expected %g", i, (double)r[i], ok ? 0.0 : -2.0);
      ck_assert_float_eq(done[i], (float)ok);
      ck_assert_float_eq(gd[i], 0.9f);
      continue;
    }
    tail_eligible += i >= 12 && el;
    /* n-step by brute force over the insertion sequence */
    double R = 0, gg = 1;
    int64_t k = cnt;
    for (int m = 0; m < 3 && k < n_total; m++, k++) {
      R += gg * rew[k];
      gg *= 0.9;
      if (ends[k]) {
        k++;
        break;
      }
    }
    const int64_t lastc = k - 1, lslot = her_slot(lastc, rp.head, rp.total, rp.cap);
    nstep_rows += lastc > cnt;
    ck_assert_msg(fabs(r[i] - R) <= 1e-5 * (1 + fabs(R)), "row %d: return %.7g, brute force %.7g", i, (double)r[i], R);
    ck_assert_msg(fabs(gd[i] - gg) <= 1e-6, "row %d: discount %.7g, expected %.7g", i, (double)gd[i], gg);
    ck_assert_float_eq(done[i], (float)dn[lastc]);
    ck_assert(!memcmp(xs2, rp.s2 + lslot * S, sizeof(float) * S)); /* the m-th s', goal untouched */
    ck_assert(!memcmp(xs, rp.s + j * S, sizeof(float) * S));
  }
  ck_assert_msg(relabelled == 8 && tail_eligible == 4, "relabelled %d, eligible rows past the ratio %d", relabelled,
                tail_eligible);
  ck_assert_msg(successes > 0 && successes < relabelled, "%d of %d relabelled rows succeed: both rules must show",
                successes, relabelled);
  ck_assert_msg(nstep_rows >= 4, "only %d rows took more than one step", nstep_rows);

  /* the batch through the loss, K = 3 with priors, in double */
  net_layout_t L;
  net_layout_init(&L, &c);
  const int64_t P = L.n_params;
  double *on = malloc(sizeof(double) * (size_t)P), *tg = malloc(sizeof(double) * (size_t)P);
  double *prior = malloc(sizeof(double) * (size_t)L.n_prior);
  tu_fill_uniform_f64(on, P, -0.6, 0.6, 4, 1);
  tu_fill_uniform_f64(tg, P, -0.6, 0.6, 4, 2);
  tu_fill_uniform_f64(prior, L.n_prior, -0.6, 0.6, 4, 3);
  dqn_ws_f64_t ws;
  ck_assert_int_eq(dqn_ws_alloc_f64(&ws, &L, B), 0);
  double gdd[B];
  for (int i = 0; i < 2 * B * S; i++) ws.x[i] = x[i];
  for (int i = 0; i < B; i++) ws.a[i] = i % 6, ws.r[i] = r[i], ws.done[i] = done[i], ws.w[i] = 1, gdd[i] = gd[i];
  ws.gdisc = gdd;
  dqn_hp_f64_t hp = {0.9, c.v_min, c.v_max, 0.01, 1, 0.1, c.ensemble_prior_scale, prior};
  double qm;
  dqn_loss_grad_f64(&L, &hp, on, tg, NULL, NULL, &ws, NULL, &qm);
  const int Z = L.Z, D = L.D;
  const double dz = (c.v_max - c.v_min) / (Z - 1.0);
  double worst = 0;
  for (int k = 0; k < K; k++)
    for (int d = 0; d < D; d++) {
      const int n = L.n[d], nz = n * Z;
      for (int i = 0; i < B; i++) {
        /* head k of the online net picks a' at s'_i (its rows B..2B) */
        const double *lo = ws.on.logp[d] + k * ws.on.hstride + (size_t)(B + i) * nz;
        int best = 0;
        double qb = -INFINITY;
        for (int a = 0; a < n; a++) {
          double q = 0;
          for (int z = 0; z < Z; z++) q += exp(lo[a * Z + z]) * (c.v_min + z * dz);
          if (q > qb) qb = q, best = a;
        }
        const size_t kd = (size_t)k * D + d;
        ck_assert_int_eq(ws.best[kd * B + i], best);
        /* head k of the target net scores it; the projection by brute force */
        const double *lt = ws.tg.logp[d] + k * ws.tg.hstride + (size_t)i * nz + (size_t)best * Z;
        double m[64] = {0};
        for (int z = 0; z < Z; z++) {
          double tz = gdd[i] * (1 - ws.done[i]) * (c.v_min + z * dz) + ws.r[i];
          tz = tz < c.v_min ? c.v_min : tz > c.v_max ? c.v_max : tz;
          double bb = (tz - c.v_min) / dz, lw = floor(bb), up = ceil(bb), pz = exp(lt[z]);
          if (lw == up) m[(int)lw] += pz;
          else m[(int)lw] += pz * (up - bb), m[(int)up] += pz * (bb - lw);
        }
        for (int z = 0; z < Z; z++) {
          double e = fabs(ws.m[(kd * B + i) * Z + z] - m[z]);
          worst = e > worst ? e : worst;
        }
      }
    }
  ck_assert_msg(worst <= 1e-12, "a head's target distribution differs from the brute-force projection by %.3g", worst);
  dqn_ws_free_f64(&ws);
  free(on), free(tg), free(prior);
  replay_free(&rp);
}
END_TEST

/* learner-level: a HER + n-step + PER learner (a ring that never wrapped)
 * saved and loaded: the copy's next 20 steps give the same last and mean
 * loss as the original's (==); and without HER and n-step the loss after
 * 25 steps differs */
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

/* with the ensemble (K 3, masks, priors, diversity): after 10 steps the loss
 * is finite and differs from that of the same learner with her_ratio 0 */
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
  tcase_add_test(tc, test_chi2_pvalue);
  tcase_add_test(tc, test_donor_distributions);
  tcase_add_test(tc, test_reward_rules);
  tcase_add_test(tc, test_nstep_brute_force);
  tcase_add_test(tc, test_her_nstep_heads);
  tcase_add_test(tc, test_learner_save_load);
  tcase_add_test(tc, test_learner_ensemble);
  tcase_add_test(tc, test_config_checks);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
