/*
 * fuzz-checkpoint.c — libFuzzer harness over the checkpoint readers: every
 * input is a would-be checkpoint file, given to
 *   - learner_state_inspect (dqnctl inspect's walk),
 *   - learner_pop_peek (the header and member 0's config section),
 *   - ckpt_load_mem (LoadCheckpoint's uploaded bytes: learner_load from
 *     memory, trailing bytes refused) and
 *   - ckpt_load_file (LoadCheckpoint's path) on the same bytes in a file,
 * which must agree with each other: a header the peek refuses never loads
 * from memory, a learner's state the memory loader accepts also walks clean
 * (a population's walk is dqnctl inspect's, member by member), and the
 * memory and file loaders accept the same inputs; a walk that succeeds
 * stays within the input. A state the memory loader accepts must then be
 * usable: Act answers, and when it holds a batch a training step runs, its
 * status unchecked (a corrupt replay or parameters accepted by the loader
 * would show there as a crash, under ASan/UBSan).
 *
 * Every input runs as it is, and again "sealed" when sealing changes it:
 * with each section's CRC32C and, when the first section is the config,
 * the header's config hash recomputed (the checks any writer can
 * satisfy: they catch damage, not intent), so the fuzzer also reaches what
 * lies behind them — section lengths, counters, replay contents, the
 * backend's own checks — instead of spending its time on checksums.
 *
 * Not loaded (the input is dropped with -1; the walk and the peek still
 * run): a config that needs more than LEARNER_MAX_BYTES, or more than
 * MAX_PARAMS parameters — the daemon would allocate and train it; that is
 * work, not a path of its own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "checkpoint.h"
#include "fuzz_common.h"
#include "state_format.h"

#define LEARNER_MAX_BYTES (64LL << 20)
#define MAX_PARAMS 200000

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char file_path[600];

static void fail(const char *what, const char *err) {
  fprintf(stderr, "fuzz-checkpoint: %s: %s\n", what, err);
  abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  const char *tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  snprintf(file_path, sizeof file_path, "%s/dqnd-fuzz-ckpt-%ld.dqnd", tmp, (long)getpid());
  return 0;
}

static void on_section(void *ctx, const learner_state_section_t *s) {
  size_t *n = ctx;
  *n += strlen(s->name ? s->name : ""); /* the name must be a string */
}

/* the loaded learner works: Act on a few states, a step when it can */
static void use(learner_t *l) {
  const learner_config_t *c = learner_config(l);
  char err[512];
  int n = 2, S = c->state_dim;
  float *x = calloc((size_t)n * (size_t)S, sizeof *x);
  int32_t a[2];
  if (!x) fail("use", "out of memory");
  for (int i = 0; i < n * S; i++) x[i] = (float)(i % 5) * 0.25f - 0.5f;
  int rc = learner_act(l, x, n, 0, a, NULL, err, sizeof err);
  /* the loader takes any finite weights, and large ones overflow the
   * forward: Act then refuses its NaN Q values (EDIVERGED), which is an
   * answer; anything else is a failure */
  if (rc && !(rc == LEARNER_EDIVERGED && strstr(err, "Q values are not finite"))) fail("act on a loaded state", err);
  free(x);
  learner_stats_t st;
  learner_get_stats(l, &st);
  /* its status is not checked: the loader accepts any finite or non-finite
   * float in the parameters and the replay states (the CRCs vouch for no
   * more), and such a state may diverge; it must not crash */
  if (st.replay_size >= c->batch) learner_step(l, 1, NULL, err, sizeof err);
}

/* every reader on one byte string; 0, or -1 when it was too large to load */
static int check(const uint8_t *data, size_t size) {
  char err[512];
  /* 1. the walk */
  learner_state_header_t *h = malloc(sizeof *h);
  if (!h) fail("inspect", "out of memory");
  size_t names = 0;
  fuzz_reader_t r = {data, size, 0};
  char walk_err[512] = "";
  int walk = learner_state_inspect(fuzz_read, &r, h, on_section, &names, walk_err, sizeof walk_err);
  if (!walk && r.pos > size) fail("inspect", "walked past the end");
  free(h);

  /* 2. the header and config (a population's: member 0's) */
  learner_config_t c;
  int with_replay, npop;
  r = (fuzz_reader_t){data, size, 0};
  if (learner_pop_peek(fuzz_read, &r, &c, &npop, &with_replay, err, sizeof err)) {
    /* nothing loads either */
    learner_pop_t *l = NULL;
    if (!ckpt_load_mem(data, size, LEARNER_BACKEND_CPU, &l, err, sizeof err)) fail("a refused header loads", "");
    return 0;
  }
  if (learner_pop_memory_estimate(&c, npop, LEARNER_BACKEND_CPU) > LEARNER_MAX_BYTES ||
      learner_config_num_params(&c) > MAX_PARAMS)
    return -1;

  /* 3. the loaders: memory, then a file of the same bytes */
  learner_pop_t *lm = NULL, *lf = NULL;
  int rm = ckpt_load_mem(data, size, LEARNER_BACKEND_CPU, &lm, err, sizeof err);
  FILE *f = fopen(file_path, "wb");
  if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f)) fail("writing", file_path);
  int rf = ckpt_load_file(file_path, LEARNER_BACKEND_CPU, &lf, err, sizeof err);
  unlink(file_path);
  if ((rm == 0) != (rf == 0)) fail("the memory and file loaders disagree", err);
  if (rm == 0 && npop == 1 && walk != 0) fail("a state that loads does not walk clean", walk_err);
  if (lm) {
    for (int i = 0; i < learner_pop_size(lm); i++) use(learner_pop_member(lm, i));
    learner_pop_destroy(lm);
  }
  learner_pop_destroy(lf);
  return 0;
}

/* the sealed copy (see the top): header, then sections of tag, 0, len,
 * payload, CRC32C, as far as they go; 1 when it differs from the input */
static int seal(uint8_t *p, size_t n) {
  if (n < 24 || memcmp(p, STATE_MAGIC, 8)) return 0;
  int changed = 0, first = 1;
  for (size_t off = 24; n - off >= 16;) {
    uint32_t tag = get_u32(p + off);
    uint64_t len = get_u64(p + off + 8);
    if (len > n - off - 16 || n - off - 16 - len < 4) break;
    const uint8_t *payload = p + off + 16;
    uint8_t crc[4];
    put_u32(crc, learner_crc32c(0, payload, (size_t)len));
    changed |= memcmp(crc, payload + len, 4) != 0;
    memcpy(p + off + 16 + len, crc, 4);
    if (first && tag == SEC_CONFIG) {
      uint8_t h[8];
      put_u64(h, state_text_hash((const char *)payload, (size_t)len));
      changed |= memcmp(h, p + 16, 8) != 0;
      memcpy(p + 16, h, 8);
    }
    first = 0;
    off += 16 + (size_t)len + 4;
    if (tag == SEC_END) break;
  }
  return changed;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int rc = check(data, size);
  uint8_t *sealed = malloc(size ? size : 1);
  if (!sealed) fail("seal", "out of memory");
  memcpy(sealed, data, size);
  if (seal(sealed, size)) rc |= check(sealed, size);
  free(sealed);
  return rc;
}
