/*
 * learner.c — the backend-neutral half of the learner API: the config table,
 * validation, backend choice, and the serialised state format. Every call is
 * validated here once, so the backends contain only their own work.
 */
#include "learner.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "dqnd_build_config.h"
#include "net_layout.h"
#include "suggest.h"

struct learner {
  const learner_backend_ops_t *ops;
  void *impl;
  learner_config_t cfg; /* .hp kept current by learner_set_hparams */
  learner_backend_t backend;
};

static void seterr(char *err, size_t n, const char *fmt, ...) {
  if (!err || !n) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, n, fmt, ap);
  va_end(ap);
}

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

/* ------------------------------------------------------------ config table */

#define CF(f) offsetof(learner_config_t, f)
#define HF(f) (offsetof(learner_config_t, hp) + offsetof(learner_hparams_t, f))
const learner_field_t learner_fields[] = {
    {"state_dim", LCF_INT32, CF(state_dim), 1, 65536, 0, "length of a state vector"},
    {"trunk_h1", LCF_INT32, CF(trunk_h1), 1, 16384, 0, "first trunk layer width"},
    {"trunk_h2", LCF_INT32, CF(trunk_h2), 1, 16384, 0, "second trunk layer width (h)"},
    {"value_hidden", LCF_INT32, CF(value_hidden), 1, 16384, 0, "value head hidden width"},
    {"adv_hidden", LCF_INT32, CF(adv_hidden), 1, 16384, 0, "advantage (branch) hidden width"},
    {"atoms", LCF_INT32, CF(atoms), 2, LEARNER_MAX_ATOMS, 0, "C51 atoms"},
    {"v_min", LCF_FLOAT, CF(v_min), -1e6, 1e6, 0, "lowest atom value"},
    {"v_max", LCF_FLOAT, CF(v_max), -1e6, 1e6, 0, "highest atom value"},
    {"branches", LCF_BRANCHES, CF(branch_sizes), 1, 65536, 0, "action branch sizes, e.g. 9,3,3"},
    {"batch", LCF_INT32, CF(batch), 1, 65536, 0, "training batch size"},
    {"replay_capacity", LCF_INT64, CF(replay_capacity), 1, 1LL << 31, 0, "replay ring capacity"},
    {"leaky_slope", LCF_FLOAT, CF(leaky_slope), 0, 1, 0, "LeakyReLU negative slope"},
    {"noisy", LCF_BOOL, CF(noisy), 0, 1, 0, "NoisyNet (factorised Gaussian) head layers"},
    {"noisy_sigma0", LCF_FLOAT, CF(noisy_sigma0), 0, 10, 0, "NoisyNet initial sigma0"},
    {"double_dqn", LCF_BOOL, CF(double_dqn), 0, 1, 0, "Double DQN target action selection"},
    {"prioritized", LCF_BOOL, CF(prioritized), 0, 1, 0, "prioritised replay (else uniform)"},
    {"per_alpha", LCF_FLOAT, CF(per_alpha), 0, 10, 0, "PER priority exponent alpha"},
    {"seed", LCF_UINT64, CF(seed), 0, 1.8446744073709552e19, 0, "Philox key: init, sampling, noise"},
    {"tensor_cores", LCF_BOOL, CF(tensor_cores), 0, 1, 0, "CUDA: TF32 operands on the tensor cores, fp32 accumulation (gradients within ~5e-2 of fp32; the CPU backend runs fp32)"},
    {"lr", LCF_FLOAT, HF(lr), 0, 10, 1, "AdamW learning rate"},
    {"gamma", LCF_FLOAT, HF(gamma), 0, 1, 1, "discount factor"},
    {"tau", LCF_FLOAT, HF(tau), 0, 1, 1, "Polyak factor per step (0 = hard copies)"},
    {"target_period", LCF_INT32, HF(target_period), 0, 1e9, 1, "steps between hard target copies"},
    {"weight_decay", LCF_FLOAT, HF(weight_decay), 0, 10, 1, "AdamW decoupled weight decay"},
    {"grad_clip", LCF_FLOAT, HF(grad_clip), 0, 1e9, 1, "global grad-norm clip (0 = off)"},
    {"adam_beta1", LCF_FLOAT, HF(adam_beta1), 0, 0.999999, 1, "Adam beta1"},
    {"adam_beta2", LCF_FLOAT, HF(adam_beta2), 0, 0.99999999, 1, "Adam beta2"},
    {"adam_eps", LCF_FLOAT, HF(adam_eps), 1e-12, 1, 1, "Adam epsilon"},
    {"per_beta0", LCF_FLOAT, HF(per_beta0), 0, 1, 1, "PER IS exponent at step 0"},
    {"per_beta_steps", LCF_INT64, HF(per_beta_steps), 0, 1e15, 1, "steps to anneal beta to 1"},
    {"per_eps", LCF_FLOAT, HF(per_eps), 1e-12, 1, 1, "PER priority epsilon"},
    {"samples_per_insert", LCF_FLOAT, HF(samples_per_insert), 0, 1e6, 1,
     "daemon: train as data arrives, this many samples per inserted transition (0 = off)"},
    {"min_replay", LCF_INT64, HF(min_replay), 0, 1LL << 40, 1, "daemon: transitions held before continuous training starts"},
};
const int learner_num_fields = (int)(sizeof learner_fields / sizeof learner_fields[0]);

void learner_config_default(learner_config_t *c) {
  memset(c, 0, sizeof *c);
  c->state_dim = 64;
  c->trunk_h1 = 256;
  c->trunk_h2 = 256;
  c->value_hidden = 128;
  c->adv_hidden = 128;
  c->atoms = 51;
  c->v_min = -10.0f;
  c->v_max = 10.0f;
  c->n_branches = 3;
  c->branch_sizes[0] = 9;
  c->branch_sizes[1] = 3;
  c->branch_sizes[2] = 3;
  c->batch = 256;
  c->replay_capacity = 1000000;
  c->leaky_slope = 0.01f;
  c->noisy = 0;
  c->noisy_sigma0 = 0.5f;
  c->double_dqn = 1;
  c->prioritized = 1;
  c->per_alpha = 0.5f;
  c->seed = 1;
  c->tensor_cores = 0;
  c->hp.lr = 1e-4f;
  c->hp.gamma = 0.99f;
  c->hp.tau = 0.0f;
  c->hp.target_period = 1000;
  c->hp.weight_decay = 0.0f;
  c->hp.grad_clip = 10.0f;
  c->hp.adam_beta1 = 0.9f;
  c->hp.adam_beta2 = 0.999f;
  c->hp.adam_eps = 1e-8f;
  c->hp.per_beta0 = 0.4f;
  c->hp.per_beta_steps = 1000000;
  c->hp.per_eps = 1e-6f;
}

const learner_field_t *learner_field_find(const char *name) {
  for (int i = 0; i < learner_num_fields; i++)
    if (strcmp(learner_fields[i].name, name) == 0) return &learner_fields[i];
  return NULL;
}

static double field_value(const learner_config_t *c, const learner_field_t *f) {
  const char *p = (const char *)c + f->offset;
  switch (f->type) {
  case LCF_INT32:
  case LCF_BOOL: return *(const int32_t *)p;
  case LCF_INT64: return (double)*(const int64_t *)p;
  case LCF_UINT64: return (double)*(const uint64_t *)p;
  case LCF_FLOAT: return *(const float *)p;
  case LCF_BRANCHES: return 0;
  }
  return 0;
}

int learner_config_get(const learner_config_t *c, const learner_field_t *f, char *buf, size_t n) {
  const char *p = (const char *)c + f->offset;
  switch (f->type) {
  case LCF_INT32:
  case LCF_BOOL: return snprintf(buf, n, "%" PRId32, *(const int32_t *)p);
  case LCF_INT64: return snprintf(buf, n, "%" PRId64, *(const int64_t *)p);
  case LCF_UINT64: return snprintf(buf, n, "%" PRIu64, *(const uint64_t *)p);
  case LCF_FLOAT: return snprintf(buf, n, "%.9g", (double)*(const float *)p);
  case LCF_BRANCHES: {
    int w = 0;
    buf[0] = 0;
    for (int d = 0; d < c->n_branches && w >= 0 && (size_t)w < n; d++)
      w += snprintf(buf + w, n - (size_t)w, d ? ",%d" : "%d", c->branch_sizes[d]);
    return w;
  }
  }
  return -1;
}

int learner_config_set(learner_config_t *c, const char *name, const char *value, char *err, size_t errlen) {
  const learner_field_t *f = learner_field_find(name);
  if (!f) {
    suggest_t sg;
    suggest_init(&sg, name);
    for (int i = 0; i < learner_num_fields; i++) suggest_try(&sg, learner_fields[i].name);
    if (sg.best) seterr(err, errlen, "%s: unknown config field (did you mean '%s'?)", name, sg.best);
    else seterr(err, errlen, "%s: unknown config field (dqnctl fields lists them)", name);
    return LEARNER_EINVAL;
  }
  char *p = (char *)c + f->offset, *end = NULL;
  errno = 0;
  if (f->type == LCF_BRANCHES) {
    int32_t tmp[LEARNER_MAX_BRANCHES];
    int nb = 0;
    const char *s = value;
    while (*s) {
      if (nb == LEARNER_MAX_BRANCHES) {
        seterr(err, errlen, "branches: more than %d branches", LEARNER_MAX_BRANCHES);
        return LEARNER_EINVAL;
      }
      long v = strtol(s, &end, 10);
      if (end == s || errno || v < 1 || v > 65536) {
        seterr(err, errlen, "branches: '%s' is not a list of sizes in [1, 65536] like 9,3,3", value);
        return LEARNER_EINVAL;
      }
      tmp[nb++] = (int32_t)v;
      s = end;
      if (*s == ',') s++;
      else if (*s) {
        seterr(err, errlen, "branches: unexpected '%c' in '%s'", *s, value);
        return LEARNER_EINVAL;
      }
    }
    if (nb == 0) {
      seterr(err, errlen, "branches: empty (need at least one branch)");
      return LEARNER_EINVAL;
    }
    c->n_branches = nb;
    memset(c->branch_sizes, 0, sizeof c->branch_sizes);
    memcpy(c->branch_sizes, tmp, sizeof(int32_t) * (size_t)nb);
    return LEARNER_OK;
  }
  double v;
  if (f->type == LCF_UINT64) {
    if (value[0] == '-') goto bad;
    unsigned long long u = strtoull(value, &end, 0);
    if (end == value || *end || errno) goto bad;
    *(uint64_t *)p = u;
    return LEARNER_OK;
  }
  if (f->type == LCF_BOOL && (!strcmp(value, "true") || !strcmp(value, "false"))) {
    *(int32_t *)p = value[0] == 't';
    return LEARNER_OK;
  }
  v = strtod(value, &end);
  if (end == value || *end || errno || !isfinite(v)) goto bad;
  if (v < f->min || v > f->max) {
    seterr(err, errlen, "%s: %s is outside [%g, %g]", f->name, value, f->min, f->max);
    return LEARNER_EINVAL;
  }
  if (f->type != LCF_FLOAT && v != floor(v)) goto bad;
  switch (f->type) {
  case LCF_INT32:
  case LCF_BOOL: *(int32_t *)p = (int32_t)v; break;
  case LCF_INT64: *(int64_t *)p = (int64_t)v; break;
  case LCF_FLOAT: *(float *)p = (float)v; break;
  default: break;
  }
  return LEARNER_OK;
bad:
  seterr(err, errlen, "%s: '%s' is not a valid %s", f->name, value,
         f->type == LCF_FLOAT ? "number" : (f->type == LCF_BOOL ? "boolean (0/1/true/false)" : "integer"));
  return LEARNER_EINVAL;
}

size_t learner_config_to_text(const learner_config_t *c, char *buf, size_t n) {
  size_t w = 0;
  char v[512];
  for (int i = 0; i < learner_num_fields; i++) {
    learner_config_get(c, &learner_fields[i], v, sizeof v);
    int k = snprintf(buf + (w < n ? w : n), w < n ? n - w : 0, "%s=%s\n", learner_fields[i].name, v);
    w += (size_t)k;
  }
  return w;
}

int learner_config_from_text(learner_config_t *c, const char *text, size_t len, char *err, size_t errlen) {
  learner_config_default(c);
  size_t i = 0;
  while (i < len) {
    size_t j = i;
    while (j < len && text[j] != '\n') j++;
    char line[600];
    size_t ll = j - i;
    if (ll >= sizeof line) {
      seterr(err, errlen, "config: line too long");
      return LEARNER_EINVAL;
    }
    memcpy(line, text + i, ll);
    line[ll] = 0;
    i = j + 1;
    if (!ll || line[0] == '#') continue;
    char *eq = strchr(line, '=');
    if (!eq) {
      seterr(err, errlen, "config: line '%s' has no '='", line);
      return LEARNER_EINVAL;
    }
    *eq = 0;
    int rc = learner_config_set(c, line, eq + 1, err, errlen);
    if (rc) return rc;
  }
  return learner_config_validate(c, err, errlen);
}

uint64_t learner_config_hash(const learner_config_t *c) {
  char buf[8192];
  size_t n = learner_config_to_text(c, buf, sizeof buf);
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n && i < sizeof buf; i++) {
    h ^= (unsigned char)buf[i];
    h *= 1099511628211ULL;
  }
  return h;
}

int learner_config_same_shape(const learner_config_t *a, const learner_config_t *b) {
  for (int i = 0; i < learner_num_fields; i++) {
    const learner_field_t *f = &learner_fields[i];
    if (f->hparam) continue;
    char x[512], y[512];
    learner_config_get(a, f, x, sizeof x);
    learner_config_get(b, f, y, sizeof y);
    if (strcmp(x, y)) return 0;
  }
  return 1;
}

int learner_config_joint_actions(const learner_config_t *c) {
  int64_t p = 1;
  for (int d = 0; d < c->n_branches; d++) {
    p *= c->branch_sizes[d];
    if (p > LEARNER_MAX_JOINT_ACTIONS) return -1;
  }
  return (int)p;
}

int learner_config_q_width(const learner_config_t *c) {
  int s = 0;
  for (int d = 0; d < c->n_branches; d++) s += c->branch_sizes[d];
  return s;
}

int64_t learner_config_num_params(const learner_config_t *c) {
  net_layout_t L;
  net_layout_init(&L, c);
  return L.n_params;
}

int learner_hparams_validate(const learner_hparams_t *hp, char *err, size_t errlen) {
  learner_config_t tmp;
  learner_config_default(&tmp);
  tmp.hp = *hp;
  for (int i = 0; i < learner_num_fields; i++) {
    const learner_field_t *f = &learner_fields[i];
    if (!f->hparam) continue;
    double v = field_value(&tmp, f);
    if (!isfinite(v) || v < f->min || v > f->max) {
      char s[64];
      learner_config_get(&tmp, f, s, sizeof s);
      seterr(err, errlen, "%s: %s is outside [%g, %g]", f->name, s, f->min, f->max);
      return LEARNER_EINVAL;
    }
  }
  if (hp->tau == 0 && hp->target_period == 0) {
    seterr(err, errlen, "target_period: must be >= 1 when tau is 0 (else the target never updates)");
    return LEARNER_EINVAL;
  }
  return LEARNER_OK;
}

int learner_config_validate(const learner_config_t *c, char *err, size_t errlen) {
  for (int i = 0; i < learner_num_fields; i++) {
    const learner_field_t *f = &learner_fields[i];
    if (f->type == LCF_BRANCHES || f->type == LCF_UINT64) continue;
    double v = field_value(c, f);
    if (!isfinite(v) || v < f->min || v > f->max) {
      char s[64];
      learner_config_get(c, f, s, sizeof s);
      seterr(err, errlen, "%s: %s is outside [%g, %g]", f->name, s, f->min, f->max);
      return LEARNER_EINVAL;
    }
  }
  if (c->n_branches < 1 || c->n_branches > LEARNER_MAX_BRANCHES) {
    seterr(err, errlen, "branches: need 1..%d branches, got %d", LEARNER_MAX_BRANCHES, c->n_branches);
    return LEARNER_EINVAL;
  }
  for (int d = 0; d < c->n_branches; d++)
    if (c->branch_sizes[d] < 1 || c->branch_sizes[d] > 65536) {
      seterr(err, errlen, "branches[%d]: size %d is outside [1, 65536]", d, c->branch_sizes[d]);
      return LEARNER_EINVAL;
    }
  if (learner_config_joint_actions(c) < 0) {
    seterr(err, errlen, "branches: the joint action space (product of sizes) exceeds 2^30");
    return LEARNER_EINVAL;
  }
  if (!(c->v_min < c->v_max)) {
    seterr(err, errlen, "v_min: %g must be below v_max %g", (double)c->v_min, (double)c->v_max);
    return LEARNER_EINVAL;
  }
  if (c->batch > c->replay_capacity) {
    seterr(err, errlen, "batch: %d exceeds replay_capacity %lld", c->batch, (long long)c->replay_capacity);
    return LEARNER_EINVAL;
  }
  /* the largest single tensor must stay addressable with int32 GEMM sizes */
  int64_t widest = 0;
  for (int d = 0; d < c->n_branches; d++)
    if ((int64_t)c->branch_sizes[d] * c->atoms > widest) widest = (int64_t)c->branch_sizes[d] * c->atoms;
  if (widest * c->adv_hidden > INT32_MAX || (int64_t)c->trunk_h1 * c->trunk_h2 > INT32_MAX ||
      widest * 2 * c->batch > INT32_MAX) {
    seterr(err, errlen, "branches: a layer of %lld outputs is too large", (long long)widest);
    return LEARNER_EINVAL;
  }
  return learner_hparams_validate(&c->hp, err, errlen);
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
      all_below(t->actions, t->n, (int32_t)A) && all_flags(t->dones, t->n))
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

/* AUTO resolves to CUDA only when the CUDA learner is built and a device is
 * usable; the probe alone (DQN_HAVE_CUDA) does not make a backend. */
learner_backend_t learner_backend_default(void) {
#if DQN_HAVE_CUDA_LEARNER
  return learner_cuda_available(NULL, 0) ? LEARNER_BACKEND_CUDA : LEARNER_BACKEND_CPU;
#else
  return LEARNER_BACKEND_CPU;
#endif
}

static const learner_backend_ops_t *pick_backend(learner_backend_t *b, char *err, size_t errlen) {
  if (*b == LEARNER_BACKEND_AUTO) *b = learner_backend_default();
  if (*b == LEARNER_BACKEND_CPU) return &learner_cpu_ops;
#if DQN_HAVE_CUDA_LEARNER
  char why[256];
  if (!cuda_probe(why, sizeof why)) {
    seterr(err, errlen, "backend: cuda is not usable here (%s)", why);
    return NULL;
  }
  return &learner_cuda_ops;
#else
  seterr(err, errlen, "backend: this build has no CUDA learner");
  return NULL;
#endif
}

int64_t learner_memory_estimate(const learner_config_t *c) { return learner_cpu_ops.memory_estimate(c); }

int learner_create(const learner_config_t *c, learner_backend_t backend, learner_t **out, char *err,
                   size_t errlen) {
  *out = NULL;
  int rc = learner_config_validate(c, err, errlen);
  if (rc) return rc;
  const learner_backend_ops_t *ops = pick_backend(&backend, err, errlen);
  if (!ops) return LEARNER_EUNSUPPORTED;
  learner_t *l = calloc(1, sizeof *l);
  if (!l) {
    seterr(err, errlen, "out of memory");
    return LEARNER_ENOMEM;
  }
  l->ops = ops;
  l->cfg = *c;
  l->backend = backend;
  rc = ops->create(c, &l->impl, err, errlen);
  if (rc) {
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

int learner_step(learner_t *l, int n, learner_stats_t *st, char *err, size_t errlen) {
  if (n < 0 || n > 1000000) {
    seterr(err, errlen, "n: %d is outside [0, 1000000]", n);
    return LEARNER_EINVAL;
  }
  return l->ops->step(l->impl, n, st, err, errlen);
}

int learner_act(learner_t *l, const float *states, int n, int noisy, int32_t *actions, float *q, char *err,
                size_t errlen) {
  if (n < 1 || n > (1 << 20)) {
    seterr(err, errlen, "count: %d states is outside [1, 1048576]", n);
    return LEARNER_EINVAL;
  }
  int64_t S = l->cfg.state_dim;
  for (int64_t i = 0; i < (int64_t)n * S; i++)
    if (!isfinite(states[i])) {
      seterr(err, errlen, "states[%lld][%lld]: not finite", (long long)(i / S), (long long)(i % S));
      return LEARNER_EINVAL;
    }
  return l->ops->act(l->impl, states, n, noisy, actions, q, err, errlen);
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
  if (rc) return rc;
  *st = c.last;
  st->step = c.step;
  st->replay_size = c.replay_size;
  st->replay_total = c.replay_total;
  return LEARNER_OK;
}

int learner_get_params(const learner_t *l, int which, float *dst, int64_t n) {
  int sec = which ? SEC_TARGET : SEC_ONLINE;
  if (n * 4 != l->ops->section_bytes(l->impl, sec)) return LEARNER_EINVAL;
  return l->ops->section_read(l->impl, sec, 0, n * 4, dst);
}

int learner_set_params(learner_t *l, int which, const float *src, int64_t n) {
  int sec = which ? SEC_TARGET : SEC_ONLINE;
  if (n * 4 != l->ops->section_bytes(l->impl, sec)) return LEARNER_EINVAL;
  for (int64_t i = 0; i < n; i++)
    if (!isfinite(src[i])) return LEARNER_EINVAL;
  return l->ops->section_write(l->impl, sec, 0, n * 4, src);
}

int learner_read_replay(learner_t *l, int64_t first, int64_t n, float *states, int32_t *actions, float *rewards,
                        float *next_states, uint8_t *dones, int64_t *episode_ids) {
  learner_counters_t c;
  int rc = l->ops->get_counters(l->impl, &c);
  if (rc) return rc;
  if (first < 0 || n < 0 || first + n > c.replay_size) return LEARNER_EINVAL;
  int64_t S = l->cfg.state_dim;
  struct {
    int sec;
    void *dst;
    int64_t width;
  } parts[] = {{SEC_R_S, states, S * 4}, {SEC_R_A, actions, 4}, {SEC_R_R, rewards, 4},
               {SEC_R_S2, next_states, S * 4}, {SEC_R_DONE, dones, 1}, {SEC_R_EP, episode_ids, 8}};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
    if (parts[i].dst && n &&
        (rc = l->ops->section_read(l->impl, parts[i].sec, first * parts[i].width, n * parts[i].width, parts[i].dst)))
      return rc;
  return LEARNER_OK;
}

/* ------------------------------------------------------------------ CRC32C */

/* Two reflected CRC-32s share one slicing-by-8 implementation:
 * CRC-32C (Castagnoli, 0x82F63B78) for the sections, CRC-32 (IEEE, 0xEDB88320,
 * zlib's) for whole files. */
typedef struct crc_tab {
  uint32_t poly;
  int ready;
  uint32_t t[8][256];
} crc_tab_t;
static crc_tab_t crc_c = {0x82F63B78u, 0, {{0}}}, crc_ieee = {0xEDB88320u, 0, {{0}}};

static void crc_init(crc_tab_t *T) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (T->poly & (0u - (c & 1)));
    T->t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int k = 1; k < 8; k++) T->t[k][i] = (T->t[k - 1][i] >> 8) ^ T->t[0][T->t[k - 1][i] & 0xff];
  T->ready = 1; /* idempotent: a race writes the same values */
}

static uint32_t crc_run(crc_tab_t *T, uint32_t crc, const void *buf, size_t n) {
  if (!T->ready) crc_init(T);
  const unsigned char *p = buf;
  crc = ~crc;
  while (n >= 8) {
    uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
    uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
    crc = T->t[7][lo & 0xff] ^ T->t[6][(lo >> 8) & 0xff] ^ T->t[5][(lo >> 16) & 0xff] ^ T->t[4][lo >> 24] ^
          T->t[3][hi & 0xff] ^ T->t[2][(hi >> 8) & 0xff] ^ T->t[1][(hi >> 16) & 0xff] ^ T->t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) crc = (crc >> 8) ^ T->t[0][(crc ^ *p++) & 0xff];
  return ~crc;
}

/* crc is the running value (0 to start), as in RFC 3720 / zlib. */
uint32_t learner_crc32c(uint32_t crc, const void *buf, size_t n) { return crc_run(&crc_c, crc, buf, n); }
uint32_t learner_crc32(uint32_t crc, const void *buf, size_t n) { return crc_run(&crc_ieee, crc, buf, n); }

/* -------------------------------------------------------------- state I/O */

#define STATE_MAGIC "DQNDLRN"
#define STATE_VERSION 1u
#define CHUNK (1u << 20)

static void put_u32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static uint64_t get_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}
static void put_f32(unsigned char *p, float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  put_u32(p, u);
}
static float get_f32(const unsigned char *p) {
  uint32_t u = get_u32(p);
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* learner_counters_t as a fixed little-endian record */
#define COUNTERS_BYTES (8 * 5 + 4 + (8 * 3 + 4 + 4 * 6))
static void counters_encode(const learner_counters_t *c, unsigned char *p) {
  put_u64(p, c->step); p += 8;
  put_u64(p, c->act_count); p += 8;
  put_u64(p, (uint64_t)c->replay_size); p += 8;
  put_u64(p, (uint64_t)c->replay_head); p += 8;
  put_u64(p, (uint64_t)c->replay_total); p += 8;
  put_f32(p, c->max_leaf); p += 4;
  const learner_stats_t *s = &c->last;
  put_u64(p, s->step); p += 8;
  put_u64(p, (uint64_t)s->replay_size); p += 8;
  put_u64(p, (uint64_t)s->replay_total); p += 8;
  put_u32(p, (uint32_t)s->steps_run); p += 4;
  float f[6] = {s->loss_mean, s->loss_last, s->grad_norm_mean, s->grad_norm_last, s->q_mean, s->per_beta};
  for (int i = 0; i < 6; i++, p += 4) put_f32(p, f[i]);
}
static void counters_decode(learner_counters_t *c, const unsigned char *p) {
  memset(c, 0, sizeof *c);
  c->step = get_u64(p); p += 8;
  c->act_count = get_u64(p); p += 8;
  c->replay_size = (int64_t)get_u64(p); p += 8;
  c->replay_head = (int64_t)get_u64(p); p += 8;
  c->replay_total = (int64_t)get_u64(p); p += 8;
  c->max_leaf = get_f32(p); p += 4;
  learner_stats_t *s = &c->last;
  s->step = get_u64(p); p += 8;
  s->replay_size = (int64_t)get_u64(p); p += 8;
  s->replay_total = (int64_t)get_u64(p); p += 8;
  s->steps_run = (int32_t)get_u32(p); p += 4;
  float *f[6] = {&s->loss_mean, &s->loss_last, &s->grad_norm_mean, &s->grad_norm_last, &s->q_mean, &s->per_beta};
  for (int i = 0; i < 6; i++, p += 4) *f[i] = get_f32(p);
}

static int write_all(learner_write_fn w, void *ctx, const void *buf, size_t n, char *err, size_t errlen) {
  if (w(ctx, buf, n)) {
    seterr(err, errlen, "write failed");
    return LEARNER_EIO;
  }
  return LEARNER_OK;
}

static int write_section_mem(learner_write_fn w, void *ctx, uint32_t tag, const void *buf, uint64_t n, char *err,
                             size_t errlen) {
  unsigned char h[16], t[4];
  put_u32(h, tag);
  put_u32(h + 4, 0);
  put_u64(h + 8, n);
  put_u32(t, learner_crc32c(0, buf, (size_t)n));
  int rc = write_all(w, ctx, h, 16, err, errlen);
  if (!rc && n) rc = write_all(w, ctx, buf, (size_t)n, err, errlen);
  if (!rc) rc = write_all(w, ctx, t, 4, err, errlen);
  return rc;
}

static int write_section_backend(learner_t *l, learner_write_fn w, void *ctx, int sec, unsigned char *bounce,
                                 char *err, size_t errlen) {
  int64_t n = l->ops->section_bytes(l->impl, sec);
  unsigned char h[16], t[4];
  put_u32(h, (uint32_t)sec);
  put_u32(h + 4, 0);
  put_u64(h + 8, (uint64_t)n);
  int rc = write_all(w, ctx, h, 16, err, errlen);
  uint32_t crc = 0;
  for (int64_t off = 0; !rc && off < n; off += CHUNK) {
    int64_t k = n - off < CHUNK ? n - off : CHUNK;
    rc = l->ops->section_read(l->impl, sec, off, k, bounce);
    if (rc) {
      seterr(err, errlen, "reading section %d from the backend failed", sec);
      return rc;
    }
    crc = learner_crc32c(crc, bounce, (size_t)k);
    rc = write_all(w, ctx, bounce, (size_t)k, err, errlen);
  }
  put_u32(t, crc);
  if (!rc) rc = write_all(w, ctx, t, 4, err, errlen);
  return rc;
}

static const int tensor_sections[] = {SEC_ONLINE, SEC_TARGET, SEC_ADAM_M, SEC_ADAM_V};
static const int replay_sections[] = {SEC_R_S, SEC_R_S2, SEC_R_A, SEC_R_R, SEC_R_DONE, SEC_R_EP, SEC_R_PRIO};
#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

int learner_save(learner_t *l, int with_replay, learner_write_fn w, void *ctx, char *err, size_t errlen) {
  unsigned char hdr[24];
  memcpy(hdr, STATE_MAGIC, 8);
  put_u32(hdr + 8, STATE_VERSION);
  put_u32(hdr + 12, with_replay ? 1u : 0u);
  put_u64(hdr + 16, learner_config_hash(&l->cfg));
  int rc = write_all(w, ctx, hdr, sizeof hdr, err, errlen);
  if (rc) return rc;
  char text[8192];
  size_t tn = learner_config_to_text(&l->cfg, text, sizeof text);
  if ((rc = write_section_mem(w, ctx, SEC_CONFIG, text, tn, err, errlen))) return rc;
  learner_counters_t c;
  if ((rc = l->ops->get_counters(l->impl, &c))) return rc;
  if (!with_replay) c.replay_size = c.replay_head = 0;
  unsigned char cb[COUNTERS_BYTES];
  counters_encode(&c, cb);
  if ((rc = write_section_mem(w, ctx, SEC_COUNTERS, cb, sizeof cb, err, errlen))) return rc;
  unsigned char *bounce = malloc(CHUNK);
  if (!bounce) {
    seterr(err, errlen, "out of memory");
    return LEARNER_ENOMEM;
  }
  for (int i = 0; !rc && i < NELEM(tensor_sections); i++)
    rc = write_section_backend(l, w, ctx, tensor_sections[i], bounce, err, errlen);
  for (int i = 0; !rc && with_replay && i < NELEM(replay_sections); i++)
    if (replay_sections[i] != SEC_R_PRIO || l->cfg.prioritized)
      rc = write_section_backend(l, w, ctx, replay_sections[i], bounce, err, errlen);
  free(bounce);
  if (!rc) rc = write_section_mem(w, ctx, SEC_END, "", 0, err, errlen);
  return rc;
}

static int read_all(learner_read_fn r, void *ctx, void *buf, size_t n, char *err, size_t errlen) {
  if (r(ctx, buf, n)) {
    seterr(err, errlen, "state truncated or unreadable");
    return LEARNER_EIO;
  }
  return LEARNER_OK;
}

static int read_section_mem(learner_read_fn r, void *ctx, uint32_t want, void *buf, size_t cap, size_t *len,
                            char *err, size_t errlen) {
  unsigned char h[16], t[4];
  int rc = read_all(r, ctx, h, 16, err, errlen);
  if (rc) return rc;
  uint32_t tag = get_u32(h);
  uint64_t n = get_u64(h + 8);
  if (tag != want || n > cap || get_u32(h + 4) != 0) {
    seterr(err, errlen, "state: expected section %u (<= %zu bytes), found section %u of %llu bytes", want, cap,
           tag, (unsigned long long)n);
    return LEARNER_ECORRUPT;
  }
  if ((rc = read_all(r, ctx, buf, (size_t)n, err, errlen)) || (rc = read_all(r, ctx, t, 4, err, errlen)))
    return rc;
  if (learner_crc32c(0, buf, (size_t)n) != get_u32(t)) {
    seterr(err, errlen, "state: section %u fails its CRC32C check", tag);
    return LEARNER_ECORRUPT;
  }
  *len = (size_t)n;
  return LEARNER_OK;
}

/* Header + config section. */
static int read_head(learner_read_fn r, void *ctx, learner_config_t *c, int *with_replay, char *err,
                     size_t errlen) {
  unsigned char hdr[24];
  int rc = read_all(r, ctx, hdr, sizeof hdr, err, errlen);
  if (rc) return rc;
  if (memcmp(hdr, STATE_MAGIC, 8)) {
    seterr(err, errlen, "state: bad magic (not a dqnd learner state)");
    return LEARNER_ECORRUPT;
  }
  if (get_u32(hdr + 8) != STATE_VERSION) {
    seterr(err, errlen, "state: format version %u, this build reads %u", get_u32(hdr + 8), STATE_VERSION);
    return LEARNER_ECORRUPT;
  }
  uint32_t flags = get_u32(hdr + 12);
  if (flags > 1) {
    seterr(err, errlen, "state: unknown flags 0x%x", flags);
    return LEARNER_ECORRUPT;
  }
  *with_replay = (int)(flags & 1);
  char text[8192];
  size_t tn;
  if ((rc = read_section_mem(r, ctx, SEC_CONFIG, text, sizeof text - 1, &tn, err, errlen))) return rc;
  char cerr[256];
  if (learner_config_from_text(c, text, tn, cerr, sizeof cerr)) {
    seterr(err, errlen, "state: config section: %s", cerr);
    return LEARNER_ECORRUPT;
  }
  if (learner_config_hash(c) != get_u64(hdr + 16)) {
    seterr(err, errlen, "state: config hash mismatch");
    return LEARNER_ECORRUPT;
  }
  return LEARNER_OK;
}

int learner_peek_config(learner_read_fn r, void *ctx, learner_config_t *c, int *with_replay, char *err,
                        size_t errlen) {
  return read_head(r, ctx, c, with_replay, err, errlen);
}

const char *learner_section_name(uint32_t tag) {
  switch (tag) {
  case SEC_END: return "end";
  case SEC_CONFIG: return "config";
  case SEC_COUNTERS: return "counters";
  case SEC_ONLINE: return "online parameters";
  case SEC_TARGET: return "target parameters";
  case SEC_ADAM_M: return "adam first moments";
  case SEC_ADAM_V: return "adam second moments";
  case SEC_R_S: return "replay states";
  case SEC_R_S2: return "replay next states";
  case SEC_R_A: return "replay actions";
  case SEC_R_R: return "replay rewards";
  case SEC_R_DONE: return "replay dones";
  case SEC_R_EP: return "replay episode ids";
  case SEC_R_PRIO: return "replay priorities";
  }
  return "unknown";
}

int learner_state_inspect(learner_read_fn r, void *ctx, learner_state_header_t *h, learner_section_cb cb, void *cbctx,
                          char *err, size_t errlen) {
  memset(h, 0, sizeof *h);
  unsigned char hdr[24];
  int rc = read_all(r, ctx, hdr, sizeof hdr, err, errlen);
  if (rc) return rc;
  if (memcmp(hdr, STATE_MAGIC, 8)) {
    seterr(err, errlen, "bad magic (not a dqnd learner state)");
    return LEARNER_ECORRUPT;
  }
  h->version = get_u32(hdr + 8);
  h->flags = get_u32(hdr + 12);
  h->config_hash = get_u64(hdr + 16);
  if (h->version != STATE_VERSION) {
    seterr(err, errlen, "format version %u, this build reads %u", h->version, STATE_VERSION);
    return LEARNER_ECORRUPT;
  }
  uint64_t off = sizeof hdr;
  int bad = 0;
  unsigned char *buf = malloc(CHUNK);
  if (!buf) {
    seterr(err, errlen, "out of memory");
    return LEARNER_ENOMEM;
  }
  for (;;) {
    unsigned char sh[16], t[4];
    if ((rc = read_all(r, ctx, sh, 16, err, errlen))) break;
    learner_state_section_t sec = {get_u32(sh), learner_section_name(get_u32(sh)), off, get_u64(sh + 8), 1};
    if (get_u32(sh + 4) != 0) {
      seterr(err, errlen, "section %u at offset %llu: non-zero reserved field", sec.tag, (unsigned long long)off);
      rc = LEARNER_ECORRUPT;
      break;
    }
    uint32_t crc = 0;
    for (uint64_t o = 0; !rc && o < sec.len; o += CHUNK) {
      size_t k = (size_t)(sec.len - o < CHUNK ? sec.len - o : CHUNK);
      if ((rc = read_all(r, ctx, buf, k, err, errlen))) break;
      crc = learner_crc32c(crc, buf, k);
      if (sec.tag == SEC_CONFIG && o == 0) {
        size_t n = k < sizeof h->config_text - 1 ? k : sizeof h->config_text - 1;
        memcpy(h->config_text, buf, n);
        h->config_text[n] = 0;
      }
    }
    if (rc || (rc = read_all(r, ctx, t, 4, err, errlen))) break;
    sec.crc_ok = crc == get_u32(t);
    if (!sec.crc_ok && !bad) {
      bad = 1;
      seterr(err, errlen, "section %u (%s) fails its CRC32C check", sec.tag, sec.name);
    }
    if (sec.tag == SEC_CONFIG && sec.crc_ok) {
      learner_config_t c;
      char cerr[256];
      h->config_ok = learner_config_from_text(&c, h->config_text, strlen(h->config_text), cerr, sizeof cerr) == 0;
      h->hash_ok = h->config_ok && learner_config_hash(&c) == h->config_hash;
      if (!h->hash_ok && !bad) {
        bad = 1;
        seterr(err, errlen, h->config_ok ? "config hash mismatch" : "config section: %s", cerr);
      }
    }
    if (cb) cb(cbctx, &sec);
    off += 16 + sec.len + 4;
    if (sec.tag == SEC_END) break;
  }
  free(buf);
  h->bytes = off;
  if (rc) return rc;
  return bad ? LEARNER_ECORRUPT : LEARNER_OK;
}

static int load_into(learner_t *l, learner_read_fn r, void *ctx, int with_replay, char *err, size_t errlen) {
  unsigned char cb[COUNTERS_BYTES];
  size_t n;
  int rc = read_section_mem(r, ctx, SEC_COUNTERS, cb, sizeof cb, &n, err, errlen);
  if (rc) return rc;
  if (n != sizeof cb) {
    seterr(err, errlen, "state: counters section has %zu bytes, expected %zu", n, sizeof cb);
    return LEARNER_ECORRUPT;
  }
  learner_counters_t c;
  counters_decode(&c, cb);
  const learner_config_t *cfg = &l->cfg;
  if (c.replay_size < 0 || c.replay_size > cfg->replay_capacity || c.replay_head < 0 ||
      c.replay_head >= cfg->replay_capacity || c.replay_total < c.replay_size ||
      (c.replay_size < cfg->replay_capacity && c.replay_head != c.replay_size) || !(c.max_leaf > 0) ||
      !isfinite(c.max_leaf) || (!with_replay && c.replay_size)) {
    seterr(err, errlen, "state: counters are inconsistent (replay size %lld, head %lld, capacity %lld)",
           (long long)c.replay_size, (long long)c.replay_head, (long long)cfg->replay_capacity);
    return LEARNER_ECORRUPT;
  }
  if (!with_replay) c.replay_head = 0;
  if ((rc = l->ops->set_counters(l->impl, &c))) return rc;

  int seen[32] = {0};
  unsigned char *bounce = malloc(CHUNK);
  if (!bounce) {
    seterr(err, errlen, "out of memory");
    return LEARNER_ENOMEM;
  }
  for (;;) {
    unsigned char h[16], t[4];
    if ((rc = read_all(r, ctx, h, 16, err, errlen))) break;
    uint32_t tag = get_u32(h);
    uint64_t len = get_u64(h + 8);
    if (get_u32(h + 4) != 0) {
      seterr(err, errlen, "state: section %u has a non-zero reserved field", tag);
      rc = LEARNER_ECORRUPT;
      break;
    }
    if (tag == SEC_END) {
      if (len != 0 || (rc = read_all(r, ctx, t, 4, err, errlen)) || get_u32(t) != learner_crc32c(0, "", 0)) {
        if (!rc) seterr(err, errlen, "state: bad end section");
        rc = rc ? rc : LEARNER_ECORRUPT;
      }
      break;
    }
    int known = tag >= SEC_ONLINE && tag <= SEC_R_PRIO && (tag <= SEC_ADAM_V || (tag >= SEC_R_S && with_replay));
    int64_t want = known ? l->ops->section_bytes(l->impl, (int)tag) : -1;
    if (!known || seen[tag] || (int64_t)len != want) {
      seterr(err, errlen, "state: unexpected section %u of %llu bytes (expected %lld)", tag,
             (unsigned long long)len, (long long)want);
      rc = LEARNER_ECORRUPT;
      break;
    }
    seen[tag] = 1;
    uint32_t crc = 0;
    for (uint64_t off = 0; !rc && off < len; off += CHUNK) {
      size_t k = (size_t)(len - off < CHUNK ? len - off : CHUNK);
      if ((rc = read_all(r, ctx, bounce, k, err, errlen))) break;
      crc = learner_crc32c(crc, bounce, k);
      rc = l->ops->section_write(l->impl, (int)tag, (int64_t)off, (int64_t)k, bounce);
    }
    if (rc) break;
    if ((rc = read_all(r, ctx, t, 4, err, errlen))) break;
    if (crc != get_u32(t)) {
      seterr(err, errlen, "state: section %u fails its CRC32C check", tag);
      rc = LEARNER_ECORRUPT;
      break;
    }
  }
  free(bounce);
  if (rc) return rc;
  for (int i = 0; i < NELEM(tensor_sections); i++)
    if (!seen[tensor_sections[i]]) {
      seterr(err, errlen, "state: section %d missing", tensor_sections[i]);
      return LEARNER_ECORRUPT;
    }
  for (int i = 0; with_replay && i < NELEM(replay_sections); i++)
    if (!seen[replay_sections[i]] && (replay_sections[i] != SEC_R_PRIO || cfg->prioritized)) {
      seterr(err, errlen, "state: replay section %d missing", replay_sections[i]);
      return LEARNER_ECORRUPT;
    }
  return l->ops->load_done(l->impl);
}

int learner_load(learner_read_fn r, void *ctx, learner_backend_t backend, learner_t **out, char *err,
                 size_t errlen) {
  *out = NULL;
  learner_config_t c;
  int with_replay;
  int rc = read_head(r, ctx, &c, &with_replay, err, errlen);
  if (rc) return rc;
  learner_t *l;
  if ((rc = learner_create(&c, backend, &l, err, errlen))) return rc;
  if ((rc = load_into(l, r, ctx, with_replay, err, errlen))) {
    learner_destroy(l);
    return rc;
  }
  *out = l;
  return LEARNER_OK;
}
