/*
 * test-population.c — populations (kernels/population.h, docs/population.md)
 * on the CPU, and built again as test-gpu-population (POP_TEST_CUDA) on
 * CUDA, where each member is a CUDA learner. The oracle is the lone learner: a member trained in a
 * population (its seed, hyperparameters, data and calls) saves the same
 * bytes as a learner trained alone the same way, whatever the other members
 * do; exploit/explore is checked against the sections of the members' own
 * saved states; bad member indices, factors, files and sizes are refused
 * with a message naming what is wrong, and change nothing.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "learner.h"
#include "backend.h"
#include "population.h"
#include "testutil.h"
#include "feed.h"
#include "dt_window.h"
#ifdef POP_TEST_CUDA
#include "gpu_testutil.h"
#define BE LEARNER_BACKEND_CUDA
#define GROUPED 1 /* CUDA members step in the same launches */
#define CONFIGS 8
#else
#define BE LEARNER_BACKEND_CPU
#define GROUPED 0
#define CONFIGS 3
#endif

enum { N = 3, NMAX = 8 };

/* members of config which's population: 8 for cfgs 5 to 7 (gemm.cu's SER2
 * launches, two row tiles a block, from 8 members on) */
static int npop(int which) { return which >= 5 ? NMAX : N; }

/* cfg 0: NoisyNet + PER; cfg 1: K 3 ensemble heads with priors and masks,
 * attention (2 tokens, 2 heads), 3-step returns; cfg 2: HER (goal 2, ratio
 * 0.5) with 2-step returns, the step's plain launches (cuda_graph 0); cfg 3
 * (CUDA only): the reference network at batch 256 in TF32, NoisyNet + PER —
 * the wgmma tiles and split-K phases; cfg 4 (CUDA only): the same in fp32 (a
 * population adds each tile's split-K parts in one block: gemm.cu's SER);
 * cfgs 5 and 6 (CUDA only): 3 and 4 with 8 members (SER2); cfg 7 (CUDA
 * only): cfg 0 with 8 members, SER2 on odd shapes (partial tiles, 4-byte
 * copies, k short of a chunk) */
static learner_config_t config(int which) {
  learner_config_t c;
  learner_config_default(&c);
  c.state_dim = 6, c.trunk_h1 = 16, c.trunk_h2 = 12, c.value_hidden = 8, c.adv_hidden = 10, c.atoms = 11;
  c.n_branches = 2, c.branch_sizes[0] = 3, c.branch_sizes[1] = 4;
  c.batch = 8, c.replay_capacity = 50, c.seed = 40;
  c.hp.lr = 1e-2f, c.hp.target_period = 3;
  if (which == 0 || which == 7) {
    c.noisy = 1, c.prioritized = 1;
  } else if (which == 2) {
    c.her_goal_dim = 2, c.hp.her_ratio = 0.5f, c.hp.n_step = 2, c.cuda_graph = 0;
  } else if (which >= 3) {
    learner_config_default(&c);
    c.batch = 256, c.replay_capacity = 2000, c.seed = 40, c.tensor_cores = which == 3 || which == 5;
    c.noisy = 1, c.prioritized = 1;
  } else {
    c.ensemble_k = 3, c.ensemble_prior_scale = 1.0f, c.ensemble_mask_p = 0.5f, c.hp.ensemble_diversity = 0.1f;
    c.attn_tokens = 2, c.attn_heads = 2;
    c.hp.n_step = 3;
  }
  return c;
}


static void save_to(learner_t *l, membuf_t *m) {
  char err[256];
  memset(m, 0, sizeof *m);
  ck_assert_msg(learner_save(l, 1, mem_write, m, err, sizeof err) == 0, "%s", err);
}

static int same_bytes(const membuf_t *a, const membuf_t *b) { return a->n == b->n && !memcmp(a->p, b->p, a->n); }

/* member i's own hyperparameters and data: what makes the members differ */
static void member_hparams(learner_t *l, int i) {
  learner_hparams_t hp;
  learner_get_hparams(l, &hp);
  hp.lr *= (float)(1 + i);
  hp.gamma = 0.9f + 0.03f * (float)(i % 3);
  char err[256];
  ck_assert_msg(learner_set_hparams(l, &hp, err, sizeof err) == 0, "%s", err);
}

/* the calls every member, and its lone twin, sees; the population's steps
 * are the pop argument (NULL: step the learner itself) */
static void history_part(learner_t *l, int i, int part) {
  char err[256];
  float s0[64]; /* a state of any config here (state_dim <= 64) */
  for (int k = 0; k < 64; k++) s0[k] = 0.1f * (float)(k % 7) - 0.3f;
  int32_t act[2];
  const int B = learner_config(l)->batch;
  if (part == 0) {
    member_hparams(l, i);
    tu_feed(l, B + 22 + 10 * i, 100 + (uint64_t)i);
  } else {
    tu_feed(l, 25, 200 + (uint64_t)i);
    ck_assert_int_eq(learner_act_episode(l, s0, 1, 1, 7, act, NULL, NULL, err, sizeof err), 0);
  }
}

static void lone_twin(const learner_config_t *c, int i, membuf_t *out) {
  learner_config_t mc = *c;
  mc.seed = c->seed + (uint64_t)i;
  learner_t *l;
  char err[256];
  ck_assert_msg(learner_create(&mc, BE, &l, err, sizeof err) == 0, "%s", err);
  learner_stats_t st;
  history_part(l, i, 0);
  ck_assert_int_eq(learner_step(l, 4, &st, err, sizeof err), 0);
  history_part(l, i, 1);
  ck_assert_int_eq(learner_step(l, 6, &st, err, sizeof err), 0);
  save_to(l, out);
  learner_destroy(l);
}

static learner_pop_t *trained_pop(const learner_config_t *c, int n) {
  learner_pop_t *p;
  char err[256];
  ck_assert_msg(learner_pop_create(c, n, NULL, BE, &p, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(learner_pop_grouped(p), GROUPED); /* the shared launches are what is tested */
  learner_stats_t st[NMAX];
  for (int i = 0; i < n; i++) history_part(learner_pop_member(p, i), i, 0);
  ck_assert_msg(learner_pop_step_until(p, 4, NULL, st, NULL, err, sizeof err) == 0, "%s", err);
  for (int i = 0; i < n; i++) history_part(learner_pop_member(p, i), i, 1);
  ck_assert_msg(learner_pop_step_until(p, 6, NULL, st, NULL, err, sizeof err) == 0, "%s", err);
  for (int i = 0; i < n; i++) ck_assert_int_eq((long long)st[i].step, 10);
  return p;
}

/* each member saves the bytes of its lone twin; the population's file is the
 * members' states between its header and end marker, and loads back to the
 * same bytes */
START_TEST(test_member_is_its_lone_twin) {
  const learner_config_t c = config(_i);
  const int np = npop(_i);
  learner_pop_t *p = trained_pop(&c, np);
  membuf_t mine[NMAX], twin[NMAX];
  for (int i = 0; i < np; i++) {
    save_to(learner_pop_member(p, i), &mine[i]);
    lone_twin(&c, i, &twin[i]);
    ck_assert_msg(same_bytes(&mine[i], &twin[i]), "cfg %d member %d: %zu bytes, its lone twin's %zu, differ", _i, i,
                  mine[i].n, twin[i].n);
  }
  ck_assert_msg(!same_bytes(&mine[0], &mine[1]), "members 0 and 1 are the same: the test could not see a mix-up");
  char err[256];
  membuf_t f = {0};
  ck_assert_msg(learner_pop_save(p, 1, mem_write, &f, err, sizeof err) == 0, "%s", err);
  size_t off = 24;
  ck_assert_int_eq(memcmp(f.p, "DQNDPOP", 8), 0);
  for (int i = 0; i < np; i++) {
    ck_assert_msg(off + twin[i].n <= f.n && !memcmp(f.p + off, twin[i].p, twin[i].n), "member %d's block", i);
    off += twin[i].n;
  }
  ck_assert_int_eq((long long)f.n, (long long)(off + 16));
  ck_assert_int_eq(memcmp(f.p + off, "DQNDPEND", 8), 0);
  learner_pop_t *q;
  ck_assert_msg(learner_pop_load(mem_read, &f, BE, &q, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(learner_pop_size(q), np);
  ck_assert_int_eq(learner_pop_grouped(q), GROUPED);
  membuf_t g = {0};
  ck_assert_msg(learner_pop_save(q, 1, mem_write, &g, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(same_bytes(&f, &g), "loaded and saved again: %zu bytes, was %zu", g.n, f.n);
  /* and both go on the same way */
  learner_stats_t a[NMAX], b[NMAX];
  ck_assert_int_eq(learner_pop_step_until(p, 3, NULL, a, NULL, err, sizeof err), 0);
  ck_assert_int_eq(learner_pop_step_until(q, 3, NULL, b, NULL, err, sizeof err), 0);
  for (int i = 0; i < np; i++) {
    ck_assert_int_eq(memcmp(&a[i].loss_last, &b[i].loss_last, sizeof a[i].loss_last), 0);
    ck_assert_int_eq((long long)b[i].step, 13);
  }
  int n, wr;
  learner_config_t pc;
  f.pos = 0;
  ck_assert_int_eq(learner_pop_peek(mem_read, &f, &pc, &n, &wr, err, sizeof err), 0);
  ck_assert_int_eq(n, np);
  ck_assert_int_eq(wr, 1);
  ck_assert_int_eq((long long)pc.seed, (long long)c.seed);
  for (int i = 0; i < np; i++) free(mine[i].p), free(twin[i].p);
  free(f.p), free(g.p);
  learner_pop_destroy(p);
  learner_pop_destroy(q);
}
END_TEST

/* one member's state: its bytes found in the population's file, and a lone
 * learner's state loaded into a member (its lone twin's: then the member saves
 * the twin's bytes); bad indices and shapes refused */
START_TEST(test_one_member) {
  const learner_config_t c = config(0);
  learner_pop_t *p = trained_pop(&c, N);
  char err[256];
  membuf_t f = {0}, twin;
  ck_assert_msg(learner_pop_save(p, 1, mem_write, &f, err, sizeof err) == 0, "%s", err);
  lone_twin(&c, 1, &twin);
  uint64_t off, len;
  uint32_t crc;
  ck_assert_msg(learner_pop_member_range(mem_read, &f, 1, &off, &len, &crc, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq((long long)len, (long long)twin.n);
  ck_assert_msg(!memcmp(f.p + off, twin.p, twin.n), "member 1's bytes in the file are not its twin's");
  ck_assert_uint_eq(crc, learner_crc32(0, twin.p, twin.n));
  f.pos = 0;
  ck_assert_int_eq(learner_pop_member_range(mem_read, &f, N, &off, &len, &crc, err, sizeof err), LEARNER_EINVAL);
  ck_assert_str_eq(err, "member: 3 is outside [0, 3)");
  /* loaded into a fresh population's member 1: the twin's bytes */
  learner_pop_t *q;
  ck_assert_int_eq(learner_pop_create(&c, N, NULL, BE, &q, err, sizeof err), 0);
  learner_t *l;
  twin.pos = 0;
  ck_assert_msg(learner_load(mem_read, &twin, BE, &l, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(learner_pop_load_member(q, 1, l, err, sizeof err) == 0, "%s", err);
  membuf_t now;
  save_to(learner_pop_member(q, 1), &now);
  ck_assert_msg(same_bytes(&now, &twin), "the loaded member does not save its state's bytes");
  ck_assert_int_eq(learner_pop_load_member(q, -1, l, err, sizeof err), LEARNER_EINVAL);
  learner_config_t other = c;
  other.atoms = 13;
  learner_t *o;
  ck_assert_int_eq(learner_create(&other, BE, &o, err, sizeof err), 0);
  ck_assert_int_eq(learner_pop_load_member(q, 1, o, err, sizeof err), LEARNER_EINVAL);
  ck_assert_str_eq(err, "state: its config differs from the population's in more than seed and hyperparameters");
  learner_destroy(o), learner_destroy(l);
  free(f.p), free(twin.p), free(now.p);
  learner_pop_destroy(q);
  learner_pop_destroy(p);
}
END_TEST

/* a population of one is a learner: its file is learner_save's, and a
 * learner's state loads as a population of one */
START_TEST(test_population_of_one) {
  const learner_config_t c = config(0);
  learner_pop_t *p;
  char err[256];
  ck_assert_msg(learner_pop_create(&c, 1, NULL, BE, &p, err, sizeof err) == 0, "%s", err);
  tu_feed(learner_pop_member(p, 0), 20, 9);
  ck_assert_int_eq(learner_pop_step_until(p, 2, NULL, NULL, NULL, err, sizeof err), 0);
  membuf_t f = {0}, m;
  ck_assert_int_eq(learner_pop_save(p, 1, mem_write, &f, err, sizeof err), 0);
  save_to(learner_pop_member(p, 0), &m);
  ck_assert_msg(same_bytes(&f, &m), "a population of one saves %zu bytes, its learner %zu", f.n, m.n);
  learner_pop_t *q;
  ck_assert_msg(learner_pop_load(mem_read, &m, BE, &q, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(learner_pop_size(q), 1);
  membuf_t g = {0};
  ck_assert_int_eq(learner_pop_save(q, 1, mem_write, &g, err, sizeof err), 0);
  ck_assert(same_bytes(&g, &m));
  free(f.p), free(m.p), free(g.p);
  learner_pop_destroy(p);
  learner_pop_destroy(q);
}
END_TEST

/* a member that diverges (lr 10, weight decay 10) stops alone with its last
 * good state, which is its lone twin's; the others train on, each its twin */
START_TEST(test_member_diverges_alone) {
  learner_config_t c = config(0);
  c.noisy = 0, c.prioritized = 0;
  learner_pop_t *p;
  char err[256];
  ck_assert_msg(learner_pop_create(&c, N, NULL, BE, &p, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(learner_pop_grouped(p), GROUPED);
  learner_hparams_t wild;
  learner_get_hparams(learner_pop_member(p, 1), &wild);
  wild.lr = 10, wild.weight_decay = 10;
  for (int i = 0; i < N; i++) tu_feed(learner_pop_member(p, i), 40, 300 + (uint64_t)i);
  ck_assert_int_eq(learner_pop_set_hparams(p, 1, &wild, err, sizeof err), 0);
  learner_stats_t st[N];
  int rcs[N];
  int rc = learner_pop_step_until(p, 30, NULL, st, rcs, err, sizeof err);
  ck_assert_msg(rc == LEARNER_EDIVERGED, "rc %d: %s", rc, err);
  ck_assert_msg(strstr(err, "member 1: "), "%s", err);
  ck_assert_int_eq(rcs[0], 0);
  ck_assert_int_eq(rcs[1], LEARNER_EDIVERGED);
  ck_assert_int_eq(rcs[2], 0);
  ck_assert(learner_pop_diverged(p, 1) && !learner_pop_diverged(p, 0) && !learner_pop_diverged(p, 2));
  const long long bad_steps = (long long)st[1].step;
  ck_assert_msg(bad_steps < 30, "member 1 ran %lld steps", bad_steps);
  /* the next Step skips it: the others advance, it stays */
  ck_assert_int_eq(learner_pop_step_until(p, 2, NULL, st, rcs, err, sizeof err), 0);
  ck_assert_int_eq((long long)st[0].step, 32);
  ck_assert_int_eq((long long)st[1].step, bad_steps);
  ck_assert_int_eq(st[1].steps_run, 0);
  for (int i = 0; i < N; i++) {
    learner_config_t mc = c;
    mc.seed = c.seed + (uint64_t)i;
    learner_t *l;
    ck_assert_int_eq(learner_create(&mc, BE, &l, err, sizeof err), 0);
    tu_feed(l, 40, 300 + (uint64_t)i);
    if (i == 1) ck_assert_int_eq(learner_set_hparams(l, &wild, err, sizeof err), 0);
    learner_stats_t ls;
    ck_assert_int_eq(learner_step(l, 30, &ls, err, sizeof err), i == 1 ? LEARNER_EDIVERGED : 0);
    if (i != 1) ck_assert_int_eq(learner_step(l, 2, &ls, err, sizeof err), 0);
    membuf_t a, b;
    save_to(l, &a);
    save_to(learner_pop_member(p, i), &b);
    ck_assert_msg(same_bytes(&a, &b), "member %d differs from its lone twin", i);
    free(a.p), free(b.p);
    learner_destroy(l);
  }
  /* new hyperparameters take the mark off (the daemon's SetHyperparams
   * resumes a diverged trainer), and a copy of a healthy member trains */
  learner_hparams_t calm = wild;
  calm.lr = 1e-3f, calm.weight_decay = 0;
  ck_assert_int_eq(learner_pop_set_hparams(p, 1, &calm, err, sizeof err), 0);
  ck_assert(!learner_pop_diverged(p, 1));
  ck_assert_msg(learner_pop_copy_member(p, 1, 0, 0, NULL, 0, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(learner_pop_step_until(p, 1, NULL, st, rcs, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq((long long)st[1].step, 33);
  ck_assert_int_eq((long long)st[0].step, 33);
  learner_pop_destroy(p);
}
END_TEST

/* the payload of section tag in a saved state (the walk of learner_state_inspect) */
typedef struct {
  uint32_t tag;
  uint64_t off, len;
  int found;
} find_t;
static void find_cb(void *ctx, const learner_state_section_t *s) {
  find_t *f = ctx;
  if (s->tag == f->tag) f->off = s->offset + 16, f->len = s->len, f->found = 1;
}
static const unsigned char *payload(membuf_t *m, uint32_t tag, uint64_t *len) {
  find_t f = {tag, 0, 0, 0};
  learner_state_header_t h;
  char err[256];
  m->pos = 0;
  ck_assert_msg(learner_state_inspect(mem_read, m, &h, find_cb, &f, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(f.found, "section %u missing", tag);
  *len = f.len;
  return m->p + f.off;
}
static int same_section(membuf_t *a, membuf_t *b, uint32_t tag) {
  uint64_t la, lb;
  const unsigned char *pa = payload(a, tag, &la), *pb = payload(b, tag, &lb);
  return la == lb && !memcmp(pa, pb, la);
}

/* exploit and explore: member 2 takes member 0's network, optimiser and
 * counters (and, asked, its replay), keeps its seed, and its lr and gamma
 * are scaled; checked section by section against both members' saved
 * states from before the copy */
START_TEST(test_copy_member) {
  const int with_replay = _i;
  const learner_config_t c = config(0);
  learner_pop_t *p = trained_pop(&c, N);
  membuf_t src, dst0, dst1;
  save_to(learner_pop_member(p, 0), &src);
  save_to(learner_pop_member(p, 2), &dst0);
  learner_hparams_t hs, hd;
  learner_get_hparams(learner_pop_member(p, 0), &hs);
  char err[256];
  const learner_pop_factor_t f[] = {{"lr", 0.5}, {"gamma", 1.01}};
  ck_assert_msg(learner_pop_copy_member(p, 2, 0, with_replay, f, 2, err, sizeof err) == 0, "%s", err);
  save_to(learner_pop_member(p, 2), &dst1);
  const uint32_t net[] = {3, 4, 5, 6}; /* online, target, Adam m and v */
  for (int k = 0; k < 4; k++) ck_assert_msg(same_section(&dst1, &src, net[k]), "section %u not copied", net[k]);
  const uint32_t rep[] = {10, 11, 12, 13, 14, 15, 16};
  for (int k = 0; k < 7; k++)
    ck_assert_msg(same_section(&dst1, with_replay ? &src : &dst0, rep[k]), "replay section %u: not %s", rep[k],
                  with_replay ? "the source's" : "its own");
  learner_stats_t a, b;
  ck_assert_int_eq(learner_get_stats(learner_pop_member(p, 2), &a), 0);
  ck_assert_int_eq(learner_get_stats(learner_pop_member(p, 0), &b), 0);
  ck_assert_int_eq((long long)a.step, (long long)b.step);
  ck_assert_int_eq(memcmp(&a.loss_last, &b.loss_last, sizeof a.loss_last), 0);
  learner_get_hparams(learner_pop_member(p, 2), &hd);
  ck_assert(hd.lr == (float)((double)hs.lr * 0.5));
  ck_assert(hd.gamma == (float)((double)hs.gamma * 1.01));
  ck_assert_int_eq((long long)learner_config(learner_pop_member(p, 2))->seed, (long long)c.seed + 2);
  /* and it trains: a copy that left the PER tree or counters stale would not */
  learner_stats_t st[N];
  ck_assert_msg(learner_pop_step_until(p, 3, NULL, st, NULL, err, sizeof err) == 0, "%s", err);
  ck_assert(isfinite(st[2].loss_last));
  free(src.p), free(dst0.p), free(dst1.p);
  learner_pop_destroy(p);
}
END_TEST

/* a member started over (the search driver's refilled slot): a state of a
 * fresh learner of its seed, saved with its (empty) replay, loaded into it
 * empties its replay and makes it that learner, so that fed and stepped as a
 * new trial it saves its lone twin's bytes; the same state saved without its
 * replay leaves the member's replay as it was. cfg 0: PER's tree emptied;
 * cfg 2: HER's episode bounds */
START_TEST(test_member_starts_over) {
  const learner_config_t c = config(_i ? 2 : 0);
  learner_pop_t *p = trained_pop(&c, N);
  learner_config_t mc = c;
  mc.seed = c.seed + 1;
  learner_t *fresh, *l;
  char err[256];
  ck_assert_msg(learner_create(&mc, BE, &fresh, err, sizeof err) == 0, "%s", err);
  membuf_t with = {0}, without = {0}, before, now, twin;
  ck_assert_msg(learner_save(fresh, 1, mem_write, &with, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(learner_save(fresh, 0, mem_write, &without, err, sizeof err) == 0, "%s", err);
  learner_destroy(fresh);
  learner_t *m1 = learner_pop_member(p, 1);
  save_to(m1, &before);
  ck_assert_msg(learner_load(mem_read, &without, BE, &l, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(learner_pop_load_member(p, 1, l, err, sizeof err) == 0, "%s", err);
  learner_destroy(l);
  save_to(m1, &now);
  ck_assert_msg(!same_section(&now, &before, SEC_ONLINE), "the network was not loaded");
  for (uint32_t tag = SEC_R_S; tag <= SEC_R_EPEND; tag++)
    if (tag != SEC_R_PRIO || c.prioritized)
      ck_assert_msg(same_section(&now, &before, tag), "a state without its replay changed replay section %u", tag);
  free(now.p);
  with.pos = 0;
  ck_assert_msg(learner_load(mem_read, &with, BE, &l, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(learner_pop_load_member(p, 1, l, err, sizeof err) == 0, "%s", err);
  learner_destroy(l);
  save_to(m1, &now);
  ck_assert_msg(same_bytes(&now, &with), "the member started over saves %zu bytes, the fresh learner %zu", now.n,
                with.n);
  free(now.p);
  learner_stats_t st[N];
  ck_assert_int_eq(learner_pop_step_until(p, 1, NULL, st, NULL, err, sizeof err), LEARNER_EEMPTY);
  /* a new trial in it: the lone twin's history */
  history_part(m1, 1, 0);
  ck_assert_msg(learner_pop_step_until(p, 4, NULL, st, NULL, err, sizeof err) == 0, "%s", err);
  history_part(m1, 1, 1);
  ck_assert_msg(learner_pop_step_until(p, 6, NULL, st, NULL, err, sizeof err) == 0, "%s", err);
  save_to(m1, &now);
  lone_twin(&c, 1, &twin);
  ck_assert_msg(same_bytes(&now, &twin), "the member started over and trained is not its lone twin");
  free(with.p), free(without.p), free(before.p), free(now.p), free(twin.p);
  learner_pop_destroy(p);
}
END_TEST

/* a stop before the call: the first member runs no step, no later member is
 * called, and nothing changes; in shared launches every member is stopped
 * at once. Each member's parameters, moments and replay (with its PER
 * leaves) are its bytes from before the call, section by section; its whole
 * state too where nothing ran for it (not the stopped members' last
 * statistics, steps_run 0) */
START_TEST(test_stop_changes_nothing) {
  const learner_config_t c = config(0);
  learner_pop_t *p = trained_pop(&c, N);
  membuf_t before[N];
  for (int i = 0; i < N; i++) save_to(learner_pop_member(p, i), &before[i]);
  *learner_pop_stop_flag(p) = 1;
  learner_stop_t stop = {0, 0};
  learner_stats_t st[N];
  int rcs[N];
  char err[256];
  ck_assert_int_eq(learner_pop_step_until(p, 5, &stop, st, rcs, err, sizeof err), LEARNER_ESTOPPED);
  ck_assert_int_eq(stop.why, LEARNER_STOP_FLAG);
  ck_assert_int_eq(rcs[0], LEARNER_ESTOPPED);
  ck_assert_int_eq(rcs[1], GROUPED ? LEARNER_ESTOPPED : 0);
  for (int i = 0; i < N; i++) {
    ck_assert_int_eq(st[i].steps_run, 0);
    ck_assert_int_eq((long long)st[i].step, 10);
    membuf_t now;
    save_to(learner_pop_member(p, i), &now);
    const uint32_t kept[] = {3, 4, 5, 6, 10, 11, 12, 13, 14, 15, 16}; /* state_format.h's tags */
    for (size_t k = 0; k < sizeof kept / sizeof kept[0]; k++)
      ck_assert_msg(same_section(&now, &before[i], kept[k]), "member %d: section %u changed after the stop", i, kept[k]);
    ck_assert_msg(i == 0 || GROUPED || same_bytes(&now, &before[i]), "member %d changed after the stop", i);
    free(now.p), free(before[i].p);
  }
  *learner_pop_stop_flag(p) = 0;
  ck_assert_int_eq(learner_pop_step_until(p, 1, &stop, st, rcs, err, sizeof err), 0);
  learner_pop_destroy(p);
}
END_TEST

/* the Decision Transformer in a population (issue 30 item 8): each member
 * pre-trains its own DT on its own episodes with its own DT hyperparameters
 * (dt_lr, dt_warmup, dt_clip, dt_weight_decay) and seed, in the same launches
 * on CUDA (every member along the grid's z, docs/population.md), and saves
 * the bytes of a lone twin that saw the same calls. DT config 0: small
 * windows in fp32 (the attention a block a window); on CUDA also 1: the
 * reference DT sizes (context 20, embed 128, 3 layers, batch 64) in TF32,
 * 2: context 80, whose windows take the block-a-query attention, and 3:
 * config 1 at batch 140, whose 8,400 tokens a member put the weight
 * gradients on the transposing TMA tile's register-operand form (its own
 * bias-sum order, chosen by a member's shapes alone: dt_wgmma.cu's
 * DW_TMT_RS; config 1, whose members together pass that count, checks
 * that the rule counts a member's tokens alone). */
#ifdef POP_TEST_CUDA
#define DT_CONFIGS 4
#else
#define DT_CONFIGS 1
#endif
static learner_config_t dt_config(int which) {
  learner_config_t c = config(0);
  c.noisy = 0, c.prioritized = 0, c.replay_capacity = 400;
  c.dt_layers = 2, c.dt_context = 4, c.dt_embed = 16, c.dt_heads = 2, c.dt_max_ep_len = 30, c.dt_batch = 12;
  c.dt_rtg_scale = 4, c.hp.dt_lr = 3e-3f, c.hp.dt_warmup = 6;
  if (which == 1 || which == 3) { /* the reference network, whose shapes the TF32 step covers */
    learner_config_default(&c);
    c.replay_capacity = 3000, c.seed = 40, c.tensor_cores = 1;
    c.dt_layers = 3, c.dt_context = 20, c.dt_embed = 128, c.dt_heads = 1, c.dt_max_ep_len = 200, c.dt_batch = 64;
    c.dt_rtg_scale = 4, c.hp.dt_lr = 3e-3f, c.hp.dt_warmup = 6;
    if (which == 3) c.dt_batch = 140;
  } else if (which == 2) {
    c.dt_layers = 1, c.dt_context = 80, c.dt_max_ep_len = 120, c.dt_batch = 4;
  }
  return c;
}

/* member i's DT hyperparameters and episodes (part 0), more episodes (part 1) */
static void dt_history(learner_t *l, int i, int part) {
  char err[256];
  if (part == 0) {
    learner_hparams_t hp;
    learner_get_hparams(l, &hp);
    hp.dt_lr *= (float)(1 + i), hp.dt_warmup = 3 + 2 * i;
    hp.dt_clip = 0.1f + 0.2f * (float)i, hp.dt_weight_decay = 1e-3f * (float)i;
    ck_assert_msg(learner_set_hparams(l, &hp, err, sizeof err) == 0, "%s", err);
    tu_feed(l, 150 + 20 * i, 300 + (uint64_t)i);
  } else {
    tu_feed(l, 60, 400 + (uint64_t)i);
  }
}

START_TEST(test_dt_member_is_its_lone_twin) {
  const learner_config_t c = dt_config(_i);
  char err[256];
  learner_pop_t *p;
  ck_assert_msg(learner_pop_create(&c, N, NULL, BE, &p, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(learner_pop_grouped(p), GROUPED);
  learner_dt_stats_t st[N], lt;
  for (int i = 0; i < N; i++) dt_history(learner_pop_member(p, i), i, 0);
  ck_assert_msg(learner_pop_pretrain_dt(p, 12, NULL, st, err, sizeof err) == 0, "%s", err);
  for (int i = 0; i < N; i++) dt_history(learner_pop_member(p, i), i, 1);
  ck_assert_msg(learner_pop_pretrain_dt(p, 7, NULL, st, err, sizeof err) == 0, "%s", err);
  /* CUDA: the DT steps in shared launches (population.c's member-by-member
   * fallback would pass the twin test too) */
  ck_assert_int_eq(learner_pop_dt_grouped(p), GROUPED);
  for (int i = 0; i < N; i++) {
    ck_assert_int_eq((long long)st[i].dt_step, 19);
    ck_assert_int_eq(st[i].steps_run, 7);
    ck_assert_msg(i == 0 || st[i].loss_mean != st[0].loss_mean, "members 0 and %d pre-trained alike", i);
    learner_config_t mc = c;
    mc.seed = c.seed + (uint64_t)i;
    learner_t *l;
    ck_assert_msg(learner_create(&mc, BE, &l, err, sizeof err) == 0, "%s", err);
    dt_history(l, i, 0);
    ck_assert_int_eq(learner_pretrain_dt(l, 12, NULL, &lt, err, sizeof err), 0);
    dt_history(l, i, 1);
    ck_assert_int_eq(learner_pretrain_dt(l, 7, NULL, &lt, err, sizeof err), 0);
    ck_assert_msg(lt.loss_mean == st[i].loss_mean && lt.grad_norm_last == st[i].grad_norm_last,
                  "DT config %d member %d: loss %.9g norm %.9g, alone %.9g %.9g", _i, i, st[i].loss_mean,
                  st[i].grad_norm_last, lt.loss_mean, lt.grad_norm_last);
    membuf_t mine, twin;
    save_to(learner_pop_member(p, i), &mine), save_to(l, &twin);
    ck_assert_msg(same_bytes(&mine, &twin), "DT config %d: member %d differs from its lone twin", _i, i);
    free(mine.p), free(twin.p);
    learner_destroy(l);
  }
  printf("DT population %d: %d members, each its lone twin's bytes (losses %.6f %.6f %.6f)\n", _i, N,
         (double)st[0].loss_mean, (double)st[1].loss_mean, (double)st[2].loss_mean);
  learner_pop_destroy(p);
}
END_TEST

/* A member whose pre-training step draws no window (one ended episode among
 * 4,000 open slots: every draw misses it; the oracle is the window rule's
 * draws, dt_window.h) stops alone: the call answers LEARNER_EEMPTY naming it,
 * and the other members ran every step, each its lone twin's bytes. */
START_TEST(test_dt_member_without_window_stops_alone) {
  learner_config_t c = dt_config(0);
  c.replay_capacity = 4000;
  char err[512];
  learner_pop_t *p;
  ck_assert_msg(learner_pop_create(&c, N, NULL, BE, &p, err, sizeof err) == 0, "%s", err);
  const int n = 4000, S = c.state_dim;
  float *s = calloc((size_t)n * S, sizeof(float)), *r = calloc(n, sizeof(float));
  int32_t *a = calloc(n, sizeof(int32_t));
  uint8_t *dn = calloc(n, 1);
  dn[0] = 1; /* slot 0: an episode of one step that ended; slots 1..3999: one open episode */
  learner_transitions_t tr = {n, s, a, r, s, dn, NULL, NULL};
  for (int i = 0; i < N; i++)
    if (i == 1) ck_assert_int_eq(learner_submit(learner_pop_member(p, i), &tr, err, sizeof err), 0);
    else dt_history(learner_pop_member(p, i), i, 0);
  free(s), free(r), free(a), free(dn);
  int hits = 0;
  for (int i = 0; i < c.dt_batch; i++)
    for (int k = 0; k < DT_TRIES; k++)
      hits += philox_below(philox_draw(c.seed + 1, PHILOX_STREAM_DT, 0, (uint32_t)(i * DT_TRIES + k)).v[0], n) == 0;
  ck_assert_msg(hits == 0, "member 1's draws hit slot 0 %d times: pick another seed for this case", hits);
  learner_dt_stats_t st[N], lt;
  ck_assert_int_eq(learner_pop_pretrain_dt(p, 5, NULL, st, err, sizeof err), LEARNER_EEMPTY);
  ck_assert_msg(strstr(err, "member 1: pre-training step 1 drew no window"), "%s", err);
  for (int i = 0; i < N; i++) {
    ck_assert_int_eq(st[i].steps_run, i == 1 ? 0 : 5);
    if (i == 1) continue;
    learner_config_t mc = c;
    mc.seed = c.seed + (uint64_t)i;
    learner_t *l;
    ck_assert_msg(learner_create(&mc, BE, &l, err, sizeof err) == 0, "%s", err);
    dt_history(l, i, 0);
    ck_assert_int_eq(learner_pretrain_dt(l, 5, NULL, &lt, err, sizeof err), 0);
    membuf_t mine, twin;
    save_to(learner_pop_member(p, i), &mine), save_to(l, &twin);
    ck_assert_msg(same_bytes(&mine, &twin), "member %d differs from its lone twin", i);
    free(mine.p), free(twin.p);
    learner_destroy(l);
  }
  learner_pop_destroy(p);
}
END_TEST

/* bad input: each refused with a message naming it, nothing changed */
START_TEST(test_bad_input) {
  const learner_config_t c = config(0);
  char err[256];
  learner_pop_t *p;
  ck_assert_int_eq(learner_pop_create(&c, 0, NULL, BE, &p, err, sizeof err), LEARNER_EINVAL);
  ck_assert_str_eq(err, "population: 0 is outside [1, 1024]");
  learner_config_t big = c;
  big.replay_capacity = 1 << 30;
  ck_assert_int_eq(learner_pop_create(&big, 1000, NULL, BE, &p, err, sizeof err), LEARNER_ENOMEM);
  ck_assert_msg(strstr(err, "population: ") && strstr(err, "replay_capacity"), "%s", err);
  ck_assert_msg(learner_pop_create(&c, N, NULL, BE, &p, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(learner_pop_check_member(p, 3, err, sizeof err), LEARNER_EINVAL);
  ck_assert_str_eq(err, "member: 3 is outside [0, 3)");
  ck_assert_int_eq(learner_pop_check_member(p, -1, err, sizeof err), LEARNER_EINVAL);
  ck_assert_ptr_null(learner_pop_member(p, 3));
  /* an empty member: nothing runs, the message names it */
  for (int i = 0; i < N; i++)
    if (i != 1) tu_feed(learner_pop_member(p, i), 20, 7);
  learner_stats_t st[N];
  ck_assert_int_eq(learner_pop_step_until(p, 2, NULL, st, NULL, err, sizeof err), LEARNER_EEMPTY);
  ck_assert_msg(strstr(err, "member 1: replay holds 0 transitions"), "%s", err);
  learner_stats_t s0;
  ck_assert_int_eq(learner_get_stats(learner_pop_member(p, 0), &s0), 0);
  ck_assert_int_eq((long long)s0.step, 0);
  tu_feed(learner_pop_member(p, 1), 20, 8);
  /* copies that cannot be */
  membuf_t before;
  save_to(learner_pop_member(p, 2), &before);
  const learner_pop_factor_t notfloat[] = {{"n_step", 2}}, unknown[] = {{"nope", 2}}, toobig[] = {{"gamma", 10}};
  ck_assert_int_eq(learner_pop_copy_member(p, 1, 1, 0, NULL, 0, err, sizeof err), LEARNER_EINVAL);
  ck_assert_str_eq(err, "member: dst and src are both 1");
  ck_assert_int_eq(learner_pop_copy_member(p, 2, 5, 0, NULL, 0, err, sizeof err), LEARNER_EINVAL);
  ck_assert_str_eq(err, "member: 5 is outside [0, 3)");
  ck_assert_int_eq(learner_pop_copy_member(p, 2, 0, 0, notfloat, 1, err, sizeof err), LEARNER_EINVAL);
  ck_assert_str_eq(err, "factors: 'n_step' is not a float hyperparameter");
  ck_assert_int_eq(learner_pop_copy_member(p, 2, 0, 0, unknown, 1, err, sizeof err), LEARNER_EINVAL);
  ck_assert_int_eq(learner_pop_copy_member(p, 2, 0, 0, toobig, 1, err, sizeof err), LEARNER_EINVAL);
  ck_assert_msg(strstr(err, "gamma"), "%s", err);
  membuf_t after;
  save_to(learner_pop_member(p, 2), &after);
  ck_assert_msg(same_bytes(&before, &after), "a refused copy changed member 2");
  /* files: truncated anywhere, a bad end marker, a bad count */
  ck_assert_int_eq(learner_pop_step_until(p, 1, NULL, st, NULL, err, sizeof err), 0);
  membuf_t f = {0};
  ck_assert_int_eq(learner_pop_save(p, 1, mem_write, &f, err, sizeof err), 0);
  learner_pop_t *q;
  for (size_t cut = 0; cut < f.n; cut += f.n / 97 + 1) {
    membuf_t t = {f.p, cut, cut, 0};
    ck_assert_msg(learner_pop_load(mem_read, &t, BE, &q, err, sizeof err) < 0, "cut at %zu", cut);
    ck_assert_ptr_null(q);
  }
  f.p[f.n - 8] ^= 1; /* the count after the end marker */
  f.pos = 0;
  ck_assert_int_eq(learner_pop_load(mem_read, &f, BE, &q, err, sizeof err), LEARNER_ECORRUPT);
  ck_assert_str_eq(err, "state: bad population end marker");
  f.p[f.n - 8] ^= 1;
  f.p[16] = 1, f.pos = 0; /* a population of one in the header */
  ck_assert_int_eq(learner_pop_load(mem_read, &f, BE, &q, err, sizeof err), LEARNER_ECORRUPT);
  ck_assert_msg(strstr(err, "a population of 1 members"), "%s", err);
  free(before.p), free(after.p), free(f.p);
  learner_pop_destroy(p);
}
END_TEST

int main(void) {
#ifdef POP_TEST_CUDA
  tu_gpu_or_skip();
#endif
  Suite *s = suite_create("population");
  TCase *tc = tcase_create(BE == LEARNER_BACKEND_CPU ? "cpu" : "cuda");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_member_is_its_lone_twin, 0, CONFIGS);
  tcase_add_test(tc, test_population_of_one);
  tcase_add_test(tc, test_one_member);
  tcase_add_test(tc, test_member_diverges_alone);
  tcase_add_loop_test(tc, test_copy_member, 0, 2);
  tcase_add_loop_test(tc, test_member_starts_over, 0, 2);
  tcase_add_test(tc, test_stop_changes_nothing);
  tcase_add_loop_test(tc, test_dt_member_is_its_lone_twin, 0, DT_CONFIGS);
  tcase_add_test(tc, test_dt_member_without_window_stops_alone);
  tcase_add_test(tc, test_bad_input);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
