/*
 * test-members.c — a population over the wire (CreateTrainer population,
 * the member field, CopyMember; docs/population.md), against a real daemon on
 * the CPU. The oracle is the lone trainer: member i of a population trains
 * exactly as a trainer of its own with seed 42 + i and the same
 * hyperparameters, data and calls (Step stats, Act's actions and Q, bit for
 * bit), and the population's checkpoint is the lone trainers' checkpoints
 * between its header and end marker. Bad member indices, copies and
 * populations are refused with their codes; a member that diverges stops
 * alone; continuous training trains the member submitted to; a restarted
 * daemon restores the population.
 */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "harness.h"
#include "testutil.h"

enum { P = 3 };

/* small_fields with this seed, and the replay's capacity when cap is given */
static int create_cap(dqnd_client_t *c, const char *name, int population, uint64_t seed, const char *cap,
                      Dqnd__V1__Reply **rep) {
  Dqnd__V1__Field f[32], *fp[32];
  char seedf[40];
  int n = 0;
  for (int i = 0; i < N_SMALL; i++) {
    if (!strncmp(small_fields[i], "seed=", 5)) continue;
    if (cap && !strncmp(small_fields[i], "replay_capacity=", 16)) continue;
    char *eq = strchr(small_fields[i], '=');
    static char names[32][40];
    snprintf(names[n], sizeof names[n], "%.*s", (int)(eq - small_fields[i]), small_fields[i]);
    dqnd__v1__field__init(&f[n]);
    f[n].name = names[n], f[n].value = eq + 1, fp[n] = &f[n], n++;
  }
  snprintf(seedf, sizeof seedf, "%llu", (unsigned long long)seed);
  dqnd__v1__field__init(&f[n]);
  f[n].name = "seed", f[n].value = seedf, fp[n] = &f[n], n++;
  if (cap) {
    dqnd__v1__field__init(&f[n]);
    f[n].name = "replay_capacity", f[n].value = (char *)cap, fp[n] = &f[n], n++;
  }
  Dqnd__V1__CreateTrainer m = DQND__V1__CREATE_TRAINER__INIT;
  m.name = (char *)name, m.config = fp, m.n_config = (size_t)n, m.backend = "cpu", m.population = (uint32_t)population;
  Dqnd__V1__Request r = DQND__V1__REQUEST__INIT;
  r.command_case = DQND__V1__REQUEST__COMMAND_CREATE_TRAINER, r.create_trainer = &m;
  return dqnd_call(c, &r, rep);
}

static int create(dqnd_client_t *c, const char *name, int population, uint64_t seed, Dqnd__V1__Reply **rep) {
  return create_cap(c, name, population, seed, NULL, rep);
}

static int submit_member(dqnd_client_t *c, const char *name, int member, const batch_t *b) {
  Dqnd__V1__SubmitTransitions m = DQND__V1__SUBMIT_TRANSITIONS__INIT;
  m.name = (char *)name, m.count = (uint32_t)b->n, m.member = (uint32_t)member;
  m.states = (ProtobufCBinaryData){sizeof(float) * (size_t)b->n * S_DIM, (uint8_t *)b->s};
  m.next_states = (ProtobufCBinaryData){sizeof(float) * (size_t)b->n * S_DIM, (uint8_t *)b->s2};
  m.actions = (ProtobufCBinaryData){sizeof(int32_t) * (size_t)b->n, (uint8_t *)b->a};
  m.rewards = (ProtobufCBinaryData){sizeof(float) * (size_t)b->n, (uint8_t *)b->r};
  m.dones = (ProtobufCBinaryData){(size_t)b->n, (uint8_t *)b->d};
  Dqnd__V1__Request r = DQND__V1__REQUEST__INIT;
  r.command_case = DQND__V1__REQUEST__COMMAND_SUBMIT_TRANSITIONS, r.submit_transitions = &m;
  Dqnd__V1__Reply *rep = NULL;
  int rc = dqnd_call(c, &r, &rep);
  dqnd_reply_free(rep);
  return rc;
}

static int set_lr(dqnd_client_t *c, const char *name, int member, const char *lr, const char *wd,
                  Dqnd__V1__Reply **rep) {
  Dqnd__V1__Field f[2], *fp[2] = {&f[0], &f[1]};
  dqnd__v1__field__init(&f[0]);
  dqnd__v1__field__init(&f[1]);
  f[0].name = "lr", f[0].value = (char *)lr;
  f[1].name = "weight_decay", f[1].value = (char *)(wd ? wd : "0");
  Dqnd__V1__SetHyperparams m = DQND__V1__SET_HYPERPARAMS__INIT;
  m.name = (char *)name, m.hparams = fp, m.n_hparams = wd ? 2 : 1, m.member = (uint32_t)member;
  Dqnd__V1__Request r = DQND__V1__REQUEST__INIT;
  r.command_case = DQND__V1__REQUEST__COMMAND_SET_HYPERPARAMS, r.set_hyperparams = &m;
  return dqnd_call(c, &r, rep);
}

static int set_field(dqnd_client_t *c, const char *name, int member, const char *field, const char *value) {
  Dqnd__V1__Field f = DQND__V1__FIELD__INIT, *fp = &f;
  f.name = (char *)field, f.value = (char *)value;
  Dqnd__V1__SetHyperparams m = DQND__V1__SET_HYPERPARAMS__INIT;
  m.name = (char *)name, m.hparams = &fp, m.n_hparams = 1, m.member = (uint32_t)member;
  Dqnd__V1__Request r = DQND__V1__REQUEST__INIT;
  r.command_case = DQND__V1__REQUEST__COMMAND_SET_HYPERPARAMS, r.set_hyperparams = &m;
  Dqnd__V1__Reply *rep = NULL;
  int rc = dqnd_call(c, &r, &rep);
  dqnd_reply_free(rep);
  return rc;
}

static int step(dqnd_client_t *c, const char *name, int n, Dqnd__V1__Reply **rep) {
  Dqnd__V1__Step m = DQND__V1__STEP__INIT;
  m.name = (char *)name, m.n = (uint32_t)n;
  Dqnd__V1__Request r = DQND__V1__REQUEST__INIT;
  r.command_case = DQND__V1__REQUEST__COMMAND_STEP, r.step = &m;
  return dqnd_call(c, &r, rep);
}

static int stats(dqnd_client_t *c, const char *name, int member, Dqnd__V1__Reply **rep) {
  Dqnd__V1__GetStats m = DQND__V1__GET_STATS__INIT;
  m.name = (char *)name, m.member = (uint32_t)member;
  Dqnd__V1__Request r = DQND__V1__REQUEST__INIT;
  r.command_case = DQND__V1__REQUEST__COMMAND_GET_STATS, r.get_stats = &m;
  return dqnd_call(c, &r, rep);
}

static int act(dqnd_client_t *c, const char *name, int member, Dqnd__V1__Reply **rep) {
  static const float s[2 * S_DIM] = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f, -0.7f, 0.8f, 0.2f, -0.1f, 0.0f, 0.5f};
  Dqnd__V1__Act m = DQND__V1__ACT__INIT;
  m.name = (char *)name, m.count = 2, m.want_q = 1, m.member = (uint32_t)member;
  m.states = (ProtobufCBinaryData){sizeof s, (uint8_t *)s};
  Dqnd__V1__Request r = DQND__V1__REQUEST__INIT;
  r.command_case = DQND__V1__REQUEST__COMMAND_ACT, r.act = &m;
  return dqnd_call(c, &r, rep);
}

static int copy(dqnd_client_t *c, const char *name, int dst, int src, const char *fname, const char *factor,
                Dqnd__V1__Reply **rep) {
  Dqnd__V1__Field f = DQND__V1__FIELD__INIT, *fp = &f;
  f.name = (char *)fname, f.value = (char *)factor;
  Dqnd__V1__CopyMember m = DQND__V1__COPY_MEMBER__INIT;
  m.name = (char *)name, m.dst = (uint32_t)dst, m.src = (uint32_t)src;
  if (fname) m.factors = &fp, m.n_factors = 1;
  Dqnd__V1__Request r = DQND__V1__REQUEST__INIT;
  r.command_case = DQND__V1__REQUEST__COMMAND_COPY_MEMBER, r.copy_member = &m;
  return dqnd_call(c, &r, rep);
}

static const char *field(const Dqnd__V1__TrainerInfo *ti, const char *name) {
  for (size_t i = 0; i < ti->n_config; i++)
    if (!strcmp(ti->config[i]->name, name)) return ti->config[i]->value;
  return "";
}

static float fieldf(const Dqnd__V1__TrainerInfo *ti, const char *name) { return (float)strtod(field(ti, name), NULL); }

/* the same stats, bit for bit */
static void same_stats(const Dqnd__V1__TrainerStats *a, const Dqnd__V1__TrainerStats *b, const char *what) {
  ck_assert_msg(a->step == b->step && a->replay_size == b->replay_size && !memcmp(&a->loss_last, &b->loss_last, 4) &&
                    !memcmp(&a->grad_norm_last, &b->grad_norm_last, 4) && !memcmp(&a->loss_mean, &b->loss_mean, 4) &&
                    !memcmp(&a->q_mean, &b->q_mean, 4),
                "%s: step %llu/%llu loss %.9g/%.9g", what, (unsigned long long)a->step, (unsigned long long)b->step,
                (double)a->loss_last, (double)b->loss_last);
}

#define OK(call)                                                                                                  \
  do {                                                                                                           \
    int rc_ = (call);                                                                                            \
    ck_assert_msg(rc_ == 0, "%s: %d (%s)", #call, rc_, dqnd_last_error(c));                                       \
  } while (0)
#define FREE(rep) (dqnd_reply_free(rep), (rep) = NULL)

START_TEST(test_population_over_the_wire) {
  daemon_t d = {0};
  start_daemon(&d);
  dqnd_client_t *c = connect_to(&d);
  Dqnd__V1__Reply *rep = NULL;
  OK(create(c, "pop", P, 42, &rep));
  ck_assert_int_eq(rep->trainer->population, P);
  ck_assert(rep->trainer->created);
  FREE(rep);
  OK(create(c, "pop", P, 42, &rep)); /* idempotent */
  ck_assert(!rep->trainer->created);
  FREE(rep);
  ck_assert_int_eq(create(c, "pop", 2, 42, &rep), 6);
  ck_assert_msg(strstr(dqnd_last_error(c), "exists with a population of 3"), "%s", dqnd_last_error(c));
  FREE(rep);
  ck_assert_int_eq(create(c, "big", 1025, 42, &rep), 3);
  ck_assert_str_eq(dqnd_last_error(c), "population: 1025 is outside [1, 1024]");
  FREE(rep);
  /* a population that cannot fit: refused before anything is allocated */
  ck_assert_int_eq(create_cap(c, "huge", 1024, 42, "2147483648", &rep), 8);
  ck_assert_msg(strstr(dqnd_last_error(c), "population: ") && strstr(dqnd_last_error(c), "replay_capacity"), "%s",
                dqnd_last_error(c));
  FREE(rep);
  /* the lone twins: seed 42 + i */
  for (int i = 0; i < P; i++) {
    char name[16];
    snprintf(name, sizeof name, "lone%d", i);
    OK(create(c, name, 0, 42 + (uint64_t)i, &rep));
    ck_assert_int_eq(rep->trainer->population, 1);
    FREE(rep);
  }
  /* member-wise data and hyperparameters, the same to each twin */
  batch_t *b = malloc(sizeof *b);
  for (int i = 0; i < P; i++) {
    char name[16];
    snprintf(name, sizeof name, "lone%d", i);
    make_batch(b, 40 + 10 * i, 10 + (uint64_t)i);
    OK(submit_member(c, "pop", i, b));
    OK(submit_member(c, name, 0, b));
  }
  ck_assert_int_eq(submit_member(c, "pop", 3, b), 3);
  ck_assert_str_eq(dqnd_last_error(c), "member: 3 is outside [0, 3) (trainer 'pop' has 3 members)");
  ck_assert_int_eq(submit_member(c, "lone0", 1, b), 3);
  ck_assert_str_eq(dqnd_last_error(c), "member: 1 is outside [0, 1) (trainer 'lone0' has 1 member)");
  OK(set_lr(c, "pop", 1, "0.02", NULL, &rep));
  ck_assert_int_eq(rep->trainer->member, 1);
  ck_assert(fieldf(rep->trainer, "lr") == 0.02f);
  FREE(rep);
  OK(set_lr(c, "lone1", 0, "0.02", NULL, &rep));
  FREE(rep);
  OK(stats(c, "pop", 2, &rep));
  ck_assert_int_eq(rep->trainer->member, 2);
  ck_assert_int_eq(rep->trainer->stats->replay_size, 60);
  ck_assert_str_eq(field(rep->trainer, "seed"), "44");
  ck_assert(fieldf(rep->trainer, "lr") == 0.01f);
  FREE(rep);

  /* Step advances every member, each as its twin */
  Dqnd__V1__Reply *pr = NULL, *lr = NULL;
  OK(step(c, "pop", 5, &pr));
  ck_assert_int_eq(pr->step->n_members, P);
  ck_assert_int_eq(pr->step->n_diverged, 0);
  same_stats(pr->step->stats, pr->step->members[0], "StepResult.stats is member 0's");
  for (int i = 0; i < P; i++) {
    char name[16];
    snprintf(name, sizeof name, "lone%d", i);
    OK(step(c, name, 5, &lr));
    ck_assert_int_eq(pr->step->members[i]->step, 5);
    same_stats(pr->step->members[i], lr->step->stats, name);
    FREE(lr);
    Dqnd__V1__Reply *a1 = NULL, *a2 = NULL;
    OK(act(c, "pop", i, &a1));
    OK(act(c, name, 0, &a2));
    ck_assert_msg(a1->act->q.len == a2->act->q.len && !memcmp(a1->act->q.data, a2->act->q.data, a1->act->q.len) &&
                      !memcmp(a1->act->actions.data, a2->act->actions.data, a1->act->actions.len),
                  "member %d's Act differs from its twin's", i);
    FREE(a1), FREE(a2);
  }
  ck_assert_msg(memcmp(&pr->step->members[0]->loss_last, &pr->step->members[1]->loss_last, 4),
                "members 0 and 1 trained alike: the comparison would not see a mix-up");
  FREE(pr);

  /* the checkpoint: the twins' files between the header and the end marker */
  dqnd_checkpoint_t pk, lk[P];
  OK(dqnd_save_checkpoint(c, "pop", 0, &pk));
  size_t pn;
  char *pf = read_file(pk.path, &pn);
  ck_assert_ptr_nonnull(pf);
  ck_assert_int_eq(memcmp(pf, "DQNDPOP", 8), 0);
  size_t off = 24;
  for (int i = 0; i < P; i++) {
    char name[16];
    snprintf(name, sizeof name, "lone%d", i);
    OK(dqnd_save_checkpoint(c, name, 0, &lk[i]));
    size_t ln;
    char *lf = read_file(lk[i].path, &ln);
    ck_assert_ptr_nonnull(lf);
    ck_assert_msg(off + ln <= pn && !memcmp(pf + off, lf, ln), "member %d's block is not %s's checkpoint", i, name);
    off += ln;
    free(lf);
  }
  ck_assert_int_eq((long long)pn, (long long)(off + 16));
  free(pf);

  /* exploit and explore */
  OK(copy(c, "pop", 2, 0, "lr", "0.5", &rep));
  ck_assert_int_eq(rep->trainer->member, 2);
  ck_assert(fieldf(rep->trainer, "lr") == (float)(0.01f * 0.5));
  ck_assert_str_eq(field(rep->trainer, "seed"), "44");
  ck_assert_int_eq(rep->trainer->stats->step, 5);
  ck_assert_int_eq(rep->trainer->stats->replay_size, 60); /* its own replay kept */
  FREE(rep);
  ck_assert_int_eq(copy(c, "pop", 1, 1, NULL, NULL, &rep), 3);
  ck_assert_str_eq(dqnd_last_error(c), "dst: 1 is src too");
  FREE(rep);
  ck_assert_int_eq(copy(c, "pop", 5, 0, NULL, NULL, &rep), 3);
  FREE(rep);
  ck_assert_int_eq(copy(c, "pop", 2, 0, "n_step", "2", &rep), 3);
  ck_assert_str_eq(dqnd_last_error(c), "factors: 'n_step' is not a float hyperparameter");
  FREE(rep);
  ck_assert_int_eq(copy(c, "pop", 2, 0, "lr", "x", &rep), 3);
  FREE(rep);
  ck_assert_int_eq(copy(c, "lone0", 1, 0, NULL, NULL, &rep), 9);
  FREE(rep);

  /* a member diverges alone: lr 10 and weight decay 10 */
  OK(set_lr(c, "pop", 1, "10", "10", &rep));
  FREE(rep);
  OK(step(c, "pop", 30, &pr));
  ck_assert_int_eq(pr->step->n_diverged, 1);
  ck_assert_int_eq(pr->step->diverged[0], 1);
  ck_assert_int_eq(pr->step->members[0]->step, 35);
  ck_assert_int_eq(pr->step->members[2]->step, 35);
  const uint64_t bad = pr->step->members[1]->step;
  ck_assert_msg(bad < 35, "member 1 at step %llu", (unsigned long long)bad);
  FREE(pr);
  ck_assert_int_eq(submit_member(c, "pop", 1, b), 9);
  ck_assert_msg(strstr(dqnd_last_error(c), "member 1 of trainer 'pop' diverged"), "%s", dqnd_last_error(c));
  OK(submit_member(c, "pop", 0, b));
  OK(step(c, "pop", 2, &pr));
  ck_assert_int_eq(pr->step->members[0]->step, 37);
  ck_assert_int_eq(pr->step->members[1]->step, bad);
  FREE(pr);
  OK(copy(c, "pop", 1, 0, NULL, NULL, &rep)); /* replaced by a healthy member: trains again */
  FREE(rep);
  OK(step(c, "pop", 1, &pr));
  ck_assert_int_eq(pr->step->n_diverged, 0);
  ck_assert_int_eq(pr->step->members[1]->step, 38);
  FREE(pr);

  /* continuous training: a submit to member 2 trains member 2 alone (16
   * transitions x samples_per_insert 1 / batch 8 = 2 steps) */
  OK(set_field(c, "pop", 2, "samples_per_insert", "1"));
  make_batch(b, 16, 77);
  OK(submit_member(c, "pop", 2, b));
  for (int i = 0; i < P; i++) {
    OK(stats(c, "pop", i, &rep));
    ck_assert_int_eq(rep->trainer->stats->step, i == 2 ? 40 : 38);
    FREE(rep);
  }

  /* a restart restores the population */
  OK(dqnd_save_checkpoint(c, "pop", 0, &pk));
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  start_daemon(&d);
  c = connect_to(&d);
  OK(stats(c, "pop", 2, &rep));
  ck_assert_int_eq(rep->trainer->population, P);
  ck_assert_int_eq(rep->trainer->stats->step, 40);
  ck_assert_str_eq(field(rep->trainer, "seed"), "44");
  FREE(rep);
  ck_assert_int_eq(stats(c, "pop", 3, &rep), 3);
  FREE(rep);
  free(b);
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

/* A trainer whose every member diverged has stopped training (every
 * command but the diverged-safe ones refused); CopyMember, and a member's
 * LoadCheckpoint, make a member good again and the trainer trains again
 * (SetHyperparams did so already). A member state saved without its replay
 * leaves the member its own (emptied, every Step of the population would
 * fail on it). CopyMember's bad indices name src or dst; SetHyperparams
 * checks tau against target_period on the member's current values. */
START_TEST(test_every_member_diverged) {
  daemon_t d = {0};
  start_daemon(&d);
  dqnd_client_t *c = connect_to(&d);
  Dqnd__V1__Reply *rep = NULL, *pr = NULL;
  OK(create(c, "all", P, 7, &rep));
  FREE(rep);
  batch_t *b = malloc(sizeof *b);
  make_batch(b, 48, 5);
  for (int i = 0; i < P; i++) OK(submit_member(c, "all", i, b));
  OK(step(c, "all", 2, &pr));
  FREE(pr);
  ck_assert_int_eq(copy(c, "all", 5, 0, NULL, NULL, &rep), 3);
  ck_assert_str_eq(dqnd_last_error(c), "dst: 5 is outside [0, 3) (trainer 'all' has 3 members)");
  FREE(rep);
  ck_assert_int_eq(copy(c, "all", 0, 7, NULL, NULL, &rep), 3);
  ck_assert_str_eq(dqnd_last_error(c), "src: 7 is outside [0, 3) (trainer 'all' has 3 members)");
  FREE(rep);
  /* member 2's state at step 2, without its replay: a lone trainer's checkpoint */
  dqnd_checkpoint_t k;
  OK(dqnd_save_checkpoint(c, "all", 0, &k));
  char local[600];
  snprintf(local, sizeof local, "%s/member2.ckpt", d.dir);
  dqnd_use_member(c, 2);
  OK(dqnd_fetch_checkpoint(c, "all", k.id, local, 0, NULL));
  dqnd_use_member(c, 0);

  /* every member diverges: the trainer stops training */
  for (int i = 0; i < P; i++) {
    OK(set_lr(c, "all", i, "10", "10", &rep));
    FREE(rep);
  }
  ck_assert_int_eq(step(c, "all", 100, &pr), 9);
  FREE(pr);
  ck_assert_int_eq(submit_member(c, "all", 1, b), 9);
  ck_assert_msg(strstr(dqnd_last_error(c), "stopped training") && strstr(dqnd_last_error(c), "CopyMember"), "%s",
                dqnd_last_error(c));
  /* CopyMember makes member 1 a copy of member 0's last good state: the
   * trainer takes commands again (member 0's state is no healthy one: it
   * is not trained on here) */
  OK(copy(c, "all", 1, 0, NULL, NULL, &rep));
  FREE(rep);
  OK(submit_member(c, "all", 1, b));
  OK(stats(c, "all", 1, &rep));
  ck_assert_msg(!strstr(rep->trainer->state, "diverged"), "%s", rep->trainer->state);
  FREE(rep);

  /* again every member diverged; member 2's saved state brings it back, its
   * own replay kept (the file has none) */
  OK(set_lr(c, "all", 1, "10", "10", &rep));
  FREE(rep);
  ck_assert_int_eq(step(c, "all", 100, &pr), 9);
  FREE(pr);
  ck_assert_int_eq(submit_member(c, "all", 2, b), 9);
  dqnd_use_member(c, 2);
  OK(dqnd_load_checkpoint_file(c, "all", local, 0, NULL, 0));
  dqnd_use_member(c, 0);
  OK(stats(c, "all", 2, &rep));
  ck_assert_int_eq(rep->trainer->stats->step, 2);
  ck_assert_int_eq(rep->trainer->stats->replay_size, 48);
  FREE(rep);
  OK(step(c, "all", 3, &pr));
  ck_assert_int_eq(pr->step->n_diverged, 2);
  ck_assert_int_eq(pr->step->members[2]->step, 5);
  FREE(pr);

  /* tau 0 needs target_period >= 1, on the member's current values: a Set
   * of target_period 0 alone is valid once tau is not 0, and the other way */
  ck_assert_int_eq(set_field(c, "all", 2, "tau", "0.005"), 0);
  ck_assert_int_eq(set_field(c, "all", 2, "target_period", "0"), 0);
  ck_assert_int_eq(set_field(c, "all", 2, "tau", "0"), 3);
  ck_assert_msg(strstr(dqnd_last_error(c), "target_period: must be >= 1 when tau is 0"), "%s", dqnd_last_error(c));
  OK(stats(c, "all", 2, &rep));
  ck_assert_str_eq(field(rep->trainer, "target_period"), "0");
  ck_assert(fieldf(rep->trainer, "tau") == 0.005f);
  FREE(rep);
  free(b);
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

/* Population `name` of 2 (seed 11), member 1 with grad_clip 0, both fed
 * and (with save) stepped twice and checkpointed; then member 1 fed states of
 * 1e30 and 3 steps run: its second Adam moment overflows while its loss
 * stays finite, so no step is refused (b: scratch) */
static void overflow_member(dqnd_client_t *c, const char *name, int save, batch_t *b) {
  Dqnd__V1__Reply *rep = NULL, *pr = NULL;
  OK(create(c, name, 2, 11, &rep));
  FREE(rep);
  OK(set_field(c, name, 1, "grad_clip", "0"));
  make_batch(b, 64, 3);
  OK(submit_member(c, name, 0, b));
  OK(submit_member(c, name, 1, b));
  if (save) {
    OK(step(c, name, 2, &pr));
    FREE(pr);
    dqnd_checkpoint_t k;
    OK(dqnd_save_checkpoint(c, name, 0, &k));
  }
  make_batch(b, 64, 5);
  for (int i = 0; i < 64 * S_DIM; i++) b->s[i] *= 1e30f, b->s2[i] = b->s[i];
  OK(submit_member(c, name, 1, b));
  OK(step(c, name, 3, &pr));
  ck_assert_int_eq(pr->step->n_diverged, 0); /* the loss stayed finite: no step was refused */
  ck_assert_int_eq(pr->step->members[1]->step, save ? 5 : 3);
  FREE(pr);
}

/* A member whose update overflowed while its loss stayed finite (grad_clip
 * 0 and states of 1e30: an Adam moment past the float range, and no step
 * refused) holds a state no checkpoint may carry. A save takes that member
 * back to its state in the newest checkpoint and stops it alone (diverged),
 * and saves the others' state (refused whole before: the final save at
 * SIGTERM lost every member's work since the last checkpoint); a restart
 * keeps it so. */
START_TEST(test_member_state_not_finite) {
  daemon_t d = {0};
  start_daemon(&d);
  dqnd_client_t *c = connect_to(&d);
  Dqnd__V1__Reply *rep = NULL;
  batch_t *b = malloc(sizeof *b);
  /* nf: saved by SaveCheckpoint; nf2: by the final save at SIGTERM */
  const char *names[2] = {"nf", "nf2"};
  for (int t = 0; t < 2; t++) overflow_member(c, names[t], 1, b);
  dqnd_checkpoint_t k;
  OK(dqnd_save_checkpoint(c, "nf", 0, &k));
  ck_assert_int_eq((int)k.step, 5);
  for (int round = 0; round < 2; round++) { /* the save's answer, then a restart's */
    for (int t = 0; t < 1 + round; t++) {
      OK(stats(c, names[t], 1, &rep));
      ck_assert_int_eq(rep->trainer->stats->step, 2);
      ck_assert_msg(strstr(rep->trainer->state, "diverged"), "%s, round %d: %s", names[t], round,
                    rep->trainer->state);
      FREE(rep);
      OK(stats(c, names[t], 0, &rep));
      ck_assert_int_eq(rep->trainer->stats->step, 5);
      FREE(rep);
      ck_assert_int_eq(submit_member(c, names[t], 1, b), 9);
    }
    dqnd_close(c);
    ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0); /* its final saves succeed */
    if (round) break;
    start_daemon(&d);
    c = connect_to(&d);
  }
  free(b);
  rm_rf(d.dir);
}
END_TEST

/* The same member overflow where the population has no checkpoint yet: the
 * member has nothing to go back to, so the save is refused naming it, and
 * the final save at SIGTERM loses the healthy member's work, which the exit
 * status reports (1) */
START_TEST(test_member_not_finite_unsaved) {
  daemon_t d = {0};
  start_daemon(&d);
  dqnd_client_t *c = connect_to(&d);
  batch_t *b = malloc(sizeof *b);
  overflow_member(c, "nf3", 0, b);
  dqnd_checkpoint_t k;
  ck_assert_int_eq(dqnd_save_checkpoint(c, "nf3", 0, &k), 9);
  ck_assert_msg(strstr(dqnd_last_error(c), "member 1: state: section") &&
                    strstr(dqnd_last_error(c), "no checkpoint of trainer 'nf3' to take its last good state from"),
                "%s", dqnd_last_error(c));
  free(b);
  dqnd_close(c);
  const int st = stop_daemon(&d, SIGTERM);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d", st);
  rm_rf(d.dir);
}
END_TEST

int main(void) {
  harness_init();
  Suite *s = suite_create("members");
  TCase *tc = tcase_create("wire");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_population_over_the_wire);
  tcase_add_test(tc, test_every_member_diverged);
  tcase_add_test(tc, test_member_state_not_finite);
  tcase_add_test(tc, test_member_not_finite_unsaved);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
