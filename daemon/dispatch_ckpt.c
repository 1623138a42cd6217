/*
 * dispatch_ckpt.c — the checkpoint commands of the command table
 * (dispatch.c): SaveCheckpoint, ListCheckpoints, FetchCheckpoint (chunked
 * reads of a file on the daemon) and LoadCheckpoint (from a daemon-side path
 * or from uploaded chunks, into a new trainer or swapped into an existing one
 * on its worker).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "dispatch_impl.h"
#include "log.h"

void dispatch_reply_checkpoint(rpc_call_t *c, const ckpt_info_t *info) {
  Dqnd__V1__CheckpointInfo ci = DQND__V1__CHECKPOINT_INFO__INIT;
  ci.checkpoint = (char *)info->id;
  ci.path = (char *)info->path;
  ci.bytes = info->bytes;
  ci.crc32 = info->crc32;
  ci.step = info->step;
  ci.seq = info->seq;
  ci.mtime_unix = info->mtime;
  ci.pinned = info->pinned;
  rep_t r = DQND__V1__REPLY__INIT;
  r.result_case = DQND__V1__REPLY__RESULT_CHECKPOINT;
  r.checkpoint = &ci;
  dispatch_reply_ok(c, &r);
}

void dispatch_run_save(trainer_job_t *j) {
  rpc_call_t *c = j->c;
  ckpt_info_t info;
  char err[512];
  const Dqnd__V1__SaveCheckpoint *m = rpc_request(c)->save_checkpoint;
  int rc = trainer_save(j->t, m->with_replay, m->pin, &info, err, sizeof err);
  if (rc)
    rpc_reply_error(c, rc > 0 ? CODE_FAILED_PRECONDITION : CODE_INTERNAL,
                    "%s", err);
  else dispatch_reply_checkpoint(c, &info);
}

void dispatch_run_list_checkpoints(trainer_job_t *j) {
  trainer_t *t = j->t;
  rpc_call_t *c = j->c;
  ckpt_info_t *all;
  int n;
  if (ckpt_list(t->dir, &all, &n)) {
    rpc_reply_error(c, CODE_INTERNAL, "name: cannot read trainer '%s''s checkpoint directory", t->name);
    return;
  }
  Dqnd__V1__CheckpointInfo *ci = calloc((size_t)(n ? n : 1), sizeof *ci);
  Dqnd__V1__CheckpointInfo **ptr = calloc((size_t)(n ? n : 1), sizeof *ptr);
  if (!ci || !ptr) {
    free(all), free(ci), free(ptr);
    rpc_reply_error(c, CODE_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  for (int i = 0; i < n; i++) {
    dqnd__v1__checkpoint_info__init(&ci[i]);
    ci[i].checkpoint = all[i].id;
    ci[i].path = all[i].path;
    ci[i].bytes = all[i].bytes;
    ci[i].crc32 = all[i].crc32;
    ci[i].step = all[i].step;
    ci[i].seq = all[i].seq;
    ci[i].mtime_unix = all[i].mtime;
    ci[i].pinned = all[i].pinned;
    ptr[i] = &ci[i];
  }
  Dqnd__V1__ListCheckpointsResult lr = DQND__V1__LIST_CHECKPOINTS_RESULT__INIT;
  lr.n_checkpoints = (size_t)n;
  lr.checkpoints = ptr;
  rep_t r = DQND__V1__REPLY__INIT;
  r.result_case = DQND__V1__REPLY__RESULT_CHECKPOINTS;
  r.checkpoints = &lr;
  dispatch_reply_ok(c, &r);
  free(all), free(ci), free(ptr);
}

int dispatch_check_fetch(const req_t *r, trainer_job_t *j, char *err, size_t errlen) {
  const char *id = r->fetch_checkpoint->checkpoint;
  if (id[0] && (strchr(id, '/') || id[0] == '.')) return snprintf(err, errlen, "checkpoint: '%s' is not a checkpoint id", id), CODE_INVALID_ARGUMENT;
  /* member_only: a member of the trainer, checked as every command's member is */
  return r->fetch_checkpoint->member_only ? dispatch_check_member(j->t, r->fetch_checkpoint->member, j, err, errlen) : 0;
}

/* member `member`'s bytes in the checkpoint info (t->fetch_member: the last
 * one found): its place in the file, its length and CRC-32 put in *info
 * (bytes, crc32) with the offset it starts at in *base; 0, or a code with
 * the call answered */
static int member_place(trainer_t *t, rpc_call_t *c, uint32_t member, ckpt_info_t *info, uint64_t *base) {
  if (strcmp(t->fetch_member.id, info->id) || t->fetch_member.member != (int)member) {
    char err[512];
    ckpt_reader_t rd = {info, 0, info->bytes};
    uint64_t off, len;
    uint32_t crc;
    int rc = learner_pop_member_range(ckpt_reader, &rd, (int)member, &off, &len, &crc, err, sizeof err);
    if (rc) {
      rpc_reply_error(c, rc == LEARNER_EINVAL ? CODE_INVALID_ARGUMENT : CODE_DATA_LOSS, "checkpoint %s: %s", info->id,
                      err);
      return -1;
    }
    snprintf(t->fetch_member.id, sizeof t->fetch_member.id, "%s", info->id);
    t->fetch_member.member = (int)member;
    t->fetch_member.off = off, t->fetch_member.len = len, t->fetch_member.crc32 = crc;
  }
  *base = t->fetch_member.off;
  info->bytes = t->fetch_member.len;
  info->crc32 = t->fetch_member.crc32;
  return 0;
}

void dispatch_run_fetch(trainer_job_t *j) {
  server_t *s = j->s;
  trainer_t *t = j->t;
  rpc_call_t *c = j->c;
  const Dqnd__V1__FetchCheckpoint *m = rpc_request(c)->fetch_checkpoint;
  ckpt_info_t info;
  char err[512];
  if (ckpt_find(t->dir, m->checkpoint, &info, err, sizeof err)) {
    rpc_reply_error(c, CODE_NOT_FOUND, "%s", err);
    return;
  }
  uint64_t base = 0; /* member_only: where the member's bytes begin */
  if (m->member_only && member_place(t, c, m->member, &info, &base)) return;
  if (m->offset > info.bytes) {
    rpc_reply_error(c, CODE_OUT_OF_RANGE, "offset: %llu is past the end (%llu bytes)",
                    (unsigned long long)m->offset, (unsigned long long)info.bytes);
    return;
  }
  /* a chunk and the reply around it within max_message_bytes (at least 1024) */
  int64_t mm = s->opts.max_message_bytes;
  uint64_t cap = (uint64_t)(mm > 8192 ? mm - 4096 : mm / 2);
  uint64_t want = m->max_bytes ? m->max_bytes : FETCH_DEFAULT_BYTES;
  if (want > cap) want = cap;
  if (want > info.bytes - m->offset) want = info.bytes - m->offset;
  uint8_t *buf = malloc(want ? want : 1);
  size_t got = 0;
  if (!buf || ckpt_read_chunk(&info, base + m->offset, buf, want, &got) || got != want) {
    free(buf);
    rpc_reply_error(c, CODE_INTERNAL, "checkpoint: reading %s failed", info.id);
    return;
  }
  Dqnd__V1__CheckpointChunk ch = DQND__V1__CHECKPOINT_CHUNK__INIT;
  ch.checkpoint = info.id;
  ch.offset = m->offset;
  ch.total = info.bytes;
  ch.data.data = buf;
  ch.data.len = got;
  ch.crc32 = info.crc32;
  rep_t r = DQND__V1__REPLY__INIT;
  r.result_case = DQND__V1__REPLY__RESULT_CHUNK;
  r.chunk = &ch;
  dispatch_reply_ok(c, &r);
  free(buf);
}

/* --------------------------------------------------------- LoadCheckpoint */

/* An upload in progress: its bytes grow as chunks arrive (not `total` up
 * front: a first chunk claiming 8 GiB held that much), at most UPLOAD_MAX_OPEN
 * at once whose totals sum to at most the largest one upload may have; one
 * left idle UPLOAD_IDLE_S is dropped when another begins. Unfinished ones are
 * freed at exit (dispatch_free_uploads). */
#define UPLOAD_MAX_OPEN 16
#define UPLOAD_IDLE_S 600.0
struct upload {
  upload_t *next;
  char name[65];
  uint8_t *data;
  uint64_t n, cap, total;
  double touched;
};

static void upload_free(upload_t *u) {
  free(u->data);
  free(u);
}

void dispatch_free_uploads(server_t *s) {
  pthread_mutex_lock(&s->up_mu);
  while (s->uploads) {
    upload_t *u = s->uploads;
    s->uploads = u->next;
    upload_free(u);
  }
  pthread_mutex_unlock(&s->up_mu);
}

/* the backend goes to j->backend */
int dispatch_check_load(const req_t *r, trainer_job_t *j, char *err, size_t errlen) {
  const server_t *s = j->s;
  const Dqnd__V1__LoadCheckpoint *m = r->load_checkpoint;
  if (m->member_only && m->create)
    return snprintf(err, errlen, "create: a member's state loads into an existing trainer's member"), CODE_INVALID_ARGUMENT;
  int ok;
  j->backend = dispatch_parse_backend(m->backend, &ok);
  if (!ok) return snprintf(err, errlen, "backend: '%s' is not auto, cpu or cuda", m->backend), CODE_INVALID_ARGUMENT;
  int has_path = m->path && m->path[0];
  if (has_path == (m->data.len > 0 || m->total > 0))
    return snprintf(err, errlen, "path: give either path or data chunks, not %s", has_path ? "both" : "neither"), CODE_INVALID_ARGUMENT;
  if (!has_path && (m->total > (uint64_t)s->opts.decode_budget * 16 || m->offset > m->total || m->data.len > m->total - m->offset))
    return snprintf(err, errlen, "total: %llu bytes (chunk at %llu + %zu) is inconsistent or too large",
                    (unsigned long long)m->total, (unsigned long long)m->offset, m->data.len),
           CODE_INVALID_ARGUMENT;
  return 0;
}

void dispatch_run_swap(trainer_job_t *j);

/* the request field the checkpoint came from, for the refusals that name it */
static const char *source_field(const Dqnd__V1__LoadCheckpoint *m) { return m->path && m->path[0] ? "path" : "data"; }

/* a loader's CKPT code as the reply's status: DATA_LOSS only for bytes that
 * are not a readable checkpoint */
static int load_status(int lrc) {
  switch (lrc) {
  case CKPT_ENOENT: return CODE_NOT_FOUND;
  case CKPT_ENOMEM: return CODE_RESOURCE_EXHAUSTED;
  case CKPT_EACCES: return CODE_PERMISSION_DENIED;
  case CKPT_ENOTREG: return CODE_INVALID_ARGUMENT;
  case CKPT_EUNSUPPORTED: return CODE_FAILED_PRECONDITION;
  case CKPT_EDEVICE: return CODE_UNAVAILABLE;
  default: return CODE_DATA_LOSS;
  }
}

/* LoadCheckpoint from a file on the daemon's side (confined to state_dir and
 * checkpoint-dirs): the population, or NULL with the call answered */
static learner_pop_t *load_path(server_t *s, rpc_call_t *c, const Dqnd__V1__LoadCheckpoint *m, learner_backend_t be) {
  char err[512], real[4200];
  learner_pop_t *l = NULL;
  int lrc = ckpt_path_confine(m->path, s->opts.state_dir, s->opts.checkpoint_dirs, real, sizeof real, err, sizeof err);
  if (!lrc) lrc = ckpt_load_file(real, be, &l, err, sizeof err);
  if (lrc) rpc_reply_error(c, load_status(lrc), "%s", err);
  return l;
}

/* One chunk of an upload into the bounded uploads (struct upload, above).
 * Before the last chunk the call is answered Done and NULL returned; the
 * last one's whole file (its length and CRC-32 checked) is loaded: the
 * population, or NULL with the call answered. */
static learner_pop_t *load_chunk(server_t *s, rpc_call_t *c, const Dqnd__V1__LoadCheckpoint *m, learner_backend_t be) {
  char err[512];
  learner_pop_t *l = NULL;
  pthread_mutex_lock(&s->up_mu);
  const double now = now_s();
  upload_t **pp, *u = NULL;
  uint64_t open_bytes = 0; /* of the other uploads */
  int n_open = 0;
  for (pp = &s->uploads; *pp;) {
    upload_t *x = *pp;
    if (!strcmp(x->name, m->name)) {
      u = x;
    } else if (m->offset == 0 && now - x->touched > UPLOAD_IDLE_S) {
      log_warn(x->name, "an unfinished checkpoint upload (%llu of %llu bytes) idle for %.0f s dropped",
               (unsigned long long)x->n, (unsigned long long)x->total, now - x->touched);
      *pp = x->next;
      upload_free(x);
      continue;
    } else {
      open_bytes += x->total;
      n_open++;
    }
    pp = &x->next;
  }
  const uint64_t most = (uint64_t)s->opts.decode_budget * 16; /* dispatch_check_load's bound on one */
  if (m->offset == 0) { /* a new upload replaces an unfinished one of the name */
    const char *why = n_open >= UPLOAD_MAX_OPEN ? "uploads" : open_bytes + m->total > most ? "bytes" : NULL;
    upload_t *nu = why ? NULL : calloc(1, sizeof *nu);
    if (!nu) {
      pthread_mutex_unlock(&s->up_mu);
      if (!why)
        rpc_reply_error(c, CODE_RESOURCE_EXHAUSTED, "name: out of memory for a new upload");
      else if (!strcmp(why, "uploads"))
        rpc_reply_error(c, CODE_RESOURCE_EXHAUSTED,
                        "name: %d other checkpoint uploads are unfinished (at most %d at once)", n_open,
                        UPLOAD_MAX_OPEN);
      else
        rpc_reply_error(c, CODE_RESOURCE_EXHAUSTED,
                        "total: %llu bytes beside the %llu of unfinished uploads exceed %llu",
                        (unsigned long long)m->total, (unsigned long long)open_bytes, (unsigned long long)most);
      return NULL;
    }
    snprintf(nu->name, sizeof nu->name, "%s", m->name);
    nu->total = m->total;
    nu->touched = now;
    if (u) { /* only now: a refusal above leaves it as it was */
      for (pp = &s->uploads; *pp != u; pp = &(*pp)->next) {}
      *pp = u->next;
      upload_free(u);
    }
    nu->next = s->uploads;
    s->uploads = u = nu;
  } else if (!u || u->n != m->offset || u->total != m->total) {
    pthread_mutex_unlock(&s->up_mu);
    rpc_reply_error(c, CODE_FAILED_PRECONDITION, "offset: %llu does not continue an upload for '%s' (at %llu)",
                    (unsigned long long)m->offset, m->name, u ? (unsigned long long)u->n : 0ULL);
    return NULL;
  }
  if (u->n + m->data.len > u->cap) { /* doubling, up to the total (dispatch_check_load: n + len <= total) */
    uint64_t cap = u->cap ? 2 * u->cap : 1u << 20;
    if (cap < u->n + m->data.len) cap = u->n + m->data.len;
    if (cap > u->total) cap = u->total;
    uint8_t *d = realloc(u->data, (size_t)cap);
    if (!d) {
      pthread_mutex_unlock(&s->up_mu);
      rpc_reply_error(c, CODE_RESOURCE_EXHAUSTED, "data: cannot hold %llu bytes (the chunk may be sent again)",
                      (unsigned long long)cap);
      return NULL;
    }
    u->data = d, u->cap = cap;
  }
  /* an empty chunk (offset 0, total > 0, no data) arrives with data.data NULL: memcpy's
     arguments must not be NULL even for zero bytes (a fuzz find) */
  if (m->data.len) memcpy(u->data + u->n, m->data.data, m->data.len);
  u->n += m->data.len;
  u->touched = now;
  if (!m->last) {
    pthread_mutex_unlock(&s->up_mu);
    dispatch_reply_done(c);
    return NULL;
  }
  /* last chunk: detach the upload and load it */
  for (pp = &s->uploads; *pp != u; pp = &(*pp)->next) {}
  *pp = u->next;
  pthread_mutex_unlock(&s->up_mu);
  int bad = 0; /* the reply's status */
  if (u->n != u->total) {
    bad = CODE_DATA_LOSS;
    snprintf(err, sizeof err, "total: received %llu of %llu bytes", (unsigned long long)u->n, (unsigned long long)u->total);
  } else if (learner_crc32(0, u->data, u->n) != m->crc32) {
    bad = CODE_DATA_LOSS;
    snprintf(err, sizeof err, "crc32: the uploaded bytes do not match %08x", m->crc32);
  } else {
    int lrc = ckpt_load_mem(u->data, u->n, be, &l, err, sizeof err);
    if (lrc) bad = load_status(lrc);
  }
  upload_free(u);
  if (bad) {
    rpc_reply_error(c, bad, "%s", err);
    return NULL;
  }
  return l;
}

void dispatch_run_load_member(trainer_job_t *j);

/* LoadCheckpoint member_only: the loaded state (a lone trainer's) goes into
 * member m->member of t on t's worker (dispatch_run_load_member); consumes
 * t's reference and l */
static void load_member(server_t *s, rpc_call_t *c, const Dqnd__V1__LoadCheckpoint *m, trainer_t *t,
                        learner_pop_t *l) {
  const char *why = NULL;
  char err[512];
  if (learner_pop_size(l) != 1) {
    snprintf(err, sizeof err, "%s: the checkpoint holds %d members; a member's state is a lone trainer's",
             source_field(m), learner_pop_size(l));
    why = err;
  } else if (m->member >= (uint32_t)t->population) {
    snprintf(err, sizeof err, "member: %u is outside [0, %d)", m->member, t->population);
    why = err;
  }
  trainer_job_t *j = why ? NULL : trainer_job_new(s, t, c, dispatch_run_load_member);
  if (!j) {
    learner_pop_destroy(l);
    trainer_put(t);
    if (why) rpc_reply_error(c, CODE_INVALID_ARGUMENT, "%s", why);
    else rpc_reply_error(c, CODE_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  j->loaded = l;
  j->member = (int)m->member;
  j->diverged_ok = 1; /* a good state for a member of a trainer whose every member diverged */
  int rc = trainer_enqueue(j);
  if (rc) {
    trainer_job_free(j);
    rpc_reply_error(c, rc == WORKQ_FULL ? CODE_RESOURCE_EXHAUSTED : CODE_UNAVAILABLE,
                    "name: trainer '%s' %s", m->name, rc == WORKQ_FULL ? "queue is full" : "is shutting down");
  }
}

/* trainer worker: the loaded state into one member */
void dispatch_run_load_member(trainer_job_t *j) {
  trainer_t *t = j->t;
  char err[512];
  int rc = learner_pop_load_member(t->p, j->member, learner_pop_member(j->loaded, 0), err, sizeof err);
  learner_pop_destroy(j->loaded);
  j->loaded = NULL;
  if (rc) {
    trainer_note_error(t, rc, err); /* (a device error only) */
    rpc_reply_error(j->c, rc == LEARNER_EINVAL ? CODE_FAILED_PRECONDITION : dispatch_learner_code(rc), "%s", err);
    return;
  }
  log_info(t->name, "member %d's state replaced from a checkpoint", j->member);
  trainer_resume(t);
  trainer_snapshot(t, 1);
  dispatch_reply_member(j->c, t, j->member);
}

/* The loaded population becomes trainer m->name: a new one (create), or
 * the state the existing one swaps in on its worker (dispatch_run_swap) */
static void install_loaded(server_t *s, rpc_call_t *c, const Dqnd__V1__LoadCheckpoint *m, learner_pop_t *l) {
  char err[512];
  if (m->create) {
    learner_config_t cfg = *learner_config(learner_pop_member(l, 0));
    trainer_t *t;
    int code = trainer_register(s, m->name, l, &cfg, 0, &t, err, sizeof err);
    if (code) {
      learner_pop_destroy(l);
      rpc_reply_error(c, code, "%s", err);
      return;
    }
    log_info(t->name, "created from a checkpoint at step %llu", (unsigned long long)t->stats.step);
    dispatch_reply_trainer(c, t, 1);
    trainer_put(t);
    return;
  }
  trainer_t *t = trainer_get(s, m->name);
  if (!t) {
    learner_pop_destroy(l);
    rpc_reply_error(c, CODE_NOT_FOUND, "name: no trainer '%s' (set create to make one)", m->name);
    return;
  }
  if (m->member_only) {
    load_member(s, c, m, t, l);
    return;
  }
  const learner_config_t *lc = learner_config(learner_pop_member(l, 0));
  const learner_field_t *df = learner_config_shape_diff(&t->cfg, lc);
  if (df) {
    char mine[128], theirs[128];
    learner_config_get(&t->cfg, df, mine, sizeof mine);
    learner_config_get(lc, df, theirs, sizeof theirs);
    learner_pop_destroy(l);
    rpc_reply_error(c, CODE_FAILED_PRECONDITION,
                    "%s: the checkpoint's %s is %s, trainer '%s''s %s: a checkpoint loads into a trainer of its own "
                    "config, hyperparameters aside (create a new trainer from it instead)",
                    source_field(m), df->name, theirs, m->name, mine);
    trainer_put(t);
    return;
  }
  if (learner_pop_size(l) != t->population) {
    rpc_reply_error(c, CODE_FAILED_PRECONDITION,
                    "%s: the checkpoint holds %d members, trainer '%s' %d (create a new trainer from it instead)",
                    source_field(m), learner_pop_size(l), m->name, t->population);
    learner_pop_destroy(l);
    trainer_put(t);
    return;
  }
  trainer_job_t *j = trainer_job_new(s, t, c, dispatch_run_swap); /* t's reference is the job's from here */
  if (!j) {
    learner_pop_destroy(l);
    trainer_put(t);
    rpc_reply_error(c, CODE_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  j->loaded = l;
  j->any_state = 1; /* a good state replaces an errored one */
  int rc = trainer_enqueue(j);
  if (rc) {
    trainer_job_free(j); /* the learner and the reference */
    rpc_reply_error(c, rc == WORKQ_FULL ? CODE_RESOURCE_EXHAUSTED : CODE_UNAVAILABLE,
                    "name: trainer '%s' %s", m->name, rc == WORKQ_FULL ? "queue is full" : "is shutting down");
  }
}


/* admin worker: LoadCheckpoint: the learner from a path or an upload, then
 * installed as a new trainer or into the existing one */
void dispatch_run_load(trainer_job_t *j0) {
  server_t *s = j0->s;
  rpc_call_t *c = j0->c;
  const Dqnd__V1__LoadCheckpoint *m = rpc_request(c)->load_checkpoint;
  const learner_backend_t be = j0->backend == LEARNER_BACKEND_AUTO ? s->backend : j0->backend;
  learner_pop_t *l = m->path && m->path[0] ? load_path(s, c, m, be) : load_chunk(s, c, m, be);
  if (l) install_loaded(s, c, m, l);
}

/* trainer worker: swap in the population the admin worker built */
void dispatch_run_swap(trainer_job_t *j) {
  trainer_t *t = j->t;
  learner_pop_t *old = t->p;
  t->p = j->loaded;
  j->loaded = NULL;
  learner_pop_destroy(old);
  const learner_backend_t be = learner_backend(trainer_member(t, 0));
  const int64_t memory = learner_pop_memory_estimate(&t->cfg, t->population, be);
  pthread_mutex_lock(&t->mu);
  t->error[0] = 0; /* a good state replaces an errored one */
  t->diverged = 0;
  t->backend = be;
  t->memory = memory;
  pthread_mutex_unlock(&t->mu);
  char merr[256];
  if (ckpt_write_meta(t->dir, "backend", learner_backend_name(t->backend), merr, sizeof merr))
    log_warn(t->name, "%s (a restart may restore it on another backend)", merr);
  log_info(t->name, "state replaced from a checkpoint");
  trainer_snapshot(t, 1);
  dispatch_reply_trainer(j->c, t, 0);
}
