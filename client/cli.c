/* cli.c — see cli.h. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "learner_types.h"
#include "suggest.h"

static int usage_err(const cli_spec_t *sp, const char *fmt, const char *a, const char *b) {
  fprintf(stderr, "%s: ", sp->cmd);
  fprintf(stderr, fmt, a, b);
  fprintf(stderr, " (%s --help)\n", sp->cmd);
  return -1;
}

static int find_opt(const cli_spec_t *sp, const char *name, size_t len) {
  for (int i = 0; sp->opts && sp->opts[i].name; i++)
    if (strlen(sp->opts[i].name) == len && !strncmp(sp->opts[i].name, name, len)) return i;
  return -1;
}

static int check_field(const cli_spec_t *sp, cli_args_t *out, const char *arg) {
  const char *eq = strchr(arg, '=');
  char name[128];
  snprintf(name, sizeof name, "%.*s", (int)(eq - arg), arg);
  const learner_field_t *f = learner_field_find(name);
  if (!f) {
    suggest_t sg;
    suggest_init(&sg, name);
    for (int i = 0; i < learner_num_fields; i++) suggest_try(&sg, learner_fields[i].name);
    if (sg.best) {
      fprintf(stderr, "%s: %s: unknown config field (did you mean '%s'?)\n", sp->cmd, name, sg.best);
      return -1;
    }
    return usage_err(sp, "%s: unknown config field%s; dqnctl fields lists them", name, "");
  }
  if (sp->fields == CLI_FACTOR_FIELD && (!f->hparam || f->type != LCF_FLOAT)) {
    fprintf(stderr, "%s: %s: not a float hyperparameter (a factor scales one of those)\n", sp->cmd, name);
    return -1;
  }
  if (sp->fields == CLI_HPARAM_FIELD && !f->hparam) {
    fprintf(stderr, "%s: %s: fixed when the trainer is created (it changes a shape or the replay); "
                    "dqnctl fields shows which fields may change\n", sp->cmd, name);
    return -1;
  }
  for (int i = 0; i < out->nfields; i++) {
    size_t k = strcspn(out->fields[i], "=");
    if (k == strlen(name) && !strncmp(out->fields[i], name, k)) return usage_err(sp, "%s: given twice%s", name, "");
  }
  double factor;
  if (sp->fields == CLI_FACTOR_FIELD) {
    if (cli_float(sp->cmd, name, eq + 1, -1e300, 1e300, &factor)) return -1;
    if (out->nfields == CLI_MAX_FIELDS) return usage_err(sp, "more than %s fields%s", "128", "");
    out->fields[out->nfields++] = arg;
    return 0;
  }
  learner_config_t scratch;
  learner_config_default(&scratch);
  char err[300];
  if (learner_config_set(&scratch, name, eq + 1, err, sizeof err)) {
    fprintf(stderr, "%s: %s\n", sp->cmd, err);
    return -1;
  }
  if (out->nfields == CLI_MAX_FIELDS) return usage_err(sp, "more than %s fields%s", "128", "");
  out->fields[out->nfields++] = arg;
  return 0;
}

int cli_parse(const cli_spec_t *sp, int argc, char **argv, cli_args_t *out) {
  memset(out, 0, sizeof *out);
  int only_pos = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!only_pos && !strcmp(a, "--")) {
      only_pos = 1;
      continue;
    }
    if (!only_pos && a[0] == '-' && a[1] && !(a[1] >= '0' && a[1] <= '9')) {
      const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
      size_t len = eq ? (size_t)(eq - a) : strlen(a);
      int k = find_opt(sp, a, len);
      if (k < 0) {
        char nm[96];
        snprintf(nm, sizeof nm, "%.*s", (int)len, a);
        suggest_t sg;
        suggest_init(&sg, nm);
        for (int j = 0; sp->opts && sp->opts[j].name; j++) suggest_try(&sg, sp->opts[j].name);
        if (sg.best) {
          fprintf(stderr, "%s: unknown option '%s' (did you mean %s?)\n", sp->cmd, nm, sg.best);
          return -1;
        }
        return usage_err(sp, "unknown option '%s'%s", nm, "");
      }
      const cli_opt_t *o = &sp->opts[k];
      if (out->val[k]) return usage_err(sp, "%s given twice%s", o->name, "");
      if (!o->metavar) {
        if (eq) return usage_err(sp, "%s takes no value%s", o->name, "");
        out->val[k] = "";
        continue;
      }
      const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[i + 1] : NULL);
      if (!eq) i++;
      if (!v || (!eq && v[0] == '-' && v[1] == '-'))
        return usage_err(sp, "%s needs a value (%s)", o->name, o->metavar);
      if (!*v) return usage_err(sp, "%s: empty %s", o->name, o->metavar);
      out->val[k] = v;
      continue;
    }
    if (sp->fields && strchr(a, '=') && a[0] != '=') {
      if (check_field(sp, out, a)) return -1;
      continue;
    }
    if (out->npos >= sp->max_pos) {
      if (sp->fields && learner_field_find(a)) {
        fprintf(stderr, "%s: '%s' has no value: fields are name=value (did you mean %s=%s?)\n", sp->cmd, a, a,
                i + 1 < argc ? argv[i + 1] : "...");
        return -1;
      }
      if (sp->fields) return usage_err(sp, "unexpected argument '%s': fields are name=value%s", a, "");
      return usage_err(sp, "unexpected argument '%s'%s", a, "");
    }
    out->pos[out->npos++] = a;
  }
  if (out->npos < sp->min_pos) return usage_err(sp, "needs %s%s", sp->pos_names, "");
  return 0;
}

const char *cli_get(const cli_spec_t *sp, const cli_args_t *a, const char *name) {
  int k = find_opt(sp, name, strlen(name));
  return k < 0 ? NULL : a->val[k];
}

int cli_int(const char *cmd, const char *what, const char *v, long long min, long long max, long long *out) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (end == v || *end || errno) {
    fprintf(stderr, "%s: %s: '%s' is not an integer\n", cmd, what, v);
    return -1;
  }
  if (x < min || x > max) {
    fprintf(stderr, "%s: %s: %lld is outside [%lld, %lld]\n", cmd, what, x, min, max);
    return -1;
  }
  *out = x;
  return 0;
}

int cli_float(const char *cmd, const char *what, const char *v, double min, double max, double *out) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (end == v || *end || errno || !isfinite(x)) {
    fprintf(stderr, "%s: %s: '%s' is not a number\n", cmd, what, v);
    return -1;
  }
  if (x < min || x > max) {
    fprintf(stderr, "%s: %s: %g is outside [%g, %g]\n", cmd, what, x, min, max);
    return -1;
  }
  *out = x;
  return 0;
}

void cli_print_opts(FILE *f, const cli_opt_t *opts) {
  for (int i = 0; opts && opts[i].name; i++) {
    char lhs[64];
    snprintf(lhs, sizeof lhs, "%s%s%s", opts[i].name, opts[i].metavar ? " " : "", opts[i].metavar ? opts[i].metavar : "");
    fprintf(f, "  %-22s %s\n", lhs, opts[i].help);
  }
}
