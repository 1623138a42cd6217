/*
 * dqnctl — the command line of dqnd: one subcommand per protocol command,
 * plus `fields` (the learner config table) and `demo` (trains the built-in
 * meanrev environment against a live daemon).
 */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo_env.h"
#include "dqnd.h"
#include "npy.h"

enum { EXIT_OK = 0, EXIT_SERVER = 1, EXIT_USAGE = 2, EXIT_TRANSPORT = 3, EXIT_LOCAL = 4, EXIT_UNLEARNED = 5 };

static const char *usage_text =
    "usage: dqnctl [--url URL] [--timeout MS] [--token T] [--json] COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  health                              is the daemon serving?\n"
    "  info                                version, backend, device, limits\n"
    "  list                                trainers and their stats\n"
    "  fields                              learner config fields (name, bounds, meaning)\n"
    "  create NAME [field=value ...] [--backend cpu|cuda|auto]\n"
    "  destroy NAME [--save]               (--save writes a final checkpoint first)\n"
    "  submit NAME --states S.npy --actions A.npy --rewards R.npy --next-states S2.npy\n"
    "              --dones D.npy [--episode-ids E.npy]\n"
    "  step NAME N                         N training steps\n"
    "  act NAME --states S.npy [--noisy] [--q] [-o ACTIONS.npy]\n"
    "  sync NAME [--tau T]                 target update (hard without --tau)\n"
    "  set NAME field=value ...            change hyperparameters\n"
    "  stats NAME\n"
    "  save NAME [--with-replay]           write a checkpoint on the daemon\n"
    "  fetch NAME -o FILE [--checkpoint ID] download a checkpoint (newest by default)\n"
    "  load NAME (--path DAEMON_PATH | --file LOCAL_FILE) [--create] [--backend B]\n"
    "  demo [--name NAME] [--iterations N] [field=value ...]\n"
    "                                      train the built-in meanrev environment\n"
    "\n"
    "URL defaults to the daemon's embedded default (ipc socket in the runtime dir).\n"
    "exit status: 0 ok, 1 the daemon answered an error (message on stderr),\n"
    "2 usage, 3 cannot reach the daemon or timed out, 4 local file error,\n"
    "5 demo finished below 90%% of the optimal return.\n";

typedef struct ctx {
  dqnd_client_t *c;
  int json;
} ctx_t;

static int fail_rc(ctx_t *x, int rc) {
  fprintf(stderr, "dqnctl: %s: %s\n", dqnd_strerror(rc), dqnd_last_error(x->c));
  return rc > 0 ? EXIT_SERVER : (rc == DQND_EIO ? EXIT_LOCAL : EXIT_TRANSPORT);
}

static void print_json(json_t *j) {
  char *s = json_dumps(j, JSON_INDENT(1) | JSON_SORT_KEYS);
  if (s) puts(s);
  free(s);
  json_decref(j);
}

static json_t *stats_json(const learner_stats_t *st) {
  return json_pack("{s:I, s:I, s:I, s:i, s:f, s:f, s:f, s:f, s:f, s:f}", "step", (json_int_t)st->step, "replay_size",
                   (json_int_t)st->replay_size, "replay_total", (json_int_t)st->replay_total, "steps_run",
                   st->steps_run, "loss_mean", (double)st->loss_mean, "loss_last", (double)st->loss_last,
                   "grad_norm_mean", (double)st->grad_norm_mean, "grad_norm_last", (double)st->grad_norm_last,
                   "q_mean", (double)st->q_mean, "per_beta", (double)st->per_beta);
}

static void print_stats(ctx_t *x, const char *name, const learner_stats_t *st) {
  if (x->json) {
    json_t *j = stats_json(st);
    json_object_set_new(j, "name", json_string(name));
    print_json(j);
    return;
  }
  printf("%s: step %llu  replay %lld (total %lld)  loss %.5f (last %.5f)  grad-norm %.4f  q %.4f  beta %.3f\n", name,
         (unsigned long long)st->step, (long long)st->replay_size, (long long)st->replay_total, st->loss_mean,
         st->loss_last, st->grad_norm_mean, st->q_mean, st->per_beta);
}

/* the value after --flag in argv, or NULL */
static const char *flag(int argc, char **argv, const char *name) {
  for (int i = 0; i + 1 < argc; i++)
    if (!strcmp(argv[i], name)) return argv[i + 1];
  return NULL;
}
static int has(int argc, char **argv, const char *name) {
  for (int i = 0; i < argc; i++)
    if (!strcmp(argv[i], name)) return 1;
  return 0;
}
/* positional field=value arguments */
static int collect_fields(int argc, char **argv, const char **out, int max) {
  int n = 0;
  for (int i = 0; i < argc && n < max; i++) {
    if (!strncmp(argv[i], "--", 2)) {
      i++; /* skip its value (flags without values are not followed by field=value) */
      if (i < argc && strchr(argv[i], '=') && strncmp(argv[i], "--", 2)) i--;
      continue;
    }
    if (strchr(argv[i], '=')) out[n++] = argv[i];
  }
  return n;
}

static int cmd_health(ctx_t *x, int argc, char **argv) {
  int serving = 0;
  double up = 0;
  int rc = dqnd_health(x->c, &serving, &up);
  if (rc) return fail_rc(x, rc);
  if (x->json) print_json(json_pack("{s:b, s:f}", "serving", serving, "uptime_s", up));
  else printf("%s, up %.1f s\n", serving ? "serving" : "shutting down", up);
  return EXIT_OK;
}

static int cmd_info(ctx_t *x, int argc, char **argv) {
  Dqnd__V1__ServerInfo m = DQND__V1__SERVER_INFO__INIT;
  Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
  req.command_case = DQND__V1__REQUEST__COMMAND_SERVER_INFO;
  req.server_info = &m;
  Dqnd__V1__Reply *rep;
  int rc = dqnd_call(x->c, &req, &rep);
  if (rc) {
    dqnd_reply_free(rep);
    return fail_rc(x, rc);
  }
  Dqnd__V1__ServerInfoResult *i = rep->server_info;
  if (x->json)
    print_json(json_pack("{s:s, s:i, s:s, s:s, s:i, s:i, s:I, s:i, s:s}", "version", i->version, "protocol",
                         (int)i->protocol, "default_backend", i->default_backend, "device", i->device, "trainers",
                         (int)i->trainers, "max_trainers", (int)i->max_trainers, "max_message_bytes",
                         (json_int_t)i->max_message_bytes, "queue_depth", (int)i->queue_depth, "state_dir",
                         i->state_dir));
  else
    printf("dqnd %s (protocol %u)\nbackend %s, device %s\ntrainers %u of %u, queue depth %u, max message %llu bytes\n"
           "state %s\n",
           i->version, i->protocol, i->default_backend, i->device, i->trainers, i->max_trainers, i->queue_depth,
           (unsigned long long)i->max_message_bytes, i->state_dir);
  dqnd_reply_free(rep);
  return EXIT_OK;
}

static int cmd_list(ctx_t *x, int argc, char **argv) {
  Dqnd__V1__ListTrainers m = DQND__V1__LIST_TRAINERS__INIT;
  Dqnd__V1__Request req = DQND__V1__REQUEST__INIT;
  req.command_case = DQND__V1__REQUEST__COMMAND_LIST_TRAINERS;
  req.list_trainers = &m;
  Dqnd__V1__Reply *rep;
  int rc = dqnd_call(x->c, &req, &rep);
  if (rc) {
    dqnd_reply_free(rep);
    return fail_rc(x, rc);
  }
  json_t *arr = json_array();
  for (size_t i = 0; i < rep->list->n_trainers; i++) {
    Dqnd__V1__TrainerInfo *t = rep->list->trainers[i];
    Dqnd__V1__TrainerStats *s = t->stats;
    if (x->json) {
      json_t *j = json_pack("{s:s, s:s, s:s, s:I, s:I, s:f, s:i}", "name", t->name, "backend", t->backend, "state",
                            t->state, "step", (json_int_t)(s ? s->step : 0), "replay_size",
                            (json_int_t)(s ? s->replay_size : 0), "loss", s ? (double)s->loss_mean : 0.0, "queued",
                            (int)t->queued);
      json_array_append_new(arr, j);
    } else
      printf("%-24s %-5s %-8s step %-9llu replay %-9lld loss %.5f queued %u\n", t->name, t->backend, t->state,
             (unsigned long long)(s ? s->step : 0), (long long)(s ? s->replay_size : 0), s ? s->loss_mean : 0.0f,
             t->queued);
  }
  if (x->json) print_json(arr);
  else {
    if (!rep->list->n_trainers) printf("no trainers\n");
    json_decref(arr);
  }
  dqnd_reply_free(rep);
  return EXIT_OK;
}

static int cmd_fields(ctx_t *x, int argc, char **argv) {
  learner_config_t d;
  learner_config_default(&d);
  for (int i = 0; i < learner_num_fields; i++) {
    const learner_field_t *f = &learner_fields[i];
    char v[128];
    learner_config_get(&d, f, v, sizeof v);
    printf("%-16s %-9s default %-10s %s%s\n", f->name, f->hparam ? "hparam" : "fixed", v, f->help,
           f->hparam ? " (SetHyperparams)" : "");
  }
  return EXIT_OK;
}

static int cmd_create(ctx_t *x, int argc, char **argv) {
  if (argc < 1) return fprintf(stderr, "dqnctl create: needs NAME\n"), EXIT_USAGE;
  const char *fields[128];
  int n = collect_fields(argc - 1, argv + 1, fields, 128);
  int created = 0;
  int rc = dqnd_create_trainer(x->c, argv[0], fields, n, flag(argc, argv, "--backend"), &created);
  if (rc) return fail_rc(x, rc);
  if (x->json) print_json(json_pack("{s:s, s:b}", "name", argv[0], "created", created));
  else printf("%s: %s\n", argv[0], created ? "created" : "exists with the same config");
  return EXIT_OK;
}

static int cmd_destroy(ctx_t *x, int argc, char **argv) {
  if (argc < 1) return fprintf(stderr, "dqnctl destroy: needs NAME\n"), EXIT_USAGE;
  int rc = dqnd_destroy_trainer(x->c, argv[0], has(argc, argv, "--save"));
  if (rc) return fail_rc(x, rc);
  if (!x->json) printf("%s: destroyed\n", argv[0]);
  else print_json(json_pack("{s:s, s:b}", "name", argv[0], "destroyed", 1));
  return EXIT_OK;
}

/* loads an .npy, checks its element count; float32/int32/uint8 by `kind` */
static int load_npy(const char *path, const char *what, npy_array_t *a) {
  char err[512];
  if (!path) return fprintf(stderr, "dqnctl: --%s FILE.npy is required\n", what), EXIT_USAGE;
  if (npy_read(path, a, err, sizeof err)) return fprintf(stderr, "dqnctl: %s\n", err), EXIT_LOCAL;
  return 0;
}

static int cmd_submit(ctx_t *x, int argc, char **argv) {
  if (argc < 1) return fprintf(stderr, "dqnctl submit: needs NAME\n"), EXIT_USAGE;
  npy_array_t s = {0}, s2 = {0}, a = {0}, r = {0}, d = {0}, e = {0};
  int rc = load_npy(flag(argc, argv, "--states"), "states", &s);
  if (!rc) rc = load_npy(flag(argc, argv, "--next-states"), "next-states", &s2);
  if (!rc) rc = load_npy(flag(argc, argv, "--actions"), "actions", &a);
  if (!rc) rc = load_npy(flag(argc, argv, "--rewards"), "rewards", &r);
  if (!rc) rc = load_npy(flag(argc, argv, "--dones"), "dones", &d);
  if (!rc && flag(argc, argv, "--episode-ids")) rc = load_npy(flag(argc, argv, "--episode-ids"), "episode-ids", &e);
  float *fs = NULL, *fs2 = NULL, *fr = NULL;
  int32_t *ia = NULL;
  uint8_t *ud = NULL;
  int64_t *ie = NULL;
  if (rc) goto out;
  int64_t n = s.ndim == 2 ? s.shape[0] : -1, S = s.ndim == 2 ? s.shape[1] : -1;
  if (n < 1 || s2.ndim != 2 || s2.shape[0] != n || s2.shape[1] != S || a.count != n || r.count != n || d.count != n ||
      (e.data && e.count != n)) {
    fprintf(stderr, "dqnctl submit: shapes disagree: states must be [n, state_dim], next-states the same, "
                    "actions/rewards/dones/episode-ids [n]\n");
    rc = EXIT_USAGE;
    goto out;
  }
  fs = npy_to_f32(&s), fs2 = npy_to_f32(&s2), fr = npy_to_f32(&r);
  ia = malloc(sizeof(int32_t) * (size_t)n);
  ud = malloc((size_t)n);
  if (e.data) ie = malloc(sizeof(int64_t) * (size_t)n);
  if (!fs || !fs2 || !fr || !ia || !ud || (e.data && !ie)) {
    fprintf(stderr, "dqnctl: out of memory\n");
    rc = EXIT_LOCAL;
    goto out;
  }
  if (npy_to_i32(&a, ia)) {
    fprintf(stderr, "dqnctl submit: actions must be integers\n");
    rc = EXIT_USAGE;
    goto out;
  }
  double *dd = npy_to_f64(&d);
  for (int64_t i = 0; dd && i < n; i++) ud[i] = dd[i] == 0 ? 0 : (dd[i] == 1 ? 1 : 2); /* 2: the daemon names it */
  free(dd);
  if (ie) {
    double *de = npy_to_f64(&e);
    for (int64_t i = 0; de && i < n; i++) ie[i] = (int64_t)de[i];
    free(de);
  }
  learner_transitions_t t = {n, fs, ia, fr, fs2, ud, ie};
  int64_t size = 0;
  int crc = dqnd_submit(x->c, argv[0], (int)S, &t, &size);
  if (crc) rc = fail_rc(x, crc);
  else if (x->json) print_json(json_pack("{s:I, s:I}", "accepted", (json_int_t)n, "replay_size", (json_int_t)size));
  else printf("%s: %lld transitions accepted, replay holds %lld\n", argv[0], (long long)n, (long long)size);
out:
  npy_free(&s), npy_free(&s2), npy_free(&a), npy_free(&r), npy_free(&d), npy_free(&e);
  free(fs), free(fs2), free(fr), free(ia), free(ud), free(ie);
  return rc;
}

static int cmd_step(ctx_t *x, int argc, char **argv) {
  if (argc < 2) return fprintf(stderr, "dqnctl step: needs NAME N\n"), EXIT_USAGE;
  char *end;
  long n = strtol(argv[1], &end, 10);
  if (*end || n < 1) return fprintf(stderr, "dqnctl step: N must be a positive integer\n"), EXIT_USAGE;
  learner_stats_t st;
  int rc = dqnd_step(x->c, argv[0], (int)n, &st);
  if (rc) return fail_rc(x, rc);
  print_stats(x, argv[0], &st);
  return EXIT_OK;
}

static int cmd_act(ctx_t *x, int argc, char **argv) {
  if (argc < 1) return fprintf(stderr, "dqnctl act: needs NAME\n"), EXIT_USAGE;
  npy_array_t s = {0};
  int rc = load_npy(flag(argc, argv, "--states"), "states", &s);
  if (rc) return rc;
  if (s.ndim != 2) {
    npy_free(&s);
    return fprintf(stderr, "dqnctl act: states must be [n, state_dim]\n"), EXIT_USAGE;
  }
  int n = (int)s.shape[0], S = (int)s.shape[1];
  float *fs = npy_to_f32(&s);
  int32_t *a = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
  size_t qcap = (size_t)n * 1024;
  float *q = has(argc, argv, "--q") ? malloc(sizeof(float) * qcap) : NULL;
  int crc = fs && a ? dqnd_act(x->c, argv[0], fs, n, S, has(argc, argv, "--noisy"), a, q, q ? qcap : 0) : DQND_ENOMEM;
  if (crc) rc = fail_rc(x, crc);
  else {
    const char *o = flag(argc, argv, "-o");
    char err[256];
    int64_t shape[1] = {n};
    if (o && npy_write(o, NPY_I4, 1, shape, a, err, sizeof err)) {
      fprintf(stderr, "dqnctl: %s\n", err);
      rc = EXIT_LOCAL;
    } else if (x->json) {
      json_t *arr = json_array();
      for (int i = 0; i < n; i++) json_array_append_new(arr, json_integer(a[i]));
      print_json(json_pack("{s:o}", "actions", arr));
    } else if (!o) {
      for (int i = 0; i < n; i++) printf("%d\n", a[i]);
    }
  }
  npy_free(&s);
  free(fs), free(a), free(q);
  return rc;
}

static int cmd_sync(ctx_t *x, int argc, char **argv) {
  if (argc < 1) return fprintf(stderr, "dqnctl sync: needs NAME\n"), EXIT_USAGE;
  const char *t = flag(argc, argv, "--tau");
  int rc = dqnd_sync_target(x->c, argv[0], t ? strtof(t, NULL) : 0.0f);
  if (rc) return fail_rc(x, rc);
  if (!x->json) printf("%s: target updated\n", argv[0]);
  return EXIT_OK;
}

static int cmd_set(ctx_t *x, int argc, char **argv) {
  if (argc < 2) return fprintf(stderr, "dqnctl set: needs NAME field=value ...\n"), EXIT_USAGE;
  const char *fields[128];
  int n = collect_fields(argc - 1, argv + 1, fields, 128);
  int rc = dqnd_set_hparams(x->c, argv[0], fields, n);
  if (rc) return fail_rc(x, rc);
  if (!x->json) printf("%s: %d hyperparameter%s set\n", argv[0], n, n == 1 ? "" : "s");
  return EXIT_OK;
}

static int cmd_stats(ctx_t *x, int argc, char **argv) {
  if (argc < 1) return fprintf(stderr, "dqnctl stats: needs NAME\n"), EXIT_USAGE;
  learner_stats_t st;
  int rc = dqnd_get_stats(x->c, argv[0], &st);
  if (rc) return fail_rc(x, rc);
  print_stats(x, argv[0], &st);
  return EXIT_OK;
}

static void print_ckpt(ctx_t *x, const dqnd_checkpoint_t *c) {
  char crc[9];
  snprintf(crc, sizeof crc, "%08x", c->crc32);
  if (x->json)
    print_json(json_pack("{s:s, s:s, s:I, s:I, s:s}", "checkpoint", c->id, "path", c->path, "bytes", (json_int_t)c->bytes,
                         "step", (json_int_t)c->step, "crc32", crc));
  else
    printf("%s (%llu bytes, crc32 %08x) at %s\n", c->id, (unsigned long long)c->bytes, c->crc32, c->path);
}

static int cmd_save(ctx_t *x, int argc, char **argv) {
  if (argc < 1) return fprintf(stderr, "dqnctl save: needs NAME\n"), EXIT_USAGE;
  dqnd_checkpoint_t c;
  int rc = dqnd_save_checkpoint(x->c, argv[0], has(argc, argv, "--with-replay"), &c);
  if (rc) return fail_rc(x, rc);
  print_ckpt(x, &c);
  return EXIT_OK;
}

static int cmd_fetch(ctx_t *x, int argc, char **argv) {
  const char *o = flag(argc, argv, "-o");
  if (argc < 1 || !o) return fprintf(stderr, "dqnctl fetch: needs NAME -o FILE\n"), EXIT_USAGE;
  dqnd_checkpoint_t c;
  int rc = dqnd_fetch_checkpoint(x->c, argv[0], flag(argc, argv, "--checkpoint"), o, 0, &c);
  if (rc) return fail_rc(x, rc);
  print_ckpt(x, &c);
  return EXIT_OK;
}

static int cmd_load(ctx_t *x, int argc, char **argv) {
  const char *p = flag(argc, argv, "--path"), *f = flag(argc, argv, "--file");
  if (argc < 1 || !!p == !!f) return fprintf(stderr, "dqnctl load: needs NAME and one of --path, --file\n"), EXIT_USAGE;
  int create = has(argc, argv, "--create");
  const char *be = flag(argc, argv, "--backend");
  int rc = p ? dqnd_load_checkpoint_path(x->c, argv[0], p, create, be)
             : dqnd_load_checkpoint_file(x->c, argv[0], f, create, be, 0);
  if (rc) return fail_rc(x, rc);
  if (!x->json) printf("%s: %s from the checkpoint\n", argv[0], create ? "created" : "restored");
  return EXIT_OK;
}

/* ---------------------------------------------------------------- demo */

typedef struct remote {
  ctx_t *x;
  const char *name;
  int rc;
} remote_t;

static int r_submit(void *p, const learner_transitions_t *t) {
  remote_t *r = p;
  return r->rc = dqnd_submit(r->x->c, r->name, DEMO_ENV_STATE_DIM, t, NULL);
}
static int r_step(void *p, int n, learner_stats_t *st) {
  remote_t *r = p;
  r->rc = dqnd_step(r->x->c, r->name, n, st);
  return r->rc == 9 /* FAILED_PRECONDITION: not a batch yet */ ? (r->rc = 0) : r->rc;
}
static int r_act(void *p, const float *s, int n, int noisy, int32_t *a) {
  remote_t *r = p;
  return r->rc = dqnd_act(r->x->c, r->name, s, n, DEMO_ENV_STATE_DIM, noisy, a, NULL, 0);
}

static void demo_progress(void *p, const demo_point_t *pt) {
  ctx_t *x = p;
  double frac = pt->optimal_return != 0 ? pt->policy_return / pt->optimal_return : 0;
  if (x->json) {
    print_json(json_pack("{s:i, s:I, s:f, s:f, s:f, s:f}", "iteration", pt->iteration, "step",
                         (json_int_t)pt->learner_step, "loss", (double)pt->loss, "return", pt->policy_return,
                         "optimal", pt->optimal_return, "random", pt->random_return));
    return;
  }
  int bar = frac < 0 ? 0 : (frac > 1 ? 40 : (int)(40 * frac));
  printf("iter %4d  step %6llu  loss %7.4f  return %7.3f  optimal %7.3f  %5.1f%% |%.*s%*s|\n", pt->iteration,
         (unsigned long long)pt->learner_step, pt->loss, pt->policy_return, pt->optimal_return, 100 * frac, bar,
         "########################################", 40 - bar, "");
  fflush(stdout);
}

static int cmd_demo(ctx_t *x, int argc, char **argv) {
  const char *name = flag(argc, argv, "--name");
  if (!name) name = "demo";
  demo_opts_t o;
  demo_opts_default(&o);
  const char *it = flag(argc, argv, "--iterations");
  if (it) o.iterations = atoi(it);
  if (o.iterations < 1) return fprintf(stderr, "dqnctl demo: --iterations must be >= 1\n"), EXIT_USAGE;
  learner_config_t c;
  demo_env_learner_config(&c);
  char err[256];
  const char *extra[64];
  int ne = collect_fields(argc, argv, extra, 64);
  for (int i = 0; i < ne; i++) {
    char k[64];
    const char *eq = strchr(extra[i], '=');
    snprintf(k, sizeof k, "%.*s", (int)(eq - extra[i]), extra[i]);
    if (learner_config_set(&c, k, eq + 1, err, sizeof err)) return fprintf(stderr, "dqnctl demo: %s\n", err), EXIT_USAGE;
  }
  /* the whole config travels as fields, so the daemon's defaults do not matter */
  const char *fields[64];
  char store[64][160];
  int nf = 0;
  for (int i = 0; i < learner_num_fields && nf < 64; i++, nf++) {
    char v[128];
    learner_config_get(&c, &learner_fields[i], v, sizeof v);
    snprintf(store[nf], sizeof store[nf], "%s=%s", learner_fields[i].name, v);
    fields[nf] = store[nf];
  }
  /* a fresh trainer each run: replace one left from an earlier demo */
  int rc = dqnd_destroy_trainer(x->c, name, 0);
  if (rc && rc != 5 /* NOT_FOUND */) return fail_rc(x, rc);
  rc = dqnd_create_trainer(x->c, name, fields, nf, flag(argc, argv, "--backend"), NULL);
  if (rc) return fail_rc(x, rc);
  if (!x->json)
    printf("dqnctl demo: trainer '%s' on the daemon, meanrev (9x3x3 actions), %d rounds of %d env steps + %d "
           "train steps\n",
           name, o.iterations, o.envs * o.collect_steps, o.train_steps);
  remote_t r = {x, name, 0};
  demo_driver_t drv = {&r, r_submit, r_step, r_act};
  demo_point_t fin;
  if (demo_train(&drv, &o, demo_progress, x, &fin)) return fail_rc(x, r.rc ? r.rc : DQND_EPROTO);
  double frac = fin.policy_return / fin.optimal_return;
  if (!x->json)
    printf("dqnctl demo: greedy policy reaches %.1f%% of the optimal return (random: %.1f%%)\n", 100 * frac,
           100 * fin.random_return / fin.optimal_return);
  return frac >= 0.9 ? EXIT_OK : EXIT_UNLEARNED;
}

/* ---------------------------------------------------------------- main */

typedef struct sub {
  const char *name;
  int (*fn)(ctx_t *x, int argc, char **argv);
  int needs_daemon;
} sub_t;

static const sub_t subs[] = {
    {"health", cmd_health, 1}, {"info", cmd_info, 1},     {"list", cmd_list, 1},   {"fields", cmd_fields, 0},
    {"create", cmd_create, 1}, {"destroy", cmd_destroy, 1}, {"submit", cmd_submit, 1}, {"step", cmd_step, 1},
    {"act", cmd_act, 1},       {"sync", cmd_sync, 1},     {"set", cmd_set, 1},     {"stats", cmd_stats, 1},
    {"save", cmd_save, 1},     {"fetch", cmd_fetch, 1},   {"load", cmd_load, 1},   {"demo", cmd_demo, 1},
};

int main(int argc, char **argv) {
  char url[600];
  dqnd_default_url(url, sizeof url);
  const char *env_url = getenv("DQND_URL");
  if (env_url && *env_url) snprintf(url, sizeof url, "%s", env_url);
  int timeout = 60000, json = 0;
  const char *token = getenv("DQND_TOKEN");
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(usage_text, stdout);
      return EXIT_OK;
    } else if (!strcmp(argv[i], "--json"))
      json = 1;
    else if (i + 1 < argc && !strcmp(argv[i], "--url"))
      snprintf(url, sizeof url, "%s", argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--timeout"))
      timeout = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--token"))
      token = argv[++i];
    else {
      fprintf(stderr, "dqnctl: unknown option '%s'\n%s", argv[i], usage_text);
      return EXIT_USAGE;
    }
  }
  if (i >= argc) {
    fputs(usage_text, stderr);
    return EXIT_USAGE;
  }
  const sub_t *s = NULL;
  for (size_t k = 0; k < sizeof subs / sizeof subs[0]; k++)
    if (!strcmp(subs[k].name, argv[i])) s = &subs[k];
  if (!s) {
    fprintf(stderr, "dqnctl: unknown command '%s'\n%s", argv[i], usage_text);
    return EXIT_USAGE;
  }
  ctx_t x = {NULL, json};
  if (s->needs_daemon) {
    char err[700];
    int rc = dqnd_connect(url, timeout, &x.c, err, sizeof err);
    if (rc) {
      fprintf(stderr, "dqnctl: %s\n", err);
      return EXIT_TRANSPORT;
    }
    if (token) dqnd_set_token(x.c, token);
  }
  int rc = s->fn(&x, argc - i - 1, argv + i + 1);
  dqnd_close(x.c);
  return rc;
}
