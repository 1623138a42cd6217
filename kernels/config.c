/*
 * config.c — the learner's config table (Redis habit: one table feeds
 * validation, `dqnctl fields`, the canonical text and its hash, and
 * SetHyperparams), its defaults and its checks. Pure C with no backend, so
 * the client (dqnctl, libdqnd) links it without the learner.
 */
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_rows.h"
#include "learner_types.h"
#include "model.h"
#include "net_layout.h"
#include "seterr.h"
#include "suggest.h"

#define CF(f) offsetof(learner_config_t, f)
#define HF(f) (offsetof(learner_config_t, hp) + offsetof(learner_hparams_t, f))
#define ROW(name, type, field, min, max, changeable, def, help) {name, type, field, min, max, changeable, help, def, 0},
#define ROWQ(name, type, field, min, max, changeable, def, help) {name, type, field, min, max, changeable, help, def, 1},
const learner_field_t learner_fields[] = {
    NETWORK_ROWS(ROW) ATTN_ROWS(ROW) ENSEMBLE_ROWS(ROW) ACT_ROWS(ROW) HER_ROWS(ROW) LOSS_ROWS(ROW) REPLAY_ROWS(ROW) OPTIM_ROWS(ROW) BACKEND_ROWS(ROW) DAEMON_ROWS(ROW) DT_ROWS(ROWQ)};
#undef ROW
#undef ROWQ
const int learner_num_fields = (int)(sizeof learner_fields / sizeof learner_fields[0]);

void learner_config_default(learner_config_t *c) {
  memset(c, 0, sizeof *c);
  for (int i = 0; i < learner_num_fields; i++) /* the defaults parse: test-state checks each row's */
    learner_config_set(c, learner_fields[i].name, learner_fields[i].def, NULL, 0);
}

const learner_field_t *learner_field_find(const char *name) {
  for (int i = 0; i < learner_num_fields; i++)
    if (strcmp(learner_fields[i].name, name) == 0) return &learner_fields[i];
  return NULL;
}

/* A float field holds its value rounded to float, so its bounds are
 * compared as floats too: a bound that is no float itself (per_eps and
 * adam_eps >= 1e-12) is then a value the field can take, and the text a
 * state saves ("%.9g" of the float) reads back. */
static int out_of_bounds(const learner_field_t *f, double v) {
  if (f->type != LCF_FLOAT) return v < f->min || v > f->max;
  if (!(fabs(v) <= FLT_MAX)) return 1;
  float x = (float)v;
  return x < (float)f->min || x > (float)f->max;
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

/* Fields whose integer values have names: the config text shows the name and
 * accepts the name or the number. A named field is one row here (value k is
 * names[k]; its row's max is the last index). */
static const struct {
  size_t offset;
  const char *const names[5]; /* NULL-terminated */
} named_fields[] = {{HF(act_select), {"mean", "ucb", "thompson", NULL}},
                    {HF(her_strategy), {"future", "final", "episode", "random", NULL}},
                    {HF(her_norm), {"inf", "l2", NULL, NULL}},
                    {CF(dt_handover), {"none", "trunk1", NULL, NULL}}};

static const char *const *field_names(const learner_field_t *f) {
  for (size_t i = 0; i < sizeof named_fields / sizeof named_fields[0]; i++)
    if (named_fields[i].offset == f->offset) return named_fields[i].names;
  return NULL;
}

int learner_config_get(const learner_config_t *c, const learner_field_t *f, char *buf, size_t n) {
  const char *p = (const char *)c + f->offset;
  const char *const *names = field_names(f);
  if (names) {
    int32_t v = *(const int32_t *)p;
    if (v >= 0 && v <= (int32_t)f->max) return snprintf(buf, n, "%s", names[v]);
  }
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
    const char *v0 = value;
    while (*v0 == ' ' || *v0 == '\t') v0++; /* leading blanks, as the other numbers allow */
    if (*v0 < '0' || *v0 > '9') goto bad;     /* strtoull takes " -1" as 2^64 - 1 */
    unsigned long long u = strtoull(v0, &end, 0);
    if (end == value || *end || errno) goto bad;
    *(uint64_t *)p = u;
    return LEARNER_OK;
  }
  const char *const *names = field_names(f);
  for (int k = 0; names && names[k]; k++)
    if (!strcmp(value, names[k])) {
      *(int32_t *)p = k;
      return LEARNER_OK;
    }
  if (names && (value[0] < '0' || value[0] > '9')) {
    char list[128];
    size_t w = 0;
    for (int k = 0; names[k] && w < sizeof list; k++)
      w += (size_t)snprintf(list + w, sizeof list - w, k ? ", %s" : "%s", names[k]);
    seterr(err, errlen, "%s: '%s' is not one of %s", f->name, value, list);
    return LEARNER_EINVAL;
  }
  if (f->type == LCF_BOOL && (!strcmp(value, "true") || !strcmp(value, "false"))) {
    *(int32_t *)p = value[0] == 't';
    return LEARNER_OK;
  }
  v = strtod(value, &end);
  if (end == value || *end || errno || !isfinite(v)) goto bad;
  if (out_of_bounds(f, v)) {
    char bd[96];
    learner_field_bounds(f, bd, sizeof bd);
    seterr(err, errlen, "%s: %s is outside %s", f->name, value, bd);
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
  char v[512], dv[512];
  learner_config_t def;
  learner_config_default(&def);
  for (int i = 0; i < learner_num_fields; i++) {
    learner_config_get(c, &learner_fields[i], v, sizeof v);
    if (learner_fields[i].quiet) { /* a later module's row: written only away from its default */
      learner_config_get(&def, &learner_fields[i], dv, sizeof dv);
      if (!strcmp(v, dv)) continue;
    }
    int k = snprintf(buf + (w < n ? w : n), w < n ? n - w : 0, "%s=%s\n", learner_fields[i].name, v);
    w += (size_t)k;
  }
  return w;
}

int learner_config_from_text(learner_config_t *c, const char *text, size_t len, char *err, size_t errlen) {
  learner_config_default(c);
  /* a value is read as a C string: after a NUL byte the rest of its line
   * (other fields too) would be skipped unseen; the writer never makes one */
  const char *nul = memchr(text, 0, len);
  if (nul) {
    seterr(err, errlen, "config: a NUL byte at offset %zu", (size_t)(nul - text));
    return LEARNER_EINVAL;
  }
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

const learner_field_t *learner_config_shape_diff(const learner_config_t *a, const learner_config_t *b) {
  for (int i = 0; i < learner_num_fields; i++) {
    const learner_field_t *f = &learner_fields[i];
    if (f->hparam) continue;
    char x[512], y[512];
    learner_config_get(a, f, x, sizeof x);
    learner_config_get(b, f, y, sizeof y);
    if (strcmp(x, y)) return f;
  }
  return NULL;
}

void learner_field_bounds(const learner_field_t *f, char *buf, size_t n) {
  if (f->type == LCF_FLOAT) snprintf(buf, n, "[%.9g, %.9g]", f->min, f->max);
  else if (f->type == LCF_UINT64 && f->max >= 18446744073709551615.0) /* 2^64 as a double: the last one is 2^64 - 1 */
    snprintf(buf, n, "[%.0f, %llu]", f->min, (unsigned long long)UINT64_MAX);
  else snprintf(buf, n, "[%.0f, %.0f]", f->min, f->max);
}

int learner_config_same_shape(const learner_config_t *a, const learner_config_t *b) {
  return learner_config_shape_diff(a, b) == NULL;
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

int64_t learner_config_num_prior(const learner_config_t *c) {
  net_layout_t L;
  net_layout_init(&L, c);
  return L.has_prior ? L.n_prior : 0;
}

/* c's parameter registry (model.h) in one thread-local model (~45 KB: not
 * on the caller's stack), or NULL and why when it cannot be built */
static const model_t *config_registry(const learner_config_t *c, char *why, size_t n) {
  static _Thread_local model_t m;
  model_desc_t d;
  model_desc_from_config(&d, c);
  return model_build(&m, &d, why, n) ? NULL : &m;
}

int64_t learner_config_num_dt(const learner_config_t *c) {
  const model_t *m = c->dt_layers < 1 ? NULL : config_registry(c, NULL, 0);
  return m ? m->size[MODEL_VEC_DT] : 0;
}

int learner_hparams_validate(const learner_hparams_t *hp, char *err, size_t errlen) {
  learner_config_t tmp;
  learner_config_default(&tmp);
  tmp.hp = *hp;
  for (int i = 0; i < learner_num_fields; i++) {
    const learner_field_t *f = &learner_fields[i];
    if (!f->hparam) continue;
    double v = field_value(&tmp, f);
    if (!isfinite(v) || out_of_bounds(f, v)) {
      char s[64];
      learner_config_get(&tmp, f, s, sizeof s);
      char bd[96];
      learner_field_bounds(f, bd, sizeof bd);
      seterr(err, errlen, "%s: %s is outside %s", f->name, s, bd);
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
    if (!isfinite(v) || out_of_bounds(f, v)) {
      char s[64];
      learner_config_get(c, f, s, sizeof s);
      char bd[96];
      learner_field_bounds(f, bd, sizeof bd);
      seterr(err, errlen, "%s: %s is outside %s", f->name, s, bd);
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
  /* the C51 projection divides by the atoms' spacing and casts the quotient
   * to an int: a spacing that is 0 or subnormal in float would
   * make it NaN or infinite (undefined behaviour, a review find) */
  const float span = c->v_max - c->v_min, dz = span / (float)(c->atoms - 1);
  if (!isfinite(span) || !(dz >= FLT_MIN)) {
    seterr(err, errlen, "v_max: the support [%g, %g] over %d atoms has a spacing of %g, not a normal float",
           (double)c->v_min, (double)c->v_max, c->atoms, (double)dz);
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
  if (c->attn_tokens) { /* docs/learner.md §7: T >= 2, n_h >= 1, both dividing (model_build checks those) */
    if (c->attn_tokens < 2) {
      seterr(err, errlen, "attn_tokens: %d is not 0 (off) or >= 2", c->attn_tokens);
      return LEARNER_EINVAL;
    }
    if (c->attn_heads < 1) {
      seterr(err, errlen, "attn_heads: %d must be >= 1 when attn_tokens is %d", c->attn_heads, c->attn_tokens);
      return LEARNER_EINVAL;
    }
    if (!config_registry(c, err, errlen)) return LEARNER_EINVAL;
  }
  /* docs/learner.md §9: obs (O >= 0) | achieved goal (G) | desired goal (G) */
  if (c->her_goal_dim < 0 || 2LL * c->her_goal_dim > c->state_dim) {
    seterr(err, errlen, "her_goal_dim: 2 x %d does not fit state_dim %d (obs | achieved goal | desired goal)",
           c->her_goal_dim, c->state_dim);
    return LEARNER_EINVAL;
  }
  /* docs/learner.md §8: K >= 1, p in (0, 1], beta_p >= 0 */
  if (c->ensemble_k < 1 || c->ensemble_k > LEARNER_MAX_ENSEMBLE) {
    seterr(err, errlen, "ensemble_k: %d is not in [1, %d]", c->ensemble_k, LEARNER_MAX_ENSEMBLE);
    return LEARNER_EINVAL;
  }
  if (!(c->ensemble_mask_p > 0 && c->ensemble_mask_p <= 1)) {
    seterr(err, errlen, "ensemble_mask_p: %g is not in (0, 1]", (double)c->ensemble_mask_p);
    return LEARNER_EINVAL;
  }
  if (!(c->ensemble_prior_scale >= 0 && isfinite(c->ensemble_prior_scale))) {
    seterr(err, errlen, "ensemble_prior_scale: %g must be >= 0", (double)c->ensemble_prior_scale);
    return LEARNER_EINVAL;
  }
  if (c->ensemble_k > 1 || c->ensemble_prior_scale > 0) {
    char why[200];
    if (!config_registry(c, why, sizeof why)) {
      seterr(err, errlen, "ensemble_k: %d head sets do not fit (%s)", c->ensemble_k, why);
      return LEARNER_EINVAL;
    }
  }
  if (c->dt_layers) { /* docs/learner.md §16: the heads divide the width; the registry holds the blocks */
    if (c->dt_embed % c->dt_heads) {
      seterr(err, errlen, "dt_heads: %d does not divide dt_embed %d", c->dt_heads, c->dt_embed);
      return LEARNER_EINVAL;
    }
    if (c->dt_handover == LEARNER_DT_HANDOVER_TRUNK1 && c->dt_embed != c->trunk_h1) {
      seterr(err, errlen, "dt_handover: trunk1 needs dt_embed (%d) = trunk_h1 (%d)", c->dt_embed, c->trunk_h1);
      return LEARNER_EINVAL;
    }
    if ((int64_t)c->dt_batch * c->dt_context * 3 * (4 * (int64_t)c->dt_embed) > INT32_MAX ||
        (int64_t)c->dt_batch * c->dt_heads * 9 * (int64_t)c->dt_context * c->dt_context > INT32_MAX) {
      seterr(err, errlen, "dt_batch: %d windows of %d steps at embed %d are too large for one step", c->dt_batch,
             c->dt_context, c->dt_embed);
      return LEARNER_EINVAL;
    }
    char why[200];
    if (!config_registry(c, why, sizeof why)) {
      seterr(err, errlen, "dt_layers: %d blocks do not fit (%s)", c->dt_layers, why);
      return LEARNER_EINVAL;
    }
  } else if (c->dt_handover != LEARNER_DT_HANDOVER_NONE) {
    seterr(err, errlen, "dt_handover: trunk1 needs a Decision Transformer (dt_layers >= 1)");
    return LEARNER_EINVAL;
  }
  return learner_hparams_validate(&c->hp, err, errlen);
}
