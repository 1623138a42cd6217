/*
 * learner.c — the backend-neutral half of the learner API: backend choice,
 * input validation and the calls into the backend. Every call is validated
 * here once, so the backends contain only their own work. The config table is
 * config.c, the state format state.c, the checksums checksum.c.
 */
#include "learner.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dqnd_build_config.h"
#include "learner_impl.h"
#include "seterr.h"
#include "state_format.h"

const char *learner_strerror(int s) {
  switch (s) {
  case LEARNER_OK: return "ok";
  case LEARNER_EINVAL: return "invalid argument";
  case LEARNER_ENOMEM: return "out of memory";
  case LEARNER_EDEVICE: return "device error";
  case LEARNER_ECORRUPT: return "corrupt or mismatched state";
  case LEARNER_EIO: return "i/o error";
  case LEARNER_EUNSUPPORTED: return "backend not available";
  case LEARNER_EEMPTY: return "not enough transitions in replay";
  case LEARNER_EDIVERGED: return "training diverged (a non-finite gradient)";
  case LEARNER_ESTOPPED: return "stopped early (its stop flag or deadline)";
  default: return "unknown error";
  }
}

const char *learner_backend_name(learner_backend_t b) {
  switch (b) {
  case LEARNER_BACKEND_AUTO: return "auto";
  case LEARNER_BACKEND_CPU: return "cpu";
  case LEARNER_BACKEND_CUDA: return "cuda";
  }
  return "?";
}

static int all_finite(const float *x, int64_t n) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &x[i], 4);
    bad |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u); /* exponent all ones: inf or nan */
  }
  return !bad;
}
static int all_below(const int32_t *a, int64_t n, int32_t hi) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; i++) bad |= (uint32_t)a[i] >= (uint32_t)hi; /* negative wraps high */
  return !bad;
}
static int all_flags(const uint8_t *d, int64_t n) {
  uint8_t bad = 0;
  for (int64_t i = 0; i < n; i++) bad |= d[i] & 0xfe;
  return !bad;
}

int learner_transitions_validate(const learner_config_t *c, const learner_transitions_t *t, char *err,
                                 size_t errlen) {
  if (t->n < 0) {
    seterr(err, errlen, "count: %lld is negative", (long long)t->n);
    return LEARNER_EINVAL;
  }
  if (t->n == 0) return LEARNER_OK;
  if (!t->states || !t->actions || !t->rewards || !t->next_states || !t->dones) {
    seterr(err, errlen, "%s: missing", !t->states ? "states" : !t->actions ? "actions" : !t->rewards ? "rewards"
                                       : !t->next_states ? "next_states" : "dones");
    return LEARNER_EINVAL;
  }
  int64_t A = learner_config_joint_actions(c), S = c->state_dim;
  /* fast path: one branch-free pass per array (integer tests vectorise);
   * only a batch that fails it is scanned again to name the element */
  if (all_finite(t->states, t->n * S) && all_finite(t->next_states, t->n * S) && all_finite(t->rewards, t->n) &&
      all_below(t->actions, t->n, (int32_t)A) && all_flags(t->dones, t->n) &&
      (!t->episode_ends || all_flags(t->episode_ends, t->n)))
    return LEARNER_OK;
  for (int64_t i = 0; i < t->n; i++) {
    if (t->actions[i] < 0 || t->actions[i] >= A) {
      seterr(err, errlen, "actions[%lld]: %d is outside [0, %lld)", (long long)i, t->actions[i], (long long)A);
      return LEARNER_EINVAL;
    }
    if (!isfinite(t->rewards[i])) {
      seterr(err, errlen, "rewards[%lld]: not finite", (long long)i);
      return LEARNER_EINVAL;
    }
    if (t->dones[i] > 1) {
      seterr(err, errlen, "dones[%lld]: %u is not 0 or 1", (long long)i, t->dones[i]);
      return LEARNER_EINVAL;
    }
    if (t->episode_ends && t->episode_ends[i] > 1) {
      seterr(err, errlen, "episode_ends[%lld]: %u is not 0 or 1", (long long)i, t->episode_ends[i]);
      return LEARNER_EINVAL;
    }
    for (int64_t k = 0; k < S; k++) {
      if (!isfinite(t->states[i * S + k])) {
        seterr(err, errlen, "states[%lld][%lld]: not finite", (long long)i, (long long)k);
        return LEARNER_EINVAL;
      }
      if (!isfinite(t->next_states[i * S + k])) {
        seterr(err, errlen, "next_states[%lld][%lld]: not finite", (long long)i, (long long)k);
        return LEARNER_EINVAL;
      }
    }
  }
  return LEARNER_OK;
}

/* ---------------------------------------------------------------- dispatch */

int learner_cuda_available(char *name, size_t namelen) {
#if DQN_HAVE_CUDA
  return cuda_probe(name, namelen);
#else
  if (name && namelen) snprintf(name, namelen, "CUDA backend not built");
  return 0;
#endif
}

int learner_device_memory(int64_t *used, int64_t *total) {
#if DQN_HAVE_CUDA
  size_t free_b = 0, total_b = 0;
  if (cuda_mem_info(&free_b, &total_b)) return LEARNER_EDEVICE;
  *used = (int64_t)(total_b - free_b);
  *total = (int64_t)total_b;
  return LEARNER_OK;
#else
  (void)used, (void)total;
  return LEARNER_EUNSUPPORTED;
#endif
}

/* AUTO resolves to CUDA only when the CUDA learner is built and a device is
 * usable; the probe alone (DQN_HAVE_CUDA) does not make a backend. */
learner_backend_t learner_backend_default(void) {
#if DQN_HAVE_CUDA_LEARNER
  return learner_cuda_available(NULL, 0) ? LEARNER_BACKEND_CUDA : LEARNER_BACKEND_CPU;
#else
  return LEARNER_BACKEND_CPU;
#endif
}

/* Attention (docs/learner.md §7), ensemble heads and priors (§8) run on both backends. */
static const learner_backend_ops_t *pick_backend(const learner_config_t *c, learner_backend_t *b, char *err,
                                                 size_t errlen) {
  if (*b == LEARNER_BACKEND_AUTO) *b = learner_backend_default();
  if (*b == LEARNER_BACKEND_CPU) return &learner_cpu_ops;
#if DQN_HAVE_CUDA_LEARNER
  char why[256];
  if (!cuda_probe(why, sizeof why)) {
    seterr(err, errlen, "backend: cuda is not usable here (%s)", why);
    return NULL;
  }
  if (c->dt_layers && !learner_cuda_ops.dt_step) {
    seterr(err, errlen, "dt_layers: the cuda backend has no Decision Transformer kernels yet; use backend=cpu");
    return NULL;
  }
  return &learner_cuda_ops;
#else
  seterr(err, errlen, "backend: this build has no CUDA learner");
  return NULL;
#endif
}

/* ----------------------------------------------------------------- memory */

static const learner_backend_ops_t *ops_of(learner_backend_t be) {
  if (be == LEARNER_BACKEND_AUTO) be = learner_backend_default();
#if DQN_HAVE_CUDA_LEARNER
  if (be == LEARNER_BACKEND_CUDA) return &learner_cuda_ops;
#endif
  return &learner_cpu_ops;
}

/* What every backend holds, from the registries: the state's tensors as the
 * section registry lists them (parameters, Adam moments, priors, the replay's
 * columns: a row costs what it costs in a checkpoint), the gradient, and
 * each slot's episode bounds (her.h: two int64). The PER tree, whose layout
 * is a backend's, and the workspace are the backend's own estimate. */
static int64_t state_bytes(const learner_config_t *c, int64_t *replay) {
  const int64_t P = learner_config_num_params(c), pr = learner_config_num_prior(c), C = c->replay_capacity;
  const int64_t ndt = learner_config_num_dt(c);
  int64_t total = P * 4 /* the gradient */ + C * 16 /* episode bounds */;
  *replay = C * 16;
  for (int i = 0; i < state_num_sections; i++) {
    const state_section_t *s = &state_sections[i];
    if (s->per_only) continue; /* the leaves are part of the backend's tree */
    if (s->unit == STATE_UNIT_PARAMS) total += P * 4;
    else if (s->unit == STATE_UNIT_PRIOR) total += pr * 4;
    else if (s->unit == STATE_UNIT_DT) total += ndt * 4;
    else if (s->unit == STATE_UNIT_FIXED) total += s->row_c;
    else {
      const int64_t rows = C * ((int64_t)s->row_s * c->state_dim + s->row_c);
      total += rows, *replay += rows;
    }
  }
  return total;
}

int64_t learner_memory_estimate(const learner_config_t *c, learner_backend_t be) {
  int64_t replay;
  return state_bytes(c, &replay) + ops_of(be)->workspace_estimate(c);
}

int64_t learner_memory_population_shared(learner_backend_t be) {
  if (be == LEARNER_BACKEND_AUTO) be = learner_backend_default();
  return ops_of(be)->population_shared;
}

int64_t learner_memory_available(learner_backend_t be) {
  if (be == LEARNER_BACKEND_AUTO) be = learner_backend_default();
  return ops_of(be)->memory_free();
}

int learner_memory_fits(const learner_config_t *c, learner_backend_t be, char *err, size_t errlen) {
  if (be == LEARNER_BACKEND_AUTO) be = learner_backend_default();
  const int64_t need = learner_memory_estimate(c, be), avail = ops_of(be)->memory_free();
  if (avail < 0 || need <= avail) return LEARNER_OK;
  /* the message names the field behind the largest part */
  int64_t replay;
  const int64_t state = state_bytes(c, &replay), net = state - replay, work = need - state;
  const char *field = replay >= net && replay >= work ? "replay_capacity"
                      : work >= net                   ? (c->dt_layers > 0 ? "batch (or the dt_ fields)" : "batch")
                                                      : "trunk_h1 (the network's size)";
  seterr(err, errlen,
         "%s: the trainer needs ~%lld MiB of %s memory (the replay ~%lld, the network and its optimiser ~%lld, the "
         "step's and Act's workspace ~%lld), %lld MiB are available",
         field, (long long)(need >> 20), be == LEARNER_BACKEND_CUDA ? "GPU" : "host", (long long)(replay >> 20),
         (long long)(net >> 20), (long long)(work >> 20), (long long)(avail >> 20));
  return LEARNER_ENOMEM;
}

int learner_create(const learner_config_t *c, learner_backend_t backend, learner_t **out, char *err,
                   size_t errlen) {
  *out = NULL;
  int rc = learner_config_validate(c, err, errlen);
  if (rc) return rc;
  const learner_backend_ops_t *ops = pick_backend(c, &backend, err, errlen);
  if (!ops) return LEARNER_EUNSUPPORTED;
  learner_t *l = calloc(1, sizeof *l);
  if (!l) {
    seterr(err, errlen, "out of memory");
    return LEARNER_ENOMEM;
  }
  l->ops = ops;
  l->cfg = *c;
  l->n_dt = learner_config_num_dt(c);
  l->backend = backend;
  if ((rc = learner_memory_fits(c, backend, err, errlen))) {
    free(l);
    return rc;
  }
  rc = ops->create(c, &l->impl, err, errlen);
  if (rc) {
    free(l);
    return rc;
  }
  *out = l;
  return LEARNER_OK;
}

/* ------------------------------------------------------------------ groups */

int learner_group_create(const learner_config_t *c, int n, learner_backend_t backend, learner_group_t **out,
                         char *err, size_t errlen) {
  *out = NULL;
  const learner_backend_ops_t *ops = pick_backend(c, &backend, err, errlen);
  if (!ops) return LEARNER_EUNSUPPORTED;
  if (!ops->group_create || n < 2) return LEARNER_OK;
  learner_group_t *g = calloc(1, sizeof *g);
  if (!g) {
    seterr(err, errlen, "out of memory");
    return LEARNER_ENOMEM;
  }
  char why[512];
  int rc = ops->group_create(c, n, &g->impl, why, sizeof why);
  if (rc) {
    free(g);
    if (rc == LEARNER_EUNSUPPORTED) return LEARNER_OK; /* each member steps alone */
    seterr(err, errlen, "%s", why);
    return rc;
  }
  g->ops = ops, g->backend = backend, g->n = n;
  *out = g;
  return LEARNER_OK;
}

void learner_group_destroy(learner_group_t *g) {
  if (!g) return;
  g->ops->group_destroy(g->impl);
  free(g);
}

int learner_create_in(const learner_config_t *c, learner_backend_t backend, learner_group_t *g, int i,
                      learner_t **out, char *err, size_t errlen) {
  if (!g) return learner_create(c, backend, out, err, errlen);
  *out = NULL;
  int rc = learner_config_validate(c, err, errlen);
  if (rc) return rc;
  learner_t *l = calloc(1, sizeof *l);
  if (!l) {
    seterr(err, errlen, "out of memory");
    return LEARNER_ENOMEM;
  }
  l->ops = g->ops, l->cfg = *c, l->backend = g->backend, l->n_dt = learner_config_num_dt(c);
  if ((rc = g->ops->group_member(g->impl, i, c, &l->impl, err, errlen))) {
    free(l);
    return rc;
  }
  *out = l;
  return LEARNER_OK;
}

void learner_destroy(learner_t *l) {
  if (!l) return;
  l->ops->destroy(l->impl);
  free(l);
}

const learner_config_t *learner_config(const learner_t *l) { return &l->cfg; }
learner_backend_t learner_backend(const learner_t *l) { return l->backend; }

int learner_submit(learner_t *l, const learner_transitions_t *t, char *err, size_t errlen) {
  int rc = learner_transitions_validate(&l->cfg, t, err, errlen);
  if (rc || t->n == 0) return rc;
  return l->ops->submit(l->impl, t, err, errlen);
}

int learner_submit_checked(learner_t *l, const learner_transitions_t *t, char *err, size_t errlen) {
  return t->n == 0 ? LEARNER_OK : l->ops->submit(l->impl, t, err, errlen);
}

volatile int *learner_stop_flag(learner_t *l) { return &l->stop; }

int learner_step_until(learner_t *l, int n, learner_stop_t *stop, learner_stats_t *st, char *err, size_t errlen) {
  if (n < 0 || n > LEARNER_MAX_STEPS) {
    seterr(err, errlen, "n: %d is outside [0, %d]", n, LEARNER_MAX_STEPS);
    return LEARNER_EINVAL;
  }
  learner_stop_ctl_t ctl = {&l->stop, stop ? stop->deadline : 0, LEARNER_STOP_NONE};
  int rc = l->ops->step(l->impl, n, &ctl, st, err, errlen);
  if (stop) stop->why = ctl.why;
  return rc;
}

int learner_step(learner_t *l, int n, learner_stats_t *st, char *err, size_t errlen) {
  return learner_step_until(l, n, NULL, st, err, errlen);
}

int learner_act(learner_t *l, const float *states, int n, int noisy, int32_t *actions, float *q, char *err,
                size_t errlen) {
  return learner_act_episode(l, states, n, noisy, 0, actions, q, NULL, err, errlen);
}

int learner_act_episode(learner_t *l, const float *states, int n, int noisy, int64_t episode, int32_t *actions,
                        float *q, float *q_var, char *err, size_t errlen) {
  if (n < 1 || n > LEARNER_MAX_ACT_STATES) {
    seterr(err, errlen, "count: %d states is outside [1, %d]", n, LEARNER_MAX_ACT_STATES);
    return LEARNER_EINVAL;
  }
  int64_t S = l->cfg.state_dim;
  for (int64_t i = 0; i < (int64_t)n * S; i++)
    if (!isfinite(states[i])) {
      seterr(err, errlen, "states[%lld][%lld]: not finite", (long long)(i / S), (long long)(i % S));
      return LEARNER_EINVAL;
    }
  return learner_act_checked(l, states, n, noisy, episode, actions, q, q_var, err, errlen);
}

int learner_act_checked(learner_t *l, const float *states, int n, int noisy, int64_t episode, int32_t *actions,
                        float *q, float *q_var, char *err, size_t errlen) {
  int rc = l->ops->act(l->impl, states, n, noisy, episode, actions, q, q_var, err, errlen);
  /* the CPU backend checks every state's Q itself; here, the ones asked for
   * (either backend): NaN Q values (a diverged network's) are no answer */
  const int64_t qw = learner_config_q_width(&l->cfg);
  for (int64_t i = 0; !rc && q && i < (int64_t)n * qw; i++)
    if (!isfinite(q[i]) || (q_var && !isfinite(q_var[i]))) {
      seterr(err, errlen, "state %lld: Q values are not finite: the forward overflows (a diverged network's weights, "
             "or states too large for it)", (long long)(i / qw));
      rc = LEARNER_EDIVERGED;
    }
  return rc;
}

int learner_sync_target(learner_t *l, float tau) {
  if (!(tau <= 1.0f) || isnan(tau)) return LEARNER_EINVAL;
  return l->ops->sync_target(l->impl, tau);
}

void learner_get_hparams(const learner_t *l, learner_hparams_t *hp) { *hp = l->cfg.hp; }

int learner_set_hparams(learner_t *l, const learner_hparams_t *hp, char *err, size_t errlen) {
  int rc = learner_hparams_validate(hp, err, errlen);
  if (rc) return rc;
  rc = l->ops->set_hparams(l->impl, hp);
  if (rc == 0) l->cfg.hp = *hp;
  return rc;
}

int learner_get_stats(const learner_t *l, learner_stats_t *st) {
  learner_counters_t c;
  int rc = l->ops->get_counters(l->impl, &c);
  if (rc) { /* (a device error): zeros, never what the stack held */
    memset(st, 0, sizeof *st);
    return rc;
  }
  *st = c.last;
  st->step = c.step;
  st->replay_size = c.replay_size;
  st->replay_total = c.replay_total;
  return LEARNER_OK;
}

/* --------------------------------------------------------------- sections */

/* the buffer of section `sec` in the backend's memory, and its length */
static char *section_place(const learner_t *l, const state_section_t *sec, int64_t *bytes) {
  learner_bufs_t b;
  memset(&b, 0, sizeof b);
  l->ops->bufs(l->impl, &b);
  char *p = *(char **)((char *)&b + sec->buf);
  const learner_config_t *c = &l->cfg;
  int64_t n = 0;
  if (sec->unit == STATE_UNIT_PARAMS) n = learner_config_num_params(c) * 4;
  else if (sec->unit == STATE_UNIT_PRIOR) n = learner_config_num_prior(c) * 4;
  else if (sec->unit == STATE_UNIT_DT) n = l->n_dt * 4;
  else if (sec->unit == STATE_UNIT_FIXED) n = sec->row_c;
  else n = b.size * ((int64_t)sec->row_s * c->state_dim + sec->row_c);
  *bytes = p ? n : 0;
  return p;
}

int64_t learner_section_bytes(const learner_t *l, uint32_t tag) {
  const state_section_t *sec = state_section_find(tag);
  int64_t n = 0;
  if (sec) section_place(l, sec, &n);
  return n;
}

int learner_section_read(const learner_t *l, uint32_t tag, int64_t off, int64_t n, void *dst) {
  const state_section_t *sec = state_section_find(tag);
  int64_t b = 0;
  char *p = sec ? section_place(l, sec, &b) : NULL;
  if (!p || off < 0 || n < 0 || off + n > b) return LEARNER_EINVAL;
  return l->ops->copy(l->impl, dst, p + off, (size_t)n, 0);
}

int learner_section_write(learner_t *l, uint32_t tag, int64_t off, int64_t n, const void *src) {
  const state_section_t *sec = state_section_find(tag);
  int64_t b = 0;
  char *p = sec ? section_place(l, sec, &b) : NULL;
  if (!p || off < 0 || n < 0 || off + n > b) return LEARNER_EINVAL;
  return l->ops->copy(l->impl, p + off, src, (size_t)n, 1);
}

int learner_get_params(const learner_t *l, int which, float *dst, int64_t n) {
  int sec = which ? SEC_TARGET : SEC_ONLINE;
  if (n * 4 != learner_section_bytes(l, (uint32_t)sec)) return LEARNER_EINVAL;
  return learner_section_read(l, (uint32_t)sec, 0, n * 4, dst);
}

/* 1 when the first n_secs of online, target, Adam m, Adam v are finite (and v >= 0), 0 if not, or an error */
static int sections_finite(learner_t *l, int n_secs) {
  enum { CH = 1 << 16 };
  float *buf = malloc(sizeof(float) * CH);
  if (!buf) return LEARNER_ENOMEM;
  /* the DT's sections have 0 bytes without a Decision Transformer */
  int ok = 1, rc = 0, secs[7] = {SEC_ONLINE, SEC_TARGET, SEC_ADAM_M, SEC_ADAM_V, SEC_DT_PARAMS, SEC_DT_ADAM_M, SEC_DT_ADAM_V};
  for (int s = 0; s < n_secs && ok && !rc; s++) {
    int64_t bytes = learner_section_bytes(l, (uint32_t)secs[s]);
    for (int64_t off = 0; off < bytes && ok && !rc; off += (int64_t)sizeof(float) * CH) {
      int64_t k = bytes - off < (int64_t)sizeof(float) * CH ? bytes - off : (int64_t)sizeof(float) * CH;
      rc = learner_section_read(l, (uint32_t)secs[s], off, k, buf);
      if (!rc) ok = all_finite(buf, k / 4);
      for (int64_t i = 0; !rc && ok && (secs[s] == SEC_ADAM_V || secs[s] == SEC_DT_ADAM_V) && i < k / 4; i++)
        ok = buf[i] >= 0;
    }
  }
  free(buf);
  return rc ? rc : ok;
}

int learner_params_finite(learner_t *l) { return sections_finite(l, 2); }
int learner_state_finite(learner_t *l) { return sections_finite(l, 7); }

int learner_set_params(learner_t *l, int which, const float *src, int64_t n) {
  int sec = which ? SEC_TARGET : SEC_ONLINE;
  if (n * 4 != learner_section_bytes(l, (uint32_t)sec)) return LEARNER_EINVAL;
  for (int64_t i = 0; i < n; i++)
    if (!isfinite(src[i])) return LEARNER_EINVAL;
  return learner_section_write(l, (uint32_t)sec, 0, n * 4, src);
}

int learner_read_replay(learner_t *l, int64_t first, int64_t n, float *states, int32_t *actions, float *rewards,
                        float *next_states, uint8_t *dones, int64_t *episode_ids) {
  learner_counters_t c;
  int rc = l->ops->get_counters(l->impl, &c);
  if (rc) return rc;
  if (first < 0 || n < 0 || first + n > c.replay_size) return LEARNER_EINVAL;
  /* the replay's columns, as the state format registers them */
  void *dst[256] = {0};
  dst[SEC_R_S] = states, dst[SEC_R_A] = actions, dst[SEC_R_R] = rewards;
  dst[SEC_R_S2] = next_states, dst[SEC_R_DONE] = dones, dst[SEC_R_EP] = episode_ids;
  for (int i = 0; i < state_num_sections; i++) {
    const state_section_t *s = &state_sections[i];
    int64_t width = (int64_t)s->row_s * l->cfg.state_dim + s->row_c;
    if (s->replay && dst[s->tag] && n &&
        (rc = learner_section_read(l, s->tag, first * width, n * width, dst[s->tag])))
      return rc;
  }
  return LEARNER_OK;
}
