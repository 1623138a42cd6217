/* dqnctl_common.c — what every dqnctl command file uses (dqnctl_common.h): errors,
 * JSON, the stats line, the running command's options. */
#include <stdio.h>
#include <stdlib.h>

#include "dqnctl_common.h"

const char *opt(ctx_t *x, const cli_args_t *a, const char *name) { return cli_get(x->spec, a, name); }

int fail_rc(ctx_t *x, int rc) {
  fprintf(stderr, "dqnctl: %s: %s\n", dqnd_strerror(rc), dqnd_last_error(x->c));
  if (rc > 0) return EXIT_SERVER; /* the daemon answered it */
  switch (rc) {
  case DQND_EIO: case DQND_ENOMEM: return EXIT_LOCAL;
  case DQND_EINVAL: return EXIT_USAGE; /* an argument libdqnd refused before sending */
  default: return EXIT_TRANSPORT;      /* no (usable) reply */
  }
}

static int json_failed;

int json_output_failed(void) { return json_failed; }

void print_json(json_t *j) {
  char *s = j ? json_dumps(j, JSON_INDENT(1) | JSON_SORT_KEYS) : NULL;
  if (s) puts(s);
  else {
    fprintf(stderr, "dqnctl: the JSON output could not be made (a string in it, a path perhaps, is not UTF-8)\n");
    json_failed = 1;
  }
  free(s);
  json_decref(j);
}

json_t *json_text(const char *s) {
  json_t *j = json_string(s);
  if (j) return j;
  fprintf(stderr, "dqnctl: '%.200s' is not UTF-8: JSON cannot hold it\n", s);
  json_failed = 1;
  return json_null();
}

/* Every stats field (LEARNER_STATS_FIELDS), by its own name, in JSON and text. */
#define STATS_JSON_U64(v) json_integer((json_int_t)(v))
#define STATS_JSON_I64(v) json_integer((json_int_t)(v))
#define STATS_JSON_I32(v) json_integer((json_int_t)(v))
#define STATS_JSON_F32(v) json_real((double)(v))
json_t *stats_json(const learner_stats_t *st) {
  json_t *j = json_object();
#define STATS_JSON(type, name, kind) json_object_set_new(j, #name, STATS_JSON_##kind(st->name));
  LEARNER_STATS_FIELDS(STATS_JSON)
#undef STATS_JSON
  return j;
}

#define STATS_TEXT_U64(v) printf("%llu", (unsigned long long)(v))
#define STATS_TEXT_I64(v) printf("%lld", (long long)(v))
#define STATS_TEXT_I32(v) printf("%d", (int)(v))
#define STATS_TEXT_F32(v) printf("%.6g", (double)(v))
void print_stats(ctx_t *x, const char *name, const learner_stats_t *st) {
  if (x->json) {
    json_t *j = stats_json(st);
    json_object_set_new(j, "name", json_string(name));
    print_json(j);
    return;
  }
  printf("%s:", name); /* "t1: step 1000  replay_size 5000  ...  per_beta 0.4" */
  const char *sep = " ";
#define STATS_TEXT(type, name, kind)                                                                              \
  printf("%s" #name " ", sep);                                                                                    \
  STATS_TEXT_##kind(st->name);                                                                                    \
  sep = "  ";
  LEARNER_STATS_FIELDS(STATS_TEXT)
#undef STATS_TEXT
  putchar('\n');
}
