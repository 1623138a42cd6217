/*
 * dqnctl_arrays.c — the dqnctl commands that read or write arrays and files:
 * submit (.npy transitions, checked against the trainer's shapes first), act
 * (actions and Q values) and inspect (a checkpoint file's header and
 * sections, locally).
 *
 * A file with the wrong dtype or shape is a data error (EXIT_LOCAL) whose
 * message names the file and the shape it has, never a usage error.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dqnctl_arrays.h"
#include "npy.h"

static void shape_str(const npy_array_t *a, char *buf, size_t n) {
  size_t w = (size_t)snprintf(buf, n, "(");
  for (int i = 0; i < a->ndim && w < n; i++)
    w += (size_t)snprintf(buf + w, n - w, "%lld%s", (long long)a->shape[i], a->ndim == 1 ? "," : (i + 1 < a->ndim ? ", " : ""));
  if (w < n) snprintf(buf + w, n - w, ")");
}

/* n of a vector file: [n] or [n, 1]; -1 otherwise */
static int64_t vec_len(const npy_array_t *a) {
  if (a->ndim == 1) return a->shape[0];
  if (a->ndim == 2 && a->shape[1] == 1) return a->shape[0];
  return -1;
}

static int read_npy(const char *cmd, const char *path, npy_array_t *a) {
  char err[600];
  if (npy_read(path, a, err, sizeof err)) {
    fprintf(stderr, "%s: %s\n", cmd, err);
    return EXIT_LOCAL;
  }
  return 0;
}

static int shape_error(const char *cmd, const char *path, const npy_array_t *a, const char *want) {
  char sh[128];
  shape_str(a, sh, sizeof sh);
  fprintf(stderr, "%s: %s: shape %s, expected %s\n", cmd, path, sh, want);
  return EXIT_LOCAL;
}

static int trainer_shapes(ctx_t *x, const char *name, dqnd_trainer_info_t *ti) {
  int rc = dqnd_trainer_info(x->c, name, ti);
  return rc ? fail_rc(x, rc) : 0;
}

/* ---------------------------------------------------------------- submit */

/* per-branch indices [n, D] -> flat joint actions (first branch most significant) */
static int encode_actions(const char *cmd, const char *path, const npy_array_t *a, const dqnd_trainer_info_t *ti,
                          int32_t *out) {
  int64_t n = a->shape[0];
  int D = ti->n_branches;
  int32_t *tmp = malloc(sizeof(int32_t) * (size_t)(n * D));
  if (!tmp) return fprintf(stderr, "%s: out of memory\n", cmd), EXIT_LOCAL;
  if (npy_to_i32(a, tmp)) {
    free(tmp);
    fprintf(stderr, "%s: %s: actions must be integers\n", cmd, path);
    return EXIT_LOCAL;
  }
  for (int64_t i = 0; i < n; i++) {
    int64_t flat = 0;
    for (int d = 0; d < D; d++) {
      int32_t v = tmp[i * D + d];
      if (v < 0 || v >= ti->branches[d]) {
        free(tmp);
        fprintf(stderr, "%s: %s[%lld][%d]: %d is outside branch %d's [0, %d)\n", cmd, path, (long long)i, d, v, d,
                ti->branches[d]);
        return EXIT_LOCAL;
      }
      flat = flat * ti->branches[d] + v;
    }
    out[i] = (int32_t)flat;
  }
  free(tmp);
  return 0;
}

/* episode ids exactly: integers as they are, floats only when whole and
 * within 2^53 (beyond that a double cannot name every id) */
static int episode_ids(const char *cmd, const char *path, const npy_array_t *e, int64_t *out) {
  for (int64_t i = 0; i < e->count; i++) {
    double v;
    switch (e->dtype) {
    case NPY_I8: out[i] = ((const int64_t *)e->data)[i]; continue;
    case NPY_I4: out[i] = ((const int32_t *)e->data)[i]; continue;
    case NPY_U1:
    case NPY_B1: out[i] = ((const uint8_t *)e->data)[i]; continue;
    case NPY_F4: v = ((const float *)e->data)[i]; break;
    default: v = ((const double *)e->data)[i]; break;
    }
    if (v != floor(v) || fabs(v) > 9007199254740992.0) {
      fprintf(stderr, "%s: %s[%lld]: %g is not a whole number an integer id can hold exactly\n", cmd, path,
              (long long)i, v);
      return EXIT_LOCAL;
    }
    out[i] = (int64_t)v;
  }
  return 0;
}

int cmd_submit(ctx_t *x, const cli_args_t *a) {
  static const char *cmd = "dqnctl submit";
  enum { NF = 7 };
  static const char *flags[NF] = {"--states", "--next-states", "--actions", "--rewards", "--dones", "--episode-ids",
                                  "--episode-ends"};
  const char *path[NF];
  for (int k = 0; k < NF; k++) {
    path[k] = opt(x, a, flags[k]);
    if (!path[k] && k < 5) {
      fprintf(stderr, "%s: %s FILE.npy is required (dqnctl submit --help)\n", cmd, flags[k]);
      return EXIT_USAGE;
    }
  }
  dqnd_trainer_info_t ti;
  int rc = trainer_shapes(x, a->pos[0], &ti);
  if (rc) return rc;
  npy_array_t arr[NF];
  memset(arr, 0, sizeof arr);
  for (int k = 0; k < NF && !rc; k++)
    if (path[k]) rc = read_npy(cmd, path[k], &arr[k]);
  float *fs = NULL, *fs2 = NULL, *fr = NULL;
  int32_t *ia = NULL;
  uint8_t *ud = NULL, *ue = NULL;
  int64_t *ie = NULL;
  double *dd = NULL, *de = NULL;
  char want[160];
  if (rc) goto out;
  npy_array_t *s = &arr[0], *s2 = &arr[1], *ac = &arr[2], *r = &arr[3], *d = &arr[4], *e = &arr[5];
  int S = ti.state_dim;
  if (s->ndim != 2 || s->shape[1] != S || s->shape[0] < 1) {
    snprintf(want, sizeof want, "(n, %d): trainer '%s' has state_dim %d", S, a->pos[0], S);
    rc = shape_error(cmd, path[0], s, want);
    goto out;
  }
  int64_t n = s->shape[0];
  if (s2->ndim != 2 || s2->shape[0] != n || s2->shape[1] != S) {
    snprintf(want, sizeof want, "(%lld, %d) like %s", (long long)n, S, path[0]);
    rc = shape_error(cmd, path[1], s2, want);
    goto out;
  }
  int per_branch = ac->ndim == 2 && ac->shape[1] == ti.n_branches && ti.n_branches > 1;
  if (!(vec_len(ac) == n || (per_branch && ac->shape[0] == n))) {
    snprintf(want, sizeof want, "(%lld,) flat joint actions, or (%lld, %d) per-branch indices", (long long)n,
             (long long)n, ti.n_branches);
    rc = shape_error(cmd, path[2], ac, want);
    goto out;
  }
  for (int k = 3; k < NF; k++)
    if (path[k] && vec_len(&arr[k]) != n) {
      snprintf(want, sizeof want, "(%lld,) like the %lld rows of %s", (long long)n, (long long)n, path[0]);
      rc = shape_error(cmd, path[k], &arr[k], want);
      goto out;
    }
  fs = npy_to_f32(s), fs2 = npy_to_f32(s2), fr = npy_to_f32(r), dd = npy_to_f64(d);
  ia = malloc(sizeof(int32_t) * (size_t)n);
  ud = malloc((size_t)n);
  if (path[5]) ie = malloc(sizeof(int64_t) * (size_t)n);
  if (path[6]) de = npy_to_f64(&arr[6]), ue = malloc((size_t)n);
  if (!fs || !fs2 || !fr || !dd || !ia || !ud || (path[5] && !ie) || (path[6] && (!de || !ue))) {
    fprintf(stderr, "%s: out of memory\n", cmd);
    rc = EXIT_LOCAL;
    goto out;
  }
  if (per_branch) {
    if ((rc = encode_actions(cmd, path[2], ac, &ti, ia))) goto out;
  } else if (npy_to_i32(ac, ia)) {
    fprintf(stderr, "%s: %s: actions must be integers in int32 range\n", cmd, path[2]);
    rc = EXIT_LOCAL;
    goto out;
  }
  for (int k = 0; k < 2; k++) { /* dones, and episode ends when given: 0 or 1 */
    const double *v = k ? de : dd;
    uint8_t *u = k ? ue : ud;
    for (int64_t i = 0; v && i < n; i++) {
      if (v[i] != 0 && v[i] != 1) {
        fprintf(stderr, "%s: %s[%lld]: %g is not 0 or 1\n", cmd, path[k ? 6 : 4], (long long)i, v[i]);
        rc = EXIT_LOCAL;
        goto out;
      }
      u[i] = v[i] == 1;
    }
  }
  if (ie && (rc = episode_ids(cmd, path[5], e, ie))) goto out;
  learner_transitions_t t = {n, fs, ia, fr, fs2, ud, ie, ue};
  int64_t size = 0;
  int crc = dqnd_submit(x->c, a->pos[0], S, &t, &size);
  if (crc) rc = fail_rc(x, crc);
  else if (x->json) print_json(json_pack("{s:I, s:I}", "accepted", (json_int_t)n, "replay_size", (json_int_t)size));
  else printf("%s: %lld transitions accepted, replay holds %lld\n", a->pos[0], (long long)n, (long long)size);
out:
  for (int k = 0; k < NF; k++) npy_free(&arr[k]);
  free(fs), free(fs2), free(fr), free(ia), free(ud), free(ue), free(ie), free(dd), free(de);
  return rc;
}

/* ------------------------------------------------------------------- act */

int cmd_act(ctx_t *x, const cli_args_t *a) {
  static const char *cmd = "dqnctl act";
  const char *sp = opt(x, a, "--states"), *out = opt(x, a, "-o"), *qout = opt(x, a, "--q-out");
  if (!sp) return fprintf(stderr, "%s: --states FILE.npy is required (dqnctl act --help)\n", cmd), EXIT_USAGE;
  int want_q = opt(x, a, "--q") || qout;
  const char *ep = opt(x, a, "--episode");
  long long episode = 0;
  if (ep && cli_int(cmd, "--episode", ep, 0, INT64_MAX, &episode)) return EXIT_USAGE;
  dqnd_trainer_info_t ti;
  int rc = trainer_shapes(x, a->pos[0], &ti);
  if (rc) return rc;
  npy_array_t s = {0};
  if ((rc = read_npy(cmd, sp, &s))) return rc;
  if (s.ndim != 2 || s.shape[1] != ti.state_dim || s.shape[0] < 1 || s.shape[0] > LEARNER_MAX_ACT_STATES) {
    char want[160];
    snprintf(want, sizeof want, "(n, %d), n at most %d (Act's limit): trainer '%s' has state_dim %d",
             ti.state_dim, LEARNER_MAX_ACT_STATES, a->pos[0], ti.state_dim);
    rc = shape_error(cmd, sp, &s, want);
    npy_free(&s);
    return rc;
  }
  int n = (int)s.shape[0], W = 0, maxn = 0, D = ti.n_branches;
  for (int d = 0; d < D; d++) {
    W += ti.branches[d];
    if (ti.branches[d] > maxn) maxn = ti.branches[d];
  }
  float *fs = npy_to_f32(&s);
  int32_t *act = malloc(sizeof(int32_t) * (size_t)n);
  float *q = want_q ? malloc(sizeof(float) * (size_t)n * (size_t)W * 2) : NULL; /* mean, then variance */
  float *qv = q ? q + (size_t)n * (size_t)W : NULL;
  float *qpad = qout ? malloc(sizeof(float) * (size_t)n * (size_t)D * (size_t)maxn) : NULL;
  npy_free(&s);
  if (!fs || !act || (want_q && !q) || (qout && !qpad)) {
    free(fs), free(act), free(q), free(qpad);
    return fprintf(stderr, "%s: out of memory\n", cmd), EXIT_LOCAL;
  }
  int crc = dqnd_act_episode(x->c, a->pos[0], fs, n, ti.state_dim, opt(x, a, "--noisy") != NULL, (uint64_t)episode,
                             act, q, qv, q ? (size_t)n * (size_t)W : 0);
  char err[600];
  if (crc) {
    rc = fail_rc(x, crc);
    goto done;
  }
  if (out) {
    int64_t shape[1] = {n};
    if (npy_write(out, NPY_I4, 1, shape, act, err, sizeof err)) {
      fprintf(stderr, "%s: %s\n", cmd, err);
      rc = EXIT_LOCAL;
      goto done;
    }
  }
  if (qout) { /* [n, D, maxn], NaN past a branch's size */
    for (int i = 0; i < n; i++)
      for (int d = 0, off = 0; d < D; off += ti.branches[d], d++)
        for (int k = 0; k < maxn; k++)
          qpad[((size_t)i * D + d) * maxn + k] = k < ti.branches[d] ? q[(size_t)i * W + off + k] : NAN;
    int64_t shape[3] = {n, D, maxn};
    if (npy_write(qout, NPY_F4, 3, shape, qpad, err, sizeof err)) {
      fprintf(stderr, "%s: %s\n", cmd, err);
      rc = EXIT_LOCAL;
      goto done;
    }
  }
  if (x->json) {
    json_t *arr = json_array(), *qa = want_q ? json_array() : NULL, *va = want_q ? json_array() : NULL;
    for (int i = 0; i < n; i++) {
      json_array_append_new(arr, json_integer(act[i]));
      if (!qa) continue;
      json_t *row = json_array(), *vrow = json_array();
      for (int d = 0, off = 0; d < D; off += ti.branches[d], d++) {
        json_t *br = json_array(), *vb = json_array();
        for (int k = 0; k < ti.branches[d]; k++) {
          json_array_append_new(br, json_real(q[(size_t)i * W + off + k]));
          json_array_append_new(vb, json_real(qv[(size_t)i * W + off + k]));
        }
        json_array_append_new(row, br);
        json_array_append_new(vrow, vb);
      }
      json_array_append_new(qa, row);
      json_array_append_new(va, vrow);
    }
    json_t *j = json_pack("{s:o}", "actions", arr);
    if (qa) json_object_set_new(j, "q", qa);
    if (va) json_object_set_new(j, "q_var", va);
    print_json(j);
  } else if (!out || opt(x, a, "--q")) {
    for (int i = 0; i < n; i++) {
      printf("%d", act[i]);
      if (opt(x, a, "--q"))
        for (int d = 0, off = 0; d < D; off += ti.branches[d], d++) {
          printf("%s", d ? " | " : "\tq: ");
          for (int k = 0; k < ti.branches[d]; k++) printf("%s%.5f", k ? " " : "", q[(size_t)i * W + off + k]);
        }
      if (opt(x, a, "--q"))
        for (int d = 0, off = 0; d < D; off += ti.branches[d], d++) {
          printf("%s", d ? " | " : "\tvar: ");
          for (int k = 0; k < ti.branches[d]; k++) printf("%s%.5g", k ? " " : "", qv[(size_t)i * W + off + k]);
        }
      printf("\n");
    }
  }
done:
  free(fs), free(act), free(q), free(qpad);
  return rc;
}

/* --------------------------------------------------------------- inspect */

static int file_read(void *ctx, void *buf, size_t n) { return fread(buf, 1, n, ctx) == n ? 0 : -1; }

typedef struct {
  json_t *arr;
  uint64_t base; /* the state's offset in the file (a population's member) */
} walk_t;

static void on_section(void *p, const learner_state_section_t *s) {
  walk_t *w = p;
  const unsigned long long off = (unsigned long long)(w->base + s->offset);
  if (w->arr)
    json_array_append_new(w->arr, json_pack("{s:i, s:s, s:I, s:I, s:b}", "tag", (int)s->tag, "name", s->name, "offset",
                                            (json_int_t)off, "bytes", (json_int_t)s->len, "crc_ok", s->crc_ok));
  else
    printf("  %-10llu %-4u %-22s %-12llu %s\n", off, s->tag, s->name, (unsigned long long)s->len,
           s->crc_ok ? "ok" : "BAD");
}

/* One learner state from f's position (at byte base of the file): its
 * sections and config printed, or its JSON object in *out. 0, or -1 with err
 * set (the state fails a check); *walked the bytes it spans. */
static int inspect_state(ctx_t *x, FILE *f, uint64_t base, json_t **out, uint64_t *walked, char *err, size_t errlen) {
  learner_state_header_t *h = malloc(sizeof *h);
  if (!h) return snprintf(err, errlen, "out of memory"), -1;
  walk_t w = {x->json ? json_array() : NULL, base};
  if (!x->json) printf("sections:\n  %-10s %-4s %-22s %-12s %s\n", "offset", "tag", "name", "bytes", "crc32c");
  int rc = learner_state_inspect(file_read, f, h, on_section, &w, err, errlen);
  *walked = h->bytes;
  if (x->json) {
    /* the config text as read (it may not be UTF-8 in a damaged file) */
    json_t *cfg = json_stringn_nocheck(h->config_text, strlen(h->config_text));
    char hash[17];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)h->config_hash);
    *out = json_pack("{s:i, s:i, s:b, s:o, s:s, s:o, s:s, s:b, s:b}", "version", (int)h->version, "flags",
                     (int)h->flags, "with_replay", (int)(h->flags & 1), "config", cfg, "error", rc ? err : "",
                     "sections", w.arr, "config_hash", hash, "config_hash_ok", h->hash_ok, "config_ok", h->config_ok);
  } else {
    if (h->version)
      printf("format version %u, flags 0x%x (%s), config hash %016llx (%s)\n", h->version, h->flags,
             h->flags & 1 ? "with replay" : "no replay", (unsigned long long)h->config_hash,
             h->hash_ok ? "matches the config" : "DOES NOT match");
    if (h->config_text[0]) printf("config:\n  ");
    /* a damaged file's bytes must not reach the terminal as control codes */
    for (const unsigned char *p = (const unsigned char *)h->config_text; *p; p++) {
      if (*p == '\n') printf(p[1] ? "\n  " : "\n");
      else if (*p < 0x20 || *p == 0x7f) printf("\\x%02x", *p);
      else putchar(*p);
    }
  }
  free(h);
  return rc ? -1 : 0;
}

static uint64_t le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* a learner's state, or a population's (docs/population.md): each member's */
int cmd_inspect(ctx_t *x, const cli_args_t *a) {
  const char *path = a->pos[0];
  FILE *f = fopen(path, "rb");
  if (!f) return fprintf(stderr, "dqnctl inspect: cannot open %s\n", path), EXIT_LOCAL;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  rewind(f);
  unsigned char hd[24];
  const int pop = fread(hd, 1, sizeof hd, f) == sizeof hd && !memcmp(hd, LEARNER_POP_MAGIC, 8);
  uint64_t n = pop ? le64(hd + 16) : 1, at = pop ? sizeof hd : 0;
  char err[300] = "";
  int rc = 0;
  if (pop && (le64(hd + 8) != LEARNER_POP_VERSION /* and flags 0 */ || n < 2 || n > LEARNER_MAX_POPULATION))
    snprintf(err, sizeof err, "population header: version %u, %llu members (this build reads version %u, 2 to %d)",
             (unsigned)(hd[8] | hd[9] << 8), (unsigned long long)n, LEARNER_POP_VERSION, LEARNER_MAX_POPULATION),
        rc = -1, n = 0;
  if (!pop) rewind(f);
  json_t *members = x->json ? json_array() : NULL, *one = NULL;
  if (!x->json) {
    printf("%s: %ld bytes\n", path, size);
    if (pop && !rc) printf("a population of %llu members\n", (unsigned long long)n);
  }
  for (uint64_t i = 0; !rc && i < n; i++) {
    if (pop && !x->json) printf("member %llu, at byte %llu:\n", (unsigned long long)i, (unsigned long long)at);
    uint64_t walked = 0;
    json_t *m = NULL;
    rc = inspect_state(x, f, at, &m, &walked, err, sizeof err);
    at += walked;
    if (m && pop) json_array_append_new(members, m);
    else if (m) one = m;
    if (rc && pop) {
      char tmp[300];
      snprintf(tmp, sizeof tmp, "%s", err);
      snprintf(err, sizeof err, "member %llu: %.270s", (unsigned long long)i, tmp);
    }
  }
  if (!rc && pop) {
    unsigned char t[16];
    if (fread(t, 1, sizeof t, f) != sizeof t || memcmp(t, LEARNER_POP_END, 8) || le64(t + 8) != n)
      snprintf(err, sizeof err, "no population end marker after member %llu", (unsigned long long)(n - 1)), rc = -1;
    else at += sizeof t;
  }
  fclose(f);
  int trailing = rc == 0 && (long)at != size;
  if (x->json) {
    json_t *j = one ? one : json_object();
    json_object_set_new(j, "file", json_text(path));
    json_object_set_new(j, "bytes", json_integer((json_int_t)size));
    if (pop) {
      json_object_set_new(j, "population", json_integer((json_int_t)n));
      json_object_set_new(j, "members", members);
    } else
      json_decref(members);
    if (rc || trailing) json_object_set_new(j, "error", json_text(rc ? err : "trailing bytes"));
    if (!json_object_get(j, "error")) json_object_set_new(j, "error", json_string(""));
    print_json(j);
  } else
    json_decref(members);
  if (rc || trailing) {
    fprintf(stderr, "dqnctl inspect: %s: %s\n", path, rc ? err : "trailing bytes after the end section");
    return EXIT_LOCAL;
  }
  if (!x->json) printf("every check passed\n");
  return EXIT_OK;
}
