/*
 * gen-corpus.c — writes the fuzzers' seed corpora (committed under
 * tests/fuzz/corpus/): one valid request of every command of the Request
 * oneof (request/), aimed at fuzz-request.c's server (its trainer
 * FUZZ_TRAINER of the tiny config, and base.dqnd, the trainer's state, in
 * its directory), and checkpoints of the tiny learner with and without the
 * replay, and without the optional sections (checkpoint/). Everything is deterministic: run again, same bytes.
 *
 *   ninja -C BUILD tests/fuzz/gen-corpus && BUILD/tests/fuzz/gen-corpus tests/fuzz/corpus
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend.h"
#include "dqnd.pb-c.h"
#include "fuzz_common.h"
#include "state_format.h"

static char root[1024];

static void put(const char *sub, const char *name, const void *p, size_t n) {
  char path[1200];
  snprintf(path, sizeof path, "%s/%s", root, sub);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/%s/%s", root, sub, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n || fclose(f)) {
    fprintf(stderr, "gen-corpus: cannot write %s\n", path);
    exit(1);
  }
}

static uint64_t next_id = 1;

/* packs r (version 1, a request id) into request/<name> */
static void req(const char *name, Dqnd__V1__Request *r) {
  r->version = 1;
  r->request_id = next_id++;
  size_t n = dqnd__v1__request__get_packed_size(r);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) exit(1);
  dqnd__v1__request__pack(r, buf);
  put("request", name, buf, n);
  free(buf);
}

#define REQ(var, field, CASE, TYPE, INIT)                                                                        \
  TYPE var = INIT;                                                                                                \
  Dqnd__V1__Request var##_r = DQND__V1__REQUEST__INIT;                                                            \
  var##_r.command_case = DQND__V1__REQUEST__COMMAND_##CASE;                                                       \
  var##_r.field = &var

static uint8_t *state_bytes(int variant, int transitions, int steps, int with_replay, size_t *n) {
  learner_t *l;
  uint8_t *buf;
  if (fuzz_tiny_learner(variant, transitions, steps, &l) || fuzz_save_mem(l, with_replay, &buf, n)) {
    fprintf(stderr, "gen-corpus: the tiny learner failed\n");
    exit(1);
  }
  learner_destroy(l);
  return buf;
}

/* the tiny config's fields as CreateTrainer fields into f, fp (names: their
 * storage); returns how many */
static int tiny_fields(Dqnd__V1__Field *f, Dqnd__V1__Field **fp, char (*names)[64]) {
  for (int i = 0; i < fuzz_n_tiny_fields; i++) {
    const char *eq = strchr(fuzz_tiny_fields[i], '=');
    snprintf(names[i], 64, "%.*s", (int)(eq - fuzz_tiny_fields[i]), fuzz_tiny_fields[i]);
    dqnd__v1__field__init(&f[i]);
    f[i].name = names[i];
    f[i].value = (char *)eq + 1;
    fp[i] = &f[i];
  }
  return fuzz_n_tiny_fields;
}

static void requests(void) {
  {
    REQ(m, health, HEALTH, Dqnd__V1__Health, DQND__V1__HEALTH__INIT);
    req("health", &m_r);
  }
  {
    REQ(m, server_info, SERVER_INFO, Dqnd__V1__ServerInfo, DQND__V1__SERVER_INFO__INIT);
    req("server-info", &m_r);
  }
  {
    REQ(m, list_trainers, LIST_TRAINERS, Dqnd__V1__ListTrainers, DQND__V1__LIST_TRAINERS__INIT);
    req("list-trainers", &m_r);
  }
  { /* a new trainer, and FUZZ_TRAINER again with its own config (idempotent) */
    Dqnd__V1__Field f[32], *fp[32];
    char names[32][64];
    tiny_fields(f, fp, names);
    REQ(m, create_trainer, CREATE_TRAINER, Dqnd__V1__CreateTrainer, DQND__V1__CREATE_TRAINER__INIT);
    m.name = "c2";
    m.backend = "cpu";
    m.n_config = (size_t)fuzz_n_tiny_fields;
    m.config = fp;
    req("create-trainer", &m_r);
    m.name = FUZZ_TRAINER;
    m.backend = "auto";
    req("create-trainer-exists", &m_r);
    /* HER (a goal of 1 float) with 3-step returns: fuzz-request trains it next */
    static const char *her[][2] = {{"her_goal_dim", "1"}, {"her_ratio", "0.5"}, {"her_strategy", "final"}, {"n_step", "3"}};
    for (int i = 0; i < 4; i++) {
      int k = fuzz_n_tiny_fields + i;
      dqnd__v1__field__init(&f[k]);
      f[k].name = (char *)her[i][0];
      f[k].value = (char *)her[i][1];
      fp[k] = &f[k];
    }
    m.name = "her";
    m.n_config = (size_t)fuzz_n_tiny_fields + 4;
    req("create-trainer-her-nstep", &m_r);
  }
  {
    REQ(m, destroy_trainer, DESTROY_TRAINER, Dqnd__V1__DestroyTrainer, DQND__V1__DESTROY_TRAINER__INIT);
    m.name = FUZZ_TRAINER;
    req("destroy-trainer", &m_r);
    m.save_final = 1;
    req("destroy-trainer-save", &m_r);
  }
  {
    fuzz_batch_t b;
    fuzz_make_batch(&b, 8, 5);
    REQ(m, submit_transitions, SUBMIT_TRANSITIONS, Dqnd__V1__SubmitTransitions, DQND__V1__SUBMIT_TRANSITIONS__INIT);
    m.name = FUZZ_TRAINER;
    m.count = (uint32_t)b.n;
    m.states = (ProtobufCBinaryData){sizeof(float) * FUZZ_S * (size_t)b.n, (uint8_t *)b.s};
    m.next_states = (ProtobufCBinaryData){sizeof(float) * FUZZ_S * (size_t)b.n, (uint8_t *)b.s2};
    m.actions = (ProtobufCBinaryData){sizeof(int32_t) * (size_t)b.n, (uint8_t *)b.a};
    m.rewards = (ProtobufCBinaryData){sizeof(float) * (size_t)b.n, (uint8_t *)b.r};
    m.dones = (ProtobufCBinaryData){(size_t)b.n, b.d};
    m.episode_ids = (ProtobufCBinaryData){sizeof(int64_t) * (size_t)b.n, (uint8_t *)b.ep};
    req("submit-transitions", &m_r);
    uint8_t ends[8] = {0, 0, 1, 0, 0, 0, 0, 1};
    m.episode_ends = (ProtobufCBinaryData){sizeof ends, ends};
    req("submit-transitions-episode-ends", &m_r);
  }
  {
    REQ(m, step, STEP, Dqnd__V1__Step, DQND__V1__STEP__INIT);
    m.name = FUZZ_TRAINER;
    m.n = 4;
    req("step", &m_r);
  }
  {
    float x[2 * FUZZ_S] = {0.5f, -0.25f, 0.125f, -1, 1, 0};
    REQ(m, act, ACT, Dqnd__V1__Act, DQND__V1__ACT__INIT);
    m.name = FUZZ_TRAINER;
    m.count = 2;
    m.states = (ProtobufCBinaryData){sizeof x, (uint8_t *)x};
    req("act", &m_r);
    m.noisy = 1;
    m.want_q = 1;
    m.episode = 3;
    req("act-noisy-q", &m_r);
  }
  {
    REQ(m, sync_target, SYNC_TARGET, Dqnd__V1__SyncTarget, DQND__V1__SYNC_TARGET__INIT);
    m.name = FUZZ_TRAINER;
    m.tau = 0.5f;
    req("sync-target", &m_r);
  }
  {
    Dqnd__V1__Field f[2], *fp[2] = {&f[0], &f[1]};
    dqnd__v1__field__init(&f[0]);
    dqnd__v1__field__init(&f[1]);
    f[0].name = "lr", f[0].value = "0.001";
    f[1].name = "samples_per_insert", f[1].value = "8";
    REQ(m, set_hyperparams, SET_HYPERPARAMS, Dqnd__V1__SetHyperparams, DQND__V1__SET_HYPERPARAMS__INIT);
    m.name = FUZZ_TRAINER;
    m.n_hparams = 2;
    m.hparams = fp;
    req("set-hyperparams", &m_r);
    f[0].name = "n_step", f[0].value = "4";
    f[1].name = "gamma", f[1].value = "0.9";
    req("set-hyperparams-nstep", &m_r);
  }
  {
    REQ(m, save_checkpoint, SAVE_CHECKPOINT, Dqnd__V1__SaveCheckpoint, DQND__V1__SAVE_CHECKPOINT__INIT);
    m.name = FUZZ_TRAINER;
    m.with_replay = 1;
    req("save-checkpoint", &m_r);
  }
  {
    REQ(m, fetch_checkpoint, FETCH_CHECKPOINT, Dqnd__V1__FetchCheckpoint, DQND__V1__FETCH_CHECKPOINT__INIT);
    m.name = FUZZ_TRAINER;
    m.checkpoint = "";
    m.offset = 16;
    m.max_bytes = 256;
    req("fetch-checkpoint", &m_r);
  }
  {
    REQ(m, load_checkpoint, LOAD_CHECKPOINT, Dqnd__V1__LoadCheckpoint, DQND__V1__LOAD_CHECKPOINT__INIT);
    m.name = FUZZ_TRAINER;
    m.path = "base.dqnd"; /* fuzz-request.c writes it in the state dir, where relative paths start */
    req("load-checkpoint-path", &m_r);
    m.name = "c3";
    m.create = 1;
    req("load-checkpoint-path-create", &m_r);
    /* uploaded: the whole state in one chunk, and the first of two chunks */
    size_t n;
    uint8_t *data = state_bytes(0, 0, 0, 0, &n);
    m.path = "";
    m.name = "up";
    m.data = (ProtobufCBinaryData){n, data};
    m.total = n;
    m.last = 1;
    m.crc32 = learner_crc32(0, data, n);
    req("load-checkpoint-upload", &m_r);
    m.data.len = n / 2;
    m.last = 0;
    m.crc32 = 0;
    req("load-checkpoint-upload-chunk", &m_r);
    free(data);
  }
  {
    REQ(m, get_stats, GET_STATS, Dqnd__V1__GetStats, DQND__V1__GET_STATS__INIT);
    m.name = FUZZ_TRAINER;
    req("get-stats", &m_r);
  }
  {
    REQ(m, list_checkpoints, LIST_CHECKPOINTS, Dqnd__V1__ListCheckpoints, DQND__V1__LIST_CHECKPOINTS__INIT);
    m.name = FUZZ_TRAINER;
    req("list-checkpoints", &m_r);
  }
  { /* the Decision Transformer's commands (FUZZ_TRAINER has none: their refusals; "dt" below, created with one) */
    REQ(m, pretrain_dt, PRETRAIN_DT, Dqnd__V1__PretrainDT, DQND__V1__PRETRAIN_DT__INIT);
    m.name = FUZZ_TRAINER;
    m.n = 3;
    req("pretrain-dt", &m_r);
    float x[2 * FUZZ_S] = {0.5f, -0.25f, 0.125f, -1, 1, 0}, rtg[2] = {3, 2.5f};
    int32_t ts[2] = {0, 1}, wa[2] = {4, 0};
    REQ(a, act, ACT, Dqnd__V1__Act, DQND__V1__ACT__INIT);
    a.name = "dt";
    a.policy = "dt";
    a.count = 2;
    a.states = (ProtobufCBinaryData){sizeof x, (uint8_t *)x};
    a.rtg = (ProtobufCBinaryData){sizeof rtg, (uint8_t *)rtg};
    a.timesteps = (ProtobufCBinaryData){sizeof ts, (uint8_t *)ts};
    a.window_actions = (ProtobufCBinaryData){sizeof wa, (uint8_t *)wa};
    req("act-dt", &a_r);
    static const char *dt[][2] = {{"dt_layers", "1"}, {"dt_context", "2"}, {"dt_embed", "4"},
                                  {"dt_heads", "2"},  {"dt_batch", "2"},   {"dt_max_ep_len", "8"}};
    Dqnd__V1__Field f[32], *fp[32];
    char names[32][64];
    int nf = tiny_fields(f, fp, names);
    for (int i = 0; i < 6; i++, nf++) {
      dqnd__v1__field__init(&f[nf]);
      f[nf].name = (char *)dt[i][0];
      f[nf].value = (char *)dt[i][1];
      fp[nf] = &f[nf];
    }
    REQ(c, create_trainer, CREATE_TRAINER, Dqnd__V1__CreateTrainer, DQND__V1__CREATE_TRAINER__INIT);
    c.name = "dt";
    c.backend = "cpu";
    c.n_config = (size_t)nf;
    c.config = fp;
    req("create-trainer-dt", &c_r);
  }
}

/* drops the sections the registry marks optional, in place: a state as a
 * build from before they existed wrote it */
static void strip_optional(uint8_t *p, size_t *n) {
  size_t off = 24;
  while (*n - off >= 16) {
    uint32_t tag = get_u32(p + off);
    size_t len = 16 + (size_t)get_u64(p + off + 8) + 4;
    const state_section_t *sec = state_section_find(tag);
    if (sec && sec->optional) {
      memmove(p + off, p + off + len, *n - off - len);
      *n -= len;
      continue;
    }
    off += len;
    if (tag == SEC_END) break;
  }
}

static void checkpoints(void) {
  static const struct {
    const char *name;
    int variant, transitions, steps, with_replay;
  } cks[] = {
      {"tiny.dqnd", 0, 16, 2, 0},
      {"tiny-replay.dqnd", 0, 16, 2, 1},
      {"tiny-replay-full.dqnd", 0, 40, 1, 1}, /* the ring wrapped: replay_size == capacity */
      {"ensemble-priors-replay.dqnd", 1, 16, 1, 1},
  };
  for (size_t i = 0; i < sizeof cks / sizeof cks[0]; i++) {
    size_t n;
    uint8_t *b = state_bytes(cks[i].variant, cks[i].transitions, cks[i].steps, cks[i].with_replay, &n);
    put("checkpoint", cks[i].name, b, n);
    free(b);
  }
  size_t n;
  { /* a Decision Transformer's sections, after 2 pre-training steps */
    learner_t *l;
    char err[256];
    uint8_t *d;
    if (fuzz_tiny_learner(2, 16, 0, &l) || learner_pretrain_dt(l, 2, NULL, NULL, err, sizeof err) ||
        fuzz_save_mem(l, 1, &d, &n)) {
      fprintf(stderr, "gen-corpus: the tiny DT learner failed\n");
      exit(1);
    }
    learner_destroy(l);
    put("checkpoint", "dt-replay.dqnd", d, n);
    free(d);
  }
  uint8_t *b = state_bytes(0, 16, 2, 1, &n);
  strip_optional(b, &n);
  put("checkpoint", "tiny-replay-no-optional-sections.dqnd", b, n);
  free(b);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: gen-corpus DIR (tests/fuzz/corpus)\n");
    return 2;
  }
  snprintf(root, sizeof root, "%s", argv[1]);
  mkdir(root, 0755);
  requests();
  checkpoints();
  return 0;
}
