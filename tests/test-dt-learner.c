/*
 * test-dt-learner.c — the Decision Transformer as a module of the learner
 * (issue 30; docs/learner.md §16): its config fields, PretrainDT against the
 * spec's own pre-training step (kernels/cpu/dt.h, itself pinned by the golden
 * case in test-dt.c) on the same replay, Act by return conditioning against
 * dt_act_f32 on a window padded by hand, a checkpoint round trip that
 * continues bit-identically, the trunk1 hand-over, and bad input.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu/dt.h"
#include "cpu/replay.h"
#include "dt_window.h"
#include "feed.h"
#include "learner.h"
#include "learner_impl.h"
#include "model.h"
#include "testutil.h"

static learner_config_t dt_config(void) {
  learner_config_t c;
  learner_config_default(&c);
  c.state_dim = 6;
  c.trunk_h1 = 16;
  c.trunk_h2 = 12;
  c.value_hidden = 8;
  c.adv_hidden = 10;
  c.atoms = 11;
  c.n_branches = 2;
  c.branch_sizes[0] = 3;
  c.branch_sizes[1] = 4;
  c.batch = 8;
  c.replay_capacity = 300;
  c.seed = 5;
  c.dt_layers = 2;
  c.dt_context = 4;
  c.dt_embed = 16;
  c.dt_heads = 2;
  c.dt_max_ep_len = 10;
  c.dt_rtg_scale = 4;
  c.dt_batch = 6;
  c.hp.dt_lr = 1e-2f;
  c.hp.dt_warmup = 3;
  return c;
}

static learner_t *make(const learner_config_t *c) {
  learner_t *l;
  char err[256];
  ck_assert_msg(learner_create(c, LEARNER_BACKEND_CPU, &l, err, sizeof err) == 0, "%s", err);
  return l;
}

static float *dt_params(learner_t *l) {
  const int64_t n = learner_section_bytes(l, SEC_DT_PARAMS);
  ck_assert_int_eq(n, learner_config_num_dt(learner_config(l)) * 4);
  float *p = malloc((size_t)n);
  ck_assert_int_eq(learner_section_read(l, SEC_DT_PARAMS, 0, n, p), 0);
  return p;
}

static membuf_t save(learner_t *l) {
  membuf_t m = {0};
  char err[256];
  ck_assert_msg(learner_save(l, 1, mem_write, &m, err, sizeof err) == 0, "%s", err);
  return m;
}

START_TEST(test_config_fields) {
  learner_config_t c, d;
  learner_config_default(&c);
  char text[8192], err[256];
  learner_config_to_text(&c, text, sizeof text);
  ck_assert_msg(!strstr(text, "dt_"), "a default config's text names no DT field (states of older builds re-save as "
                                      "they were)");
  c = dt_config();
  c.dt_handover = LEARNER_DT_HANDOVER_NONE;
  size_t n = learner_config_to_text(&c, text, sizeof text);
  ck_assert_ptr_nonnull(strstr(text, "dt_layers=2\n"));
  ck_assert_ptr_nonnull(strstr(text, "dt_lr=0.00999999978\n"));
  ck_assert_ptr_null(strstr(text, "dt_clip")); /* at its default 0.25 */
  ck_assert_msg(learner_config_from_text(&d, text, n, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(learner_config_hash(&c), learner_config_hash(&d));
  ck_assert_int_eq(d.dt_layers, 2);
  ck_assert_int_eq(d.dt_batch, 6);
  ck_assert(d.dt_rtg_scale == 4.0f);
  ck_assert_int_eq(learner_config_set(&d, "dt_handover", "trunk1", err, sizeof err), 0);
  ck_assert_int_eq(d.dt_handover, LEARNER_DT_HANDOVER_TRUNK1);
  /* bad fields, each named */
  struct {
    const char *field, *value, *want;
  } bad[] = {{"dt_heads", "3", "dt_heads: 3 does not divide dt_embed 16"},
             {"dt_handover", "trunk1", "dt_handover: trunk1 needs dt_embed (16) = trunk_h1 (32)"},
             {"dt_context", "0", "dt_context: 0 is outside"},
             {"dt_layers", "17", "dt_layers: 17 is outside"},
             {"dt_handover", "trunk2", "dt_handover: 'trunk2' is not one of none, trunk1"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    learner_config_t b = dt_config();
    b.trunk_h1 = 32;
    err[0] = 0;
    int rc = learner_config_set(&b, bad[i].field, bad[i].value, err, sizeof err);
    if (!rc) rc = learner_config_validate(&b, err, sizeof err);
    ck_assert_int_eq(rc, LEARNER_EINVAL);
    ck_assert_msg(strstr(err, bad[i].want), "%s=%s: '%s' (wanted '%s')", bad[i].field, bad[i].value, err, bad[i].want);
  }
  learner_config_t h;
  learner_config_default(&h);
  h.dt_handover = LEARNER_DT_HANDOVER_TRUNK1;
  ck_assert_int_eq(learner_config_validate(&h, err, sizeof err), LEARNER_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "dt_handover: trunk1 needs a Decision Transformer"));
}
END_TEST

/* one PretrainDT step = the spec's dt_train_step on a replay holding the same
 * transitions, from the same initial parameters (bit for bit) */
START_TEST(test_pretrain_matches_spec) {
  learner_config_t c = dt_config();
  learner_t *l = make(&c);
  tu_feed(l, 120, 3);
  /* the spec's side: its own registry, replay and trainer */
  static model_t reg;
  model_desc_t d;
  char err[256];
  model_desc_from_config(&d, &c);
  ck_assert_int_eq(model_build(&reg, &d, err, sizeof err), 0);
  dt_layout_t L;
  ck_assert_msg(dt_layout_init(&L, &reg, c.dt_context, c.dt_heads, err, sizeof err) == 0, "%s", err);
  dt_trainer_t t;
  ck_assert_int_eq(dt_trainer_init(&t, &L, &reg, c.dt_batch, c.seed), 0);
  float *p0 = dt_params(l);
  ck_assert_int_eq(memcmp(p0, t.p, sizeof(float) * (size_t)L.n_params), 0);
  replay_t rp;
  ck_assert_int_eq(replay_init(&rp, c.replay_capacity, c.state_dim, c.prioritized, c.per_alpha), 0);
  {
    learner_t *twin = make(&c);
    tu_feed(twin, 120, 3);
    const int S = c.state_dim, n = 120;
    float *s = malloc(sizeof(float) * n * S), *s2 = malloc(sizeof(float) * n * S), *r = malloc(sizeof(float) * n);
    int32_t *a = malloc(sizeof(int32_t) * n);
    uint8_t *dn = malloc(n);
    int64_t *ep = malloc(sizeof(int64_t) * n);
    ck_assert_int_eq(learner_read_replay(twin, 0, n, s, a, r, s2, dn, ep), 0);
    learner_transitions_t tr = {n, s, a, r, s2, dn, ep, NULL};
    replay_add(&rp, &tr);
    free(s), free(s2), free(r), free(a), free(dn), free(ep);
    learner_destroy(twin);
  }
  const dt_hparams_t hp = {c.hp.dt_lr,      c.hp.dt_weight_decay, c.hp.dt_clip, c.hp.adam_beta1, c.hp.adam_beta2,
                           c.hp.adam_eps,   c.dt_rtg_scale,       c.hp.dt_warmup};
  learner_dt_stats_t st;
  for (int k = 0; k < 3; k++) {
    dt_step_stats_t ss;
    ck_assert_int_eq(dt_train_step(&t, &rp, &hp, &ss), 0);
    ck_assert_msg(learner_pretrain_dt(l, 1, NULL, &st, err, sizeof err) == 0, "%s", err);
    ck_assert(st.loss_last == (float)ss.loss);
    ck_assert(st.grad_norm_last == (float)ss.grad_norm);
    ck_assert(st.lr_last == ss.lr);
    ck_assert_int_eq(st.steps_run, 1);
    ck_assert_int_eq((long long)st.dt_step, k + 1);
  }
  ck_assert(st.lr_last == c.hp.dt_lr); /* the warm-up of 3 steps is over at the third */
  float *p1 = dt_params(l);
  ck_assert_msg(memcmp(p1, t.p, sizeof(float) * (size_t)L.n_params) == 0, "the learner's DT parameters after 3 steps "
                                                                         "differ from the spec's");
  ck_assert(memcmp(p1, p0, sizeof(float) * (size_t)L.n_params) != 0);
  free(p0), free(p1);
  dt_trainer_free(&t);
  replay_free(&rp);
  learner_destroy(l);
}
END_TEST

/* Act by return conditioning = dt_act_f32 on the window padded by hand, with
 * the return-to-go divided by dt_rtg_scale; the last action is not read */
START_TEST(test_act_matches_spec) {
  learner_config_t c = dt_config();
  learner_t *l = make(&c);
  tu_feed(l, 120, 4);
  char err[256];
  ck_assert_msg(learner_pretrain_dt(l, 20, NULL, NULL, err, sizeof err) == 0, "%s", err);
  static model_t reg;
  model_desc_t d;
  model_desc_from_config(&d, &c);
  ck_assert_int_eq(model_build(&reg, &d, err, sizeof err), 0);
  dt_layout_t L;
  ck_assert_int_eq(dt_layout_init(&L, &reg, c.dt_context, c.dt_heads, err, sizeof err), 0);
  float *p = dt_params(l);
  const int K = c.dt_context, S = c.state_dim;
  int differ = 0, first = -1;
  for (int n = 1; n <= K; n++)
    for (int trial = 0; trial < 8; trial++) {
      float st[4 * 6], rtg[4];
      int32_t a[4], ts[4];
      tu_fill_uniform_f32(st, n * S, -1, 1, 7, (uint64_t)(n * 8 + trial));
      for (int t = 0; t < n; t++) rtg[t] = (float)(trial - 3) * 2.5f - t, a[t] = (t * 5 + trial) % 12, ts[t] = t + trial;
      learner_dt_window_t w = {n, rtg, st, a, ts};
      int32_t got, got2;
      ck_assert_msg(learner_act_dt(l, &w, &got, err, sizeof err) == 0, "%s", err);
      a[n - 1] = 11 - a[n - 1]; /* the action being chosen is not an input */
      ck_assert_int_eq(learner_act_dt(l, &w, &got2, err, sizeof err), 0);
      ck_assert_int_eq(got, got2);
      float ps[4 * 6] = {0}, pr[4] = {0}, pm[4] = {0};
      int32_t pa[4] = {0}, pt[4] = {0};
      for (int t = 0; t < n; t++) {
        const int q = K - n + t;
        memcpy(ps + q * S, st + t * S, sizeof(float) * S);
        pr[q] = rtg[t] / c.dt_rtg_scale, pa[q] = t < n - 1 ? a[t] : 0, pt[q] = ts[t], pm[q] = 1;
      }
      dt_batch_t b = {1, ps, pr, pm, pa, pt};
      const int32_t want = dt_act_f32(&L, p, &b);
      ck_assert_int_eq(got, want);
      if (first < 0) first = got;
      differ |= got != first;
    }
  ck_assert_msg(differ, "every window gave the same action: the check would not see a wrong window");
  free(p);
  learner_destroy(l);
}
END_TEST

/* save after 3 pre-training steps, load, 3 more on each: the same bytes */
START_TEST(test_checkpoint_round_trip) {
  learner_config_t c = dt_config();
  learner_t *l = make(&c);
  tu_feed(l, 150, 6);
  char err[256];
  ck_assert_int_eq(learner_pretrain_dt(l, 3, NULL, NULL, err, sizeof err), 0);
  ck_assert_int_eq(learner_step(l, 2, NULL, err, sizeof err), 0);
  membuf_t m = save(l);
  learner_t *r;
  m.pos = 0;
  ck_assert_msg(learner_load(mem_read, &m, LEARNER_BACKEND_CPU, &r, err, sizeof err) == 0, "%s", err);
  membuf_t m2 = save(r);
  ck_assert_msg(m2.n == m.n && !memcmp(m2.p, m.p, m.n), "a loaded DT state re-saves differently");
  learner_dt_stats_t a, b;
  ck_assert_int_eq(learner_pretrain_dt(l, 3, NULL, &a, err, sizeof err), 0);
  ck_assert_int_eq(learner_pretrain_dt(r, 3, NULL, &b, err, sizeof err), 0);
  ck_assert_int_eq((long long)a.dt_step, 6);
  ck_assert_int_eq((long long)b.dt_step, 6);
  ck_assert(a.loss_last == b.loss_last);
  membuf_t x = save(l), y = save(r);
  ck_assert_msg(x.n == y.n && !memcmp(x.p, y.p, x.n), "the loaded learner's next pre-training steps differ");
  /* the state names the DT's sections */
  learner_state_header_t h;
  x.pos = 0;
  ck_assert_msg(learner_state_inspect(mem_read, &x, &h, NULL, NULL, err, sizeof err) == 0, "%s", err);
  ck_assert_ptr_nonnull(strstr(h.config_text, "dt_layers=2"));
  /* a DT parameter that is not finite: refused on load */
  membuf_t bad = save(l);
  float nanv = NAN;
  const int64_t n_dt = learner_config_num_dt(&c);
  size_t at = 0;
  for (size_t i = 0; i + 16 <= bad.n; i++) /* the DT parameters' section header: tag 20, length n_dt floats */
    if (bad.p[i] == SEC_DT_PARAMS && !bad.p[i + 1] && !bad.p[i + 2] && !bad.p[i + 3] && !bad.p[i + 4] &&
        bad.p[i + 8] == (unsigned char)((n_dt * 4) & 255) && bad.p[i + 9] == (unsigned char)(((n_dt * 4) >> 8) & 255)) {
      at = i + 16;
      break;
    }
  ck_assert(at > 0);
  memcpy(bad.p + at, &nanv, 4);
  const uint32_t crc = learner_crc32c(0, bad.p + at, (size_t)n_dt * 4); /* its CRC made right: the finite check */
  for (int i = 0; i < 4; i++) bad.p[at + (size_t)n_dt * 4 + i] = (unsigned char)(crc >> (8 * i));
  bad.pos = 0;
  learner_t *z = NULL;
  int rc = learner_load(mem_read, &bad, LEARNER_BACKEND_CPU, &z, err, sizeof err);
  ck_assert_int_eq(rc, LEARNER_ECORRUPT);
  ck_assert_msg(strstr(err, "not finite"), "%s", err);
  ck_assert_ptr_null(z);
  /* a DT step counter of 2^64 - 1: refused on load (Adam's bias correction
   * at a wrapped step would divide by 0), as the DQN's counter is */
  free(bad.p);
  bad = save(l);
  at = 0;
  for (size_t i = 0; i + 16 <= bad.n && !at; i++) /* the DT counters' header: tag 23, 8 bytes */
    if (bad.p[i] == SEC_DT_COUNTERS && !bad.p[i + 1] && !bad.p[i + 2] && !bad.p[i + 3] && !bad.p[i + 4] &&
        bad.p[i + 8] == 8 && !bad.p[i + 9] && !bad.p[i + 10] && !bad.p[i + 11] && !bad.p[i + 15])
      at = i + 16;
  ck_assert(at > 0);
  memset(bad.p + at, 0xff, 8);
  const uint32_t crc8 = learner_crc32c(0, bad.p + at, 8);
  for (int i = 0; i < 4; i++) bad.p[at + 8 + i] = (unsigned char)(crc8 >> (8 * i));
  bad.pos = 0;
  rc = learner_load(mem_read, &bad, LEARNER_BACKEND_CPU, &z, err, sizeof err);
  ck_assert_int_eq(rc, LEARNER_ECORRUPT);
  ck_assert_msg(strstr(err, "dt counters: a step past 2^62"), "%s", err);
  ck_assert_ptr_null(z);
  free(m.p), free(m2.p), free(x.p), free(y.p), free(bad.p);
  learner_destroy(l), learner_destroy(r);
}
END_TEST

/* dt_handover=trunk1: after PretrainDT, before any DQN step, trunk1 of the
 * online and target networks is the DT's state embedding; not after */
START_TEST(test_handover) {
  learner_config_t c = dt_config();
  c.trunk_h1 = c.dt_embed;
  c.dt_handover = LEARNER_DT_HANDOVER_TRUNK1;
  learner_t *l = make(&c);
  tu_feed(l, 120, 8);
  char err[256];
  learner_dt_stats_t st;
  ck_assert_int_eq(learner_pretrain_dt(l, 4, NULL, &st, err, sizeof err), 0);
  ck_assert_int_eq(st.handed_over, 1);
  static model_t reg;
  model_desc_t d;
  model_desc_from_config(&d, &c);
  ck_assert_int_eq(model_build(&reg, &d, err, sizeof err), 0);
  const model_param_t *ws = model_find(&reg, "dt.embed_state.weight"), *bs = model_find(&reg, "dt.embed_state.bias");
  const model_param_t *wt = model_find(&reg, "trunk1.weight"), *bt = model_find(&reg, "trunk1.bias");
  float *p = dt_params(l);
  const int64_t P = learner_config_num_params(&c);
  float *on = malloc(sizeof(float) * P), *tg = malloc(sizeof(float) * P);
  ck_assert_int_eq(learner_get_params(l, 0, on, P), 0);
  ck_assert_int_eq(learner_get_params(l, 1, tg, P), 0);
  const size_t nw = (size_t)model_param_count(ws), nb = (size_t)model_param_count(bs);
  ck_assert_int_eq(nw, c.dt_embed * c.state_dim);
  for (int w = 0; w < 2; w++) {
    const float *q = w ? tg : on;
    ck_assert(!memcmp(q + wt->offset, p + ws->offset, nw * 4));
    ck_assert(!memcmp(q + bt->offset, p + bs->offset, nb * 4));
  }
  /* once the DQN has stepped, pre-training no longer overwrites trunk1 */
  ck_assert_int_eq(learner_step(l, 1, NULL, err, sizeof err), 0);
  ck_assert_int_eq(learner_pretrain_dt(l, 2, NULL, &st, err, sizeof err), 0);
  ck_assert_int_eq(st.handed_over, 0);
  float *p2 = dt_params(l), *on2 = malloc(sizeof(float) * P);
  ck_assert_int_eq(learner_get_params(l, 0, on2, P), 0);
  ck_assert(memcmp(on2 + wt->offset, p2 + ws->offset, nw * 4) != 0);
  free(p), free(p2), free(on), free(on2), free(tg);
  learner_destroy(l);
}
END_TEST

START_TEST(test_bad_input) {
  char err[256];
  learner_config_t c = dt_config();
  learner_t *l = make(&c);
  /* no whole ended episode: refused, nothing changes */
  {
    const int S = c.state_dim, n = 40;
    float *s = calloc((size_t)n * S, sizeof(float)), *r = calloc(n, sizeof(float));
    int32_t *a = calloc(n, sizeof(int32_t));
    uint8_t *dn = calloc(n, 1);
    learner_transitions_t tr = {n, s, a, r, s, dn, NULL, NULL};
    ck_assert_int_eq(learner_submit(l, &tr, err, sizeof err), 0);
    free(s), free(r), free(a), free(dn);
  }
  float *p0 = dt_params(l);
  learner_dt_stats_t st;
  ck_assert_int_eq(learner_pretrain_dt(l, 5, NULL, &st, err, sizeof err), LEARNER_EEMPTY);
  ck_assert_ptr_nonnull(strstr(err, "no whole episode that has ended"));
  ck_assert_int_eq(st.steps_run, 0);
  ck_assert_int_eq((long long)st.dt_step, 0);
  float *p1 = dt_params(l);
  ck_assert(!memcmp(p0, p1, (size_t)learner_section_bytes(l, SEC_DT_PARAMS)));
  free(p0), free(p1);
  ck_assert_int_eq(learner_pretrain_dt(l, 0, NULL, NULL, err, sizeof err), LEARNER_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "n: 0"));
  /* one ended episode among many open slots: step 1's every draw misses it
   * (the oracle: the window rule's draws, dt_window.h, the ended episode being
   * slot 0 alone), so the step is refused, saying why, and changes nothing */
  {
    learner_config_t cw = dt_config();
    cw.replay_capacity = 4000;
    learner_t *lw = make(&cw);
    const int S = cw.state_dim, n = 4000;
    float *s = calloc((size_t)n * S, sizeof(float)), *r = calloc(n, sizeof(float));
    int32_t *a = calloc(n, sizeof(int32_t));
    uint8_t *dn = calloc(n, 1);
    dn[0] = 1; /* slot 0: an episode of one step that ended; slots 1..3999: one open episode */
    learner_transitions_t tr = {n, s, a, r, s, dn, NULL, NULL};
    ck_assert_int_eq(learner_submit(lw, &tr, err, sizeof err), 0);
    free(s), free(r), free(a), free(dn);
    int hits = 0;
    for (int i = 0; i < cw.dt_batch; i++)
      for (int k = 0; k < DT_TRIES; k++)
        hits += philox_below(philox_draw(cw.seed, PHILOX_STREAM_DT, 0, (uint32_t)(i * DT_TRIES + k)).v[0], n) == 0;
    ck_assert_msg(hits == 0, "the draws of seed %llu hit slot 0 %d times: pick another seed for this case",
                  (unsigned long long)cw.seed, hits);
    float *q0 = dt_params(lw);
    ck_assert_int_eq(learner_pretrain_dt(lw, 3, NULL, &st, err, sizeof err), LEARNER_EEMPTY);
    ck_assert_msg(strstr(err, "pre-training step 1 drew no window: each of its 6 rows missed, in all 16 draws") &&
                      strstr(err, "among the replay's 4000"),
                  "%s", err);
    ck_assert_int_eq(st.steps_run, 0);
    float *q1 = dt_params(lw);
    ck_assert(!memcmp(q0, q1, (size_t)learner_section_bytes(lw, SEC_DT_PARAMS)));
    free(q0), free(q1);
    learner_destroy(lw);
  }
  /* the window's fields */
  float s[4 * 6] = {0}, rtg[4] = {1, 1, 1, 1};
  int32_t a[4] = {0, 1, 2, 3}, ts[4] = {0, 1, 2, 3}, out;
  learner_dt_window_t w = {5, rtg, s, a, ts};
  ck_assert_int_eq(learner_act_dt(l, &w, &out, err, sizeof err), LEARNER_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "steps: 5 is outside [1, dt_context = 4]"));
  w.n = 4;
  rtg[2] = INFINITY;
  ck_assert_int_eq(learner_act_dt(l, &w, &out, err, sizeof err), LEARNER_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "rtg[2]: not finite"));
  rtg[2] = 1, ts[1] = -1;
  ck_assert_int_eq(learner_act_dt(l, &w, &out, err, sizeof err), LEARNER_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "timesteps[1]: -1 is negative"));
  ts[1] = 1, a[0] = 12;
  ck_assert_int_eq(learner_act_dt(l, &w, &out, err, sizeof err), LEARNER_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "actions[0]: 12 is outside [0, 12)"));
  a[0] = 0, a[3] = -7; /* the last step's action is not read */
  ck_assert_msg(learner_act_dt(l, &w, &out, err, sizeof err) == 0, "%s", err);
  s[7] = NAN;
  ck_assert_int_eq(learner_act_dt(l, &w, &out, err, sizeof err), LEARNER_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "states[1][1]: not finite"));
  learner_destroy(l);
  /* a learner without a DT */
  learner_config_t plain = dt_config();
  plain.dt_layers = 0;
  l = make(&plain);
  ck_assert_int_eq(learner_pretrain_dt(l, 1, NULL, NULL, err, sizeof err), LEARNER_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "PretrainDT: this trainer has no Decision Transformer"));
  ck_assert_int_eq(learner_section_bytes(l, SEC_DT_PARAMS), 0);
  learner_destroy(l);
}
END_TEST

/* a return-to-go that the windows cannot form in float: the step's loss is
 * not finite, and the refusal says why, naming dt_rtg_scale where a larger
 * scale would do (the oracle: the sums by hand, in float, from each
 * episode's end back); rewards of 1 train */
static int pretrain_with_rewards(float reward, float scale, char *err, size_t errlen) {
  learner_config_t c = dt_config();
  c.dt_rtg_scale = scale;
  learner_t *l = make(&c);
  const int S = c.state_dim, n = 20;
  float *st = calloc((size_t)n * S, sizeof(float)), *r = malloc(n * sizeof(float));
  int32_t *a = calloc(n, sizeof(int32_t));
  uint8_t *dn = calloc(n, 1);
  for (int i = 0; i < n; i++) r[i] = reward, dn[i] = i % 4 == 3, st[i * S] = 0.1f * (float)(i % 4);
  learner_transitions_t tr = {n, st, a, r, st, dn, NULL, NULL};
  ck_assert_int_eq(learner_submit(l, &tr, err, errlen), 0);
  free(st), free(r), free(a), free(dn);
  learner_dt_stats_t ds;
  int rc = learner_pretrain_dt(l, 2, NULL, &ds, err, errlen);
  learner_destroy(l);
  return rc;
}

START_TEST(test_rtg_overflow) {
  char err[512];
  /* 3e38 + 3e38 is past float's range: counts 19 (3e38) then 18 (inf) */
  ck_assert(isfinite(3e38f) && !isfinite(3e38f + 3e38f));
  ck_assert_int_eq(pretrain_with_rewards(3e38f, 4, err, sizeof err), LEARNER_EDIVERGED);
  ck_assert_msg(strstr(err, "pre-training step 1 diverged") &&
                    strstr(err, "the rewards of a stored episode sum past float's range from insertion count 18"),
                "%s", err);
  /* 1e33 / 1e-6 = 1e39: the return-to-go of the last count alone overflows */
  ck_assert(isfinite(4e33f) && !isfinite(1e33f / 1e-6f));
  ck_assert_int_eq(pretrain_with_rewards(1e33f, 1e-6f, err, sizeof err), LEARNER_EDIVERGED);
  ck_assert_msg(strstr(err, "a stored episode's return-to-go 1e+33 (from insertion count 19) over dt_rtg_scale "
                            "1e-06 overflows float: raise dt_rtg_scale"),
                "%s", err);
  ck_assert_msg(pretrain_with_rewards(1, 4, err, sizeof err) == 0, "%s", err);
}
END_TEST

int main(void) {
  Suite *s = suite_create("dt-learner");
  TCase *tc = tcase_create("dt-learner");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_config_fields);
  tcase_add_test(tc, test_pretrain_matches_spec);
  tcase_add_test(tc, test_act_matches_spec);
  tcase_add_test(tc, test_checkpoint_round_trip);
  tcase_add_test(tc, test_handover);
  tcase_add_test(tc, test_bad_input);
  tcase_add_test(tc, test_rtg_overflow);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
