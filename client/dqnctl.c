/*
 * dqnctl — the command line of dqnd: one subcommand per protocol command,
 * plus `fields` (the learner config table), `inspect` (a checkpoint file's
 * header and sections) and `demo` (trains the built-in meanrev environment
 * against a live daemon). Every subcommand declares its arguments (cli.h):
 * nothing a user types is silently ignored.
 *
 * Exit status: 0 ok, 1 the daemon answered an error, 2 usage, 3 cannot reach
 * the daemon, 4 a local file or its data is wrong, 5 the demo finished below
 * 90% of the optimal return.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "dqnctl_common.h"
#include "dqnctl_arrays.h"
#include "dqnctl_demo.h"
#include "dqnctl_watch.h"
#include "meanrev_env.h"
#include "dqnd_build_config.h"

static const char *usage_text =
    "usage: dqnctl [--url URL] [--timeout MS] [--token T] [--tls-ca F ...] [--json] COMMAND [ARGS]\n"
    "       dqnctl COMMAND --help      (each command's arguments and formats)\n"
    "\n"
    "commands:\n"
    "  health                              is the daemon serving?\n"
    "  info                                version, backend, device, limits\n"
    "  list                                trainers and their stats\n"
    "  fields                              learner config fields: type, bounds, default, when they may change\n"
    "  create NAME [field=value ...] [--backend cpu|cuda|auto] [--population N]\n"
    "  destroy NAME [--save]               (--save writes a final checkpoint first and prints where)\n"
    "  submit NAME --states S.npy --actions A.npy --rewards R.npy --next-states S2.npy --dones D.npy\n"
    "              [--episode-ids E.npy] [--episode-ends T.npy]   (dqnctl submit --help: dtypes, shapes)\n"
    "  step NAME N                         N training steps\n"
    "  pretrain NAME N                     N Decision Transformer pre-training steps (dt_layers >= 1)\n"
    "  act NAME --states S.npy [--noisy] [--q] [--q-out Q.npy] [-o ACTIONS.npy] [--episode E]\n"
    "  sync NAME [--tau T]                 target update (hard copy without --tau, or with 0)\n"
    "  set NAME field=value ...            change hyperparameters between steps (all or nothing)\n"
    "  stats NAME\n"
    "  save NAME [--with-replay] [--pin]   write a checkpoint on the daemon (--pin: kept as a resume point)\n"
    "  checkpoints NAME                    the trainer's checkpoints on the daemon (id, step, size, time)\n"
    "  fetch NAME -o FILE [--checkpoint ID] download a checkpoint (newest by default; ID as printed)\n"
    "  load NAME (--path DAEMON_PATH | --file LOCAL_FILE) [--create] [--backend B]\n"
    "  inspect FILE                        a .dqnd checkpoint's header, config and sections (local)\n"
    "  copy-member NAME DST SRC [field=factor ...] [--with-replay]\n"
    "                                      a population's exploit and explore: member DST becomes SRC's copy\n"
    "  demo [--name NAME] [--env meanrev|deepsea|bitflip] [--backend B] [--dt] [field=value ...]\n"
    "                                      train a built-in environment on a new trainer\n"
    "\n"
    "options:\n"
    "  --url URL       the daemon (default: DQND_URL, else the per-user socket of `dqnd`\n"
    "                  with no options, else the system service's /run/dqnd/dqnd.sock, else\n"
    "                  dqnd@0's /run/dqnd/0/dqnd.sock)\n"
    "  --timeout MS    per request (default 60000 ms)\n"
    "  --token T       auth token (default: DQND_TOKEN)\n"
    "  --tls-ca F      tls+tcp:// URLs: the PEM CA that signed the daemon's certificate\n"
    "                  (default: DQND_TLS_CA)\n"
    "  --tls-cert F, --tls-key F\n"
    "                  this client's PEM certificate and key, for a daemon with\n"
    "                  tls-verify-clients (default: DQND_TLS_CERT, DQND_TLS_KEY)\n"
    "  --tls-server-name N  the name the daemon's certificate must carry (default: the URL's host)\n"
    "  --member I      a population's member: what submit, act, sync, set and stats address,\n"
    "                  whose stats step and pretrain print; fetch and load move that member's\n"
    "                  state alone (a lone trainer's checkpoint); other commands refuse it\n"
    "                  (default 0; docs/population.md)\n"
    "  --json          machine-readable output\n"
    "  --version, --help\n"
    "\n"
    "exit status: 0 ok, 1 the daemon answered an error (its message, naming the field, on\n"
    "stderr), 2 usage, 3 cannot reach the daemon or timed out, 4 local file or data error,\n"
    "5 demo finished below 90% of the optimal return, 130 step or pretrain interrupted\n"
    "(Ctrl-C: the steps that ran are printed).\n";

/* ------------------------------------------------------------ commands */

static int cmd_health(ctx_t *x, const cli_args_t *a) {
  int serving = 0;
  double up = 0;
  int rc = dqnd_health(x->c, &serving, &up);
  if (rc) return fail_rc(x, rc);
  if (x->json) print_json(json_pack("{s:b, s:f}", "serving", serving, "uptime_s", up));
  else printf("%s, up %.1f s\n", serving ? "serving" : "shutting down", up);
  return EXIT_OK;
}

static int cmd_info(ctx_t *x, const cli_args_t *a) {
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
  if (rep->result_case != DQND__V1__REPLY__RESULT_SERVER_INFO) { /* not a dqnd of this protocol */
    dqnd_reply_free(rep);
    fprintf(stderr, "dqnctl: the reply to ServerInfo carries no server info\n");
    return EXIT_TRANSPORT;
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

static int cmd_list(ctx_t *x, const cli_args_t *a) {
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
  if (rep->result_case != DQND__V1__REPLY__RESULT_LIST) {
    dqnd_reply_free(rep);
    fprintf(stderr, "dqnctl: the reply to ListTrainers carries no list\n");
    return EXIT_TRANSPORT;
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

static const char *type_name(learner_field_type_t t) {
  switch (t) {
  case LCF_INT32: return "int32";
  case LCF_INT64: return "int64";
  case LCF_UINT64: return "uint64";
  case LCF_FLOAT: return "float";
  case LCF_BOOL: return "bool";
  case LCF_BRANCHES: return "list";
  }
  return "?";
}

static int cmd_fields(ctx_t *x, const cli_args_t *a) {
  learner_config_t d;
  learner_config_default(&d);
  json_t *arr = x->json ? json_array() : NULL;
  if (!x->json)
    printf("%-18s %-6s %-24s %-9s %-8s %s\n", "field", "type", "bounds", "default", "changes", "meaning");
  for (int i = 0; i < learner_num_fields; i++) {
    const learner_field_t *f = &learner_fields[i];
    char v[128], b[128], bd[96];
    learner_config_get(&d, f, v, sizeof v);
    learner_field_bounds(f, bd, sizeof bd);
    if (f->type == LCF_BRANCHES) snprintf(b, sizeof b, "%d-%d sizes in %s", 1, LEARNER_MAX_BRANCHES, bd);
    else snprintf(b, sizeof b, "%s", bd);
    const char *when = f->hparam ? "any time" : "create";
    if (arr)
      json_array_append_new(arr, json_pack("{s:s, s:s, s:f, s:f, s:s, s:b, s:s}", "name", f->name, "type",
                                           type_name(f->type), "min", f->min, "max", f->max, "default", v,
                                           "changeable", f->hparam, "help", f->help));
    else printf("%-18s %-6s %-24s %-9s %-8s %s\n", f->name, type_name(f->type), b, v, when, f->help);
  }
  if (arr) print_json(arr);
  else
    printf("\n'any time': `dqnctl set` changes it between steps; 'create': fixed when the trainer is created.\n");
  return EXIT_OK;
}

static int cmd_create(ctx_t *x, const cli_args_t *a) {
  int created = 0;
  long long pop = 1;
  const char *ps = opt(x, a, "--population");
  if (ps && cli_int("dqnctl create", "--population", ps, 1, LEARNER_MAX_POPULATION, &pop)) return EXIT_USAGE;
  int rc = dqnd_create_population(x->c, a->pos[0], a->fields, a->nfields, opt(x, a, "--backend"), (int)pop, &created);
  if (rc) return fail_rc(x, rc);
  if (x->json) print_json(json_pack("{s:s, s:b, s:I}", "name", a->pos[0], "created", created, "population", pop));
  else if (pop > 1)
    printf("%s: %s (a population of %lld)\n", a->pos[0], created ? "created" : "exists with the same config", pop);
  else printf("%s: %s\n", a->pos[0], created ? "created" : "exists with the same config");
  return EXIT_OK;
}

static int cmd_copy_member(ctx_t *x, const cli_args_t *a) {
  long long dst, src;
  if (cli_int("dqnctl copy-member", "DST", a->pos[1], 0, LEARNER_MAX_POPULATION - 1, &dst) ||
      cli_int("dqnctl copy-member", "SRC", a->pos[2], 0, LEARNER_MAX_POPULATION - 1, &src))
    return EXIT_USAGE;
  const int with_replay = opt(x, a, "--with-replay") != NULL;
  int rc = dqnd_copy_member(x->c, a->pos[0], (uint32_t)dst, (uint32_t)src, with_replay, a->fields, a->nfields);
  if (rc) return fail_rc(x, rc);
  if (x->json)
    print_json(json_pack("{s:s, s:I, s:I, s:b, s:i}", "name", a->pos[0], "dst", dst, "src", src, "with_replay",
                         with_replay, "factors", a->nfields));
  else
    printf("%s: member %lld copied from member %lld%s, %d hyperparameter%s scaled\n", a->pos[0], dst, src,
           with_replay ? " with its replay" : "", a->nfields, a->nfields == 1 ? "" : "s");
  return EXIT_OK;
}

static void print_ckpt_line(ctx_t *x, const dqnd_checkpoint_t *c, const char *verb);

static int cmd_destroy(ctx_t *x, const cli_args_t *a) {
  int save = opt(x, a, "--save") != NULL;
  dqnd_checkpoint_t saved;
  int rc = dqnd_destroy_trainer(x->c, a->pos[0], save, &saved);
  if (rc) return fail_rc(x, rc);
  if (x->json) {
    json_t *j = json_pack("{s:s, s:b}", "name", a->pos[0], "destroyed", 1);
    if (save) json_object_set_new(j, "checkpoint", json_pack("{s:s, s:I, s:s}", "id", saved.id, "seq",
                                                             (json_int_t)saved.seq, "path", saved.path));
    print_json(j);
  } else {
    printf("%s: destroyed\n", a->pos[0]);
    if (save) print_ckpt_line(x, &saved, "final checkpoint");
  }
  return EXIT_OK;
}

static int call_step(ctx_t *x, const char *name, long long n, void *out) {
  return dqnd_step(x->c, name, (int)n, out);
}

static int cmd_step(ctx_t *x, const cli_args_t *a) {
  long long n;
  if (cli_int("dqnctl step", "N", a->pos[1], 1, LEARNER_MAX_STEPS, &n)) return EXIT_USAGE;
  learner_stats_t st = {0};
  int interrupted;
  int rc = watched(x, a->pos[0], n, call_step, &st, &interrupted);
  if (rc) return interrupted ? (fail_rc(x, rc), 130) : fail_rc(x, rc);
  const char *stop = dqnd_last_stop(x->c);
  if (x->json) {
    json_t *j = stats_json(&st);
    json_object_set_new(j, "name", json_string(a->pos[0]));
    json_object_set_new(j, "stopped", json_boolean(*stop != 0));
    if (*stop) json_object_set_new(j, "stop_reason", json_string(stop));
    print_json(j);
  } else {
    print_stats(x, a->pos[0], &st);
    if (*stop)
      printf("%s: stopped after %u of %lld steps (%s)%s\n", a->pos[0], st.steps_run, n, stop,
             !strcmp(stop, "deadline") ? ": raise --timeout for longer Steps" : "");
  }
  return interrupted ? 130 : EXIT_OK;
}

typedef struct pretrain_out {
  learner_dt_stats_t st;
  double tokens_per_s;
} pretrain_out_t;
static int call_pretrain(ctx_t *x, const char *name, long long n, void *out) {
  pretrain_out_t *o = out;
  return dqnd_pretrain_dt(x->c, name, (int)n, &o->st, &o->tokens_per_s);
}

/* PretrainDT: the Decision Transformer's pre-training (docs/learner.md §16) */
static int cmd_pretrain(ctx_t *x, const cli_args_t *a) {
  long long n;
  if (cli_int("dqnctl pretrain", "N", a->pos[1], 1, LEARNER_MAX_STEPS, &n)) return EXIT_USAGE;
  pretrain_out_t o;
  int interrupted;
  int rc = watched(x, a->pos[0], n, call_pretrain, &o, &interrupted);
  if (rc) return interrupted ? (fail_rc(x, rc), 130) : fail_rc(x, rc);
  const char *stop = dqnd_last_stop(x->c);
  const learner_dt_stats_t *st = &o.st;
  if (x->json) {
    json_t *j = json_pack("{s:s, s:I, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:b, s:b}", "name", a->pos[0], "dt_step",
                          (json_int_t)st->dt_step, "steps_run", st->steps_run, "loss_mean", (double)st->loss_mean,
                          "loss_last", (double)st->loss_last, "grad_norm_mean", (double)st->grad_norm_mean,
                          "grad_norm_last", (double)st->grad_norm_last, "lr", (double)st->lr_last, "tokens_per_s",
                          o.tokens_per_s, "handed_over", st->handed_over, "stopped", *stop != 0);
    if (*stop) json_object_set_new(j, "stop_reason", json_string(stop));
    print_json(j);
  } else {
    printf("%s: dt step %llu (+%d)  loss %.4f (last %.4f)  grad norm %.4f (last %.4f)  lr %.3g  %.0f tokens/s\n",
           a->pos[0], (unsigned long long)st->dt_step, st->steps_run, (double)st->loss_mean, (double)st->loss_last,
           (double)st->grad_norm_mean, (double)st->grad_norm_last, (double)st->lr_last, o.tokens_per_s);
    if (st->handed_over) printf("%s: the DT's state embedding is now the first trunk layer (dt_handover=trunk1)\n",
                                a->pos[0]);
    if (*stop) printf("%s: stopped after %d of %lld steps (%s)\n", a->pos[0], st->steps_run, n, stop);
  }
  return interrupted ? 130 : EXIT_OK;
}

static int cmd_sync(ctx_t *x, const cli_args_t *a) {
  const char *t = opt(x, a, "--tau");
  double tau = 0;
  if (t && cli_float("dqnctl sync", "--tau", t, 0, 1, &tau)) return EXIT_USAGE;
  int rc = dqnd_sync_target(x->c, a->pos[0], (float)tau);
  if (rc) return fail_rc(x, rc);
  const int polyak = t && tau > 0; /* tau 0 is the hard copy (the protocol's rule) */
  if (x->json) print_json(json_pack("{s:s, s:s, s:f}", "name", a->pos[0], "sync", polyak ? "polyak" : "hard", tau));
  else if (polyak) printf("%s: target = %g x online + %g x target\n", a->pos[0], tau, 1 - tau);
  else printf("%s: target = online (hard copy)\n", a->pos[0]);
  return EXIT_OK;
}

static int cmd_set(ctx_t *x, const cli_args_t *a) {
  if (a->nfields == 0) {
    fprintf(stderr, "dqnctl set: needs at least one field=value (dqnctl fields: those that may change)\n");
    return EXIT_USAGE;
  }
  int rc = dqnd_set_hparams(x->c, a->pos[0], a->fields, a->nfields);
  if (rc) return fail_rc(x, rc);
  if (x->json) {
    json_t *j = json_object();
    for (int i = 0; i < a->nfields; i++) {
      size_t k = strcspn(a->fields[i], "=");
      char nm[128];
      snprintf(nm, sizeof nm, "%.*s", (int)k, a->fields[i]);
      json_object_set_new(j, nm, json_string(a->fields[i] + k + 1));
    }
    print_json(json_pack("{s:s, s:o}", "name", a->pos[0], "set", j));
  } else
    printf("%s: %d hyperparameter%s set\n", a->pos[0], a->nfields, a->nfields == 1 ? "" : "s");
  return EXIT_OK;
}

static int cmd_stats(ctx_t *x, const cli_args_t *a) {
  learner_stats_t st;
  int rc = dqnd_get_stats(x->c, a->pos[0], &st);
  if (rc) return fail_rc(x, rc);
  print_stats(x, a->pos[0], &st);
  return EXIT_OK;
}

static void fmt_time(int64_t t, char *buf, size_t n) {
  time_t tt = (time_t)t;
  struct tm tm;
  if (t <= 0 || !gmtime_r(&tt, &tm) || !strftime(buf, n, "%Y-%m-%d %H:%M:%SZ", &tm)) snprintf(buf, n, "-");
}

static json_t *ckpt_json(const dqnd_checkpoint_t *c) {
  char crc[9], tm[32];
  snprintf(crc, sizeof crc, "%08x", c->crc32);
  fmt_time(c->mtime, tm, sizeof tm);
  return json_pack("{s:I, s:s, s:s, s:I, s:I, s:s, s:s, s:b}", "seq", (json_int_t)c->seq, "checkpoint", c->id, "path",
                   c->path, "bytes", (json_int_t)c->bytes, "step", (json_int_t)c->step, "crc32", crc, "time", tm,
                   "pinned", c->pinned);
}

static void print_ckpt_line(ctx_t *x, const dqnd_checkpoint_t *c, const char *verb) {
  printf("%s %llu (%s): step %llu, %llu bytes, crc32 %08x, at %s\n", verb, (unsigned long long)c->seq, c->id,
         (unsigned long long)c->step, (unsigned long long)c->bytes, c->crc32, c->path);
}

static int cmd_save(ctx_t *x, const cli_args_t *a) {
  dqnd_checkpoint_t c;
  const int with_replay = opt(x, a, "--with-replay") != NULL;
  int rc = opt(x, a, "--pin") ? dqnd_save_checkpoint_pinned(x->c, a->pos[0], with_replay, &c)
                              : dqnd_save_checkpoint(x->c, a->pos[0], with_replay, &c);
  if (rc) return fail_rc(x, rc);
  if (x->json) print_json(ckpt_json(&c));
  else print_ckpt_line(x, &c, "checkpoint");
  return EXIT_OK;
}

static int cmd_checkpoints(ctx_t *x, const cli_args_t *a) {
  dqnd_checkpoint_t *cs;
  int n;
  int rc = dqnd_list_checkpoints(x->c, a->pos[0], &cs, &n);
  if (rc) return fail_rc(x, rc);
  if (x->json) {
    json_t *arr = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(arr, ckpt_json(&cs[i]));
    print_json(arr);
  } else if (n == 0)
    printf("%s: no checkpoints yet (dqnctl save %s)\n", a->pos[0], a->pos[0]);
  else {
    printf("%-6s %-12s %-12s %-21s %s\n", "id", "step", "bytes", "written (UTC)", "file");
    for (int i = 0; i < n; i++) {
      char tm[32];
      fmt_time(cs[i].mtime, tm, sizeof tm);
      printf("%-6llu %-12llu %-12llu %-21s %s%s\n", (unsigned long long)cs[i].seq, (unsigned long long)cs[i].step,
             (unsigned long long)cs[i].bytes, tm, cs[i].id, cs[i].pinned ? "  (pinned)" : "");
    }
  }
  free(cs);
  return EXIT_OK;
}

static int cmd_fetch(ctx_t *x, const cli_args_t *a) {
  if (!opt(x, a, "-o")) return fprintf(stderr, "dqnctl fetch: -o FILE is required (dqnctl fetch --help)\n"), EXIT_USAGE;
  dqnd_checkpoint_t c;
  int rc = dqnd_fetch_checkpoint(x->c, a->pos[0], opt(x, a, "--checkpoint"), opt(x, a, "-o"), 0, &c);
  if (rc) return fail_rc(x, rc);
  if (x->json) print_json(ckpt_json(&c));
  else print_ckpt_line(x, &c, "fetched checkpoint");
  return EXIT_OK;
}

static int cmd_load(ctx_t *x, const cli_args_t *a) {
  const char *p = opt(x, a, "--path"), *f = opt(x, a, "--file");
  if (!!p == !!f) {
    fprintf(stderr, "dqnctl load: give one of --path (a file on the daemon) or --file (a local file)\n");
    return EXIT_USAGE;
  }
  int create = opt(x, a, "--create") != NULL;
  const char *be = opt(x, a, "--backend");
  int rc = p ? dqnd_load_checkpoint_path(x->c, a->pos[0], p, create, be)
             : dqnd_load_checkpoint_file(x->c, a->pos[0], f, create, be, 0);
  if (rc) return fail_rc(x, rc);
  if (x->json) print_json(json_pack("{s:s, s:b}", "name", a->pos[0], "created", create));
  else printf("%s: %s from the checkpoint\n", a->pos[0], create ? "created" : "restored");
  return EXIT_OK;
}

/* ---------------------------------------------------------------- table */

static const cli_opt_t o_none[] = {{NULL, NULL, NULL}};
static const cli_opt_t o_create[] = {{"--backend", "B", "cpu, cuda or auto (default: the daemon's)"},
                                     {"--population", "N", "N members of this config, member i seeded seed + i (default 1)"},
                                     {NULL, NULL, NULL}};
static const cli_opt_t o_copy[] = {{"--with-replay", NULL, "copy SRC's replay too (else DST keeps its own)"},
                                   {NULL, NULL, NULL}};
static const cli_opt_t o_destroy[] = {{"--save", NULL, "write a final checkpoint first and print where it went"},
                                      {NULL, NULL, NULL}};
static const cli_opt_t o_submit[] = {{"--states", "S.npy", "[n, state_dim] float"},
                                     {"--actions", "A.npy", "[n] flat joint actions, or [n, branches] per-branch indices"},
                                     {"--rewards", "R.npy", "[n] float"},
                                     {"--next-states", "S2.npy", "[n, state_dim] float"},
                                     {"--dones", "D.npy", "[n] 0/1 (bool, integer or float)"},
                                     {"--episode-ids", "E.npy", "[n] integer (optional)"},
                                     {"--episode-ends", "T.npy", "[n] 0/1: 1 where an episode ends truncated (optional)"},
                                     {NULL, NULL, NULL}};
static const cli_opt_t o_act[] = {{"--states", "S.npy", "[n, state_dim] float"},
                                  {"--noisy", NULL, "fresh NoisyNet noise (trainers created with noisy=1)"},
                                  {"--q", NULL, "print (or put in --json) the Q values: the mean over ensemble heads and their variance"},
                                  {"--episode", "E", "the episode these states belong to (act_select=thompson: its head; default 0)"},
                                  {"--q-out", "Q.npy", "write the Q values: float32 [n, branches, max branch size], NaN-padded"},
                                  {"-o", "ACTIONS.npy", "write the actions: int32 [n] flat joint actions"},
                                  {NULL, NULL, NULL}};
static const cli_opt_t o_sync[] = {{"--tau", "T", "Polyak factor in [0, 1]: target = T x online + (1-T) x target"},
                                   {NULL, NULL, NULL}};
static const cli_opt_t o_save[] = {{"--with-replay", NULL, "include the replay buffer"},
                                   {"--pin", NULL, "keep it besides the newest keep-checkpoints until the trainer's next pinned one (a resume point)"},
                                   {NULL, NULL, NULL}};
static const cli_opt_t o_fetch[] = {{"-o", "FILE", "where to write it (replaced only once the download is complete and checked)"},
                                    {"--checkpoint", "ID", "its id or short id (dqnctl checkpoints); default: the newest"},
                                    {NULL, NULL, NULL}};
static const cli_opt_t o_load[] = {{"--path", "DAEMON_PATH", "a checkpoint file on the daemon's side"},
                                   {"--file", "LOCAL_FILE", "a local checkpoint file, uploaded in chunks"},
                                   {"--create", NULL, "create trainer NAME from it (else restore an existing one)"},
                                   {"--backend", "B", "cpu, cuda or auto"},
                                   {NULL, NULL, NULL}};
static const cli_opt_t o_demo[] = {{"--name", "NAME", "the trainer's name (default: demo, demo-2, ...: the first free one)"},
                                   {"--env", "ENV", "meanrev (default), deepsea or bitflip"},
                                   {"--iterations", "N", "meanrev: rounds of collection and training (default " MEANREV_STR(MEANREV_ITERATIONS) ")"},
                                   {"--size", "N", "deepsea: the grid's size (default 10)"},
                                   {"--episodes", "N", "deepsea, bitflip: episodes to play (default 1000, 500)"},
                                   {"--bits", "N", "bitflip: the number of bits (default 10)"},
                                   {"--obs-scale", "X", "deepsea: the one-hot observation's value (default N; 1 is bsuite's)"},
                                   {"--backend", "B", "cpu, cuda or auto"},
                                   {"--dt", NULL, "meanrev: then pre-train a Decision Transformer trainer (NAME-dt) on random and DQN episodes and act by return conditioning (exit 5 below 80% of optimal)"},
                                   {NULL, NULL, NULL}};

static const char h_submit[] =
    "Arrays are .npy files (NumPy's np.save), C order, little-endian, all with the same n:\n"
    "  --states, --next-states  [n, state_dim]   float32 or float64 (integers are converted)\n"
    "  --actions                [n] (or [n, 1])  integer: flat joint actions in [0, prod(branches)),\n"
    "                                            first branch most significant: for branches 9,3,3\n"
    "                                            a = 9*a0 + 3*a1 + a2\n"
    "                           [n, D]           integer: per-branch indices (a0, a1, ...), encoded as above\n"
    "  --rewards                [n]              float\n"
    "  --dones                  [n]              0 or 1 (bool, uint8, integer or float): 1 = terminal\n"
    "  --episode-ids            [n]              integer (optional; default 0)\n"
    "  --episode-ends           [n]              0 or 1 (optional): 1 where an episode ends without being\n"
    "                                            terminal (a time limit); an episode also ends where dones\n"
    "                                            is 1. HER and n-step returns read episodes from these:\n"
    "                                            send whole episodes, one environment's at a time\n"
    "The trainer's state_dim and branches are read from the daemon first; a file of the wrong\n"
    "dtype or shape is a data error (exit 4) naming the file and the shape it has.\n";
static const char h_act[] =
    "States are a .npy float array [n, state_dim]. Prints one flat joint action per line (or\n"
    "writes them to -o as int32 [n]). --q adds each branch's Q values; --q-out writes them as\n"
    "float32 [n, branches, max branch size], NaN where a branch has fewer actions.\n"
    "With ensemble heads (ensemble_k > 1) Q is the mean over heads, --q also prints the\n"
    "variance over heads (var:), and the actions follow the trainer's act_select: mean,\n"
    "ucb (mean + ucb_c x std) or thompson (the head of --episode, the same all episode long).\n";

static const cmd_t cmds[] = {
    {"health", cmd_health, 1, 0, 0, "", CLI_NO_FIELDS, o_none, NULL},
    {"info", cmd_info, 1, 0, 0, "", CLI_NO_FIELDS, o_none, NULL},
    {"list", cmd_list, 1, 0, 0, "", CLI_NO_FIELDS, o_none, NULL},
    {"fields", cmd_fields, 0, 0, 0, "", CLI_NO_FIELDS, o_none, NULL},
    {"create", cmd_create, 1, 1, 1, "NAME", CLI_ANY_FIELD, o_create,
     "Fields not given take their defaults (dqnctl fields). Names: 1-64 of [A-Za-z0-9_.-].\n"},
    {"destroy", cmd_destroy, 1, 1, 1, "NAME", CLI_NO_FIELDS, o_destroy,
     "The trainer's checkpoints move to STATE_DIR/.retired/ on the daemon (nothing is deleted).\n"},
    {"submit", cmd_submit, 1, 1, 1, "NAME", CLI_NO_FIELDS, o_submit, h_submit},
    {"step", cmd_step, 1, 2, 2, "NAME N", CLI_NO_FIELDS, o_none, NULL},
    {"pretrain", cmd_pretrain, 1, 2, 2, "NAME N", CLI_NO_FIELDS, o_none,
     "N Decision Transformer pre-training steps (a trainer created with dt_layers >= 1) on windows of\n"
     "the whole ended episodes its replay holds; every member of a population its own. Prints the\n"
     "loss, the gradient norm before the clip, the warm-up's lr and the tokens per second.\n"},
    {"act", cmd_act, 1, 1, 1, "NAME", CLI_NO_FIELDS, o_act, h_act},
    {"sync", cmd_sync, 1, 1, 1, "NAME", CLI_NO_FIELDS, o_sync, NULL},
    {"set", cmd_set, 1, 1, 1, "NAME", CLI_HPARAM_FIELD, o_none,
     "Only fields that may change between steps (dqnctl fields: 'any time'); all or nothing.\n"},
    {"stats", cmd_stats, 1, 1, 1, "NAME", CLI_NO_FIELDS, o_none, NULL},
    {"save", cmd_save, 1, 1, 1, "NAME", CLI_NO_FIELDS, o_save, NULL},
    {"checkpoints", cmd_checkpoints, 1, 1, 1, "NAME", CLI_NO_FIELDS, o_none, NULL},
    {"fetch", cmd_fetch, 1, 1, 1, "NAME", CLI_NO_FIELDS, o_fetch, NULL},
    {"load", cmd_load, 1, 1, 1, "NAME", CLI_NO_FIELDS, o_load, NULL},
    {"copy-member", cmd_copy_member, 1, 3, 3, "NAME DST SRC", CLI_FACTOR_FIELD, o_copy,
     "In a population (create --population N): member DST becomes a copy of member SRC (online and\n"
     "target parameters, prior heads, Adam moments, counters; its replay too with --with-replay),\n"
     "keeps its own seed, and takes SRC's hyperparameters, each named one multiplied by its factor\n"
     "(lr=0.8: 0.8 x SRC's lr). Nothing but the command goes over the wire.\n"},
    {"inspect", cmd_inspect, 0, 1, 1, "FILE", CLI_NO_FIELDS, o_none,
     "Checks every section's CRC32C; exit 4 when the file fails a check.\n"},
    {"demo", cmd_demo, 1, 0, 0, "", CLI_ANY_FIELD, o_demo,
     "Creates a new trainer (never replaces one: an existing --name is refused), trains a\n"
     "built-in environment through the daemon and prints the learning curve: meanrev (a\n"
     "9x3x3 trading toy, exit 5 below 90% of the optimal return), deepsea (bsuite's\n"
     "exploration test: the share of episodes that reach the reward) or bitflip (the HER\n"
     "paper's bit flipping, with hindsight relabelling: the share that reach the goal). The trainer stays on\n"
     "the daemon afterwards. Fields override the demo's learner config.\n"},
};

static const cmd_t *cur_cmd;
static cli_spec_t cur_spec;

/* the commands --member addresses (the others refuse it: nothing typed is ignored) */
static const char member_cmds[] = "submit, step, pretrain, act, sync, set, stats, fetch and load";
static int takes_member(const char *name) {
  static const char *const names[] = {"submit", "step", "pretrain", "act", "sync", "set", "stats", "fetch", "load"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strcmp(name, names[i])) return 1;
  return 0;
}

static void cmd_help(const cmd_t *c, FILE *f) {
  fprintf(f, "usage: dqnctl %s%s%s%s%s\n", c->name, c->pos_names[0] ? " " : "", c->pos_names,
          c->fields == CLI_ANY_FIELD      ? " [field=value ...]"
          : c->fields == CLI_HPARAM_FIELD ? " field=value ..."
          : c->fields == CLI_FACTOR_FIELD ? " [field=factor ...]"
                                          : "",
          c->opts[0].name ? " [options]" : "");
  if (c->opts[0].name) cli_print_opts(f, c->opts);
  if (c->help) fprintf(f, "\n%s", c->help);
}

/* The options that apply to every command; accepted before the command and
 * after it (`dqnctl stats t1 --json`). 1: argv[*i] was one (its value taken
 * too), 0: it is not one, -1: a usage error (printed). */
typedef struct globals {
  char url[600];
  long long timeout, member;
  int member_given; /* --member was given */
  int json;
  const char *token;
  dqnd_tls_opts_t tls;
} globals_t;

static int global_opt(int argc, char **argv, int *i, globals_t *g) {
  const char *o = argv[*i];
  if (!strcmp(o, "--json")) return g->json = 1, 1;
  if (strcmp(o, "--url") && strcmp(o, "--timeout") && strcmp(o, "--token") && strcmp(o, "--tls-ca") &&
      strcmp(o, "--tls-cert") && strcmp(o, "--tls-key") && strcmp(o, "--tls-server-name") && strcmp(o, "--member"))
    return 0;
  if (*i + 1 >= argc) return fprintf(stderr, "dqnctl: %s needs a value (dqnctl --help)\n", o), -1;
  const char *v = argv[++*i];
  if (!strcmp(o, "--url")) snprintf(g->url, sizeof g->url, "%s", v);
  else if (!strcmp(o, "--token")) g->token = v;
  else if (!strcmp(o, "--tls-ca")) g->tls.ca = v;
  else if (!strcmp(o, "--tls-cert")) g->tls.cert = v;
  else if (!strcmp(o, "--tls-key")) g->tls.key = v;
  else if (!strcmp(o, "--tls-server-name")) g->tls.server_name = v;
  else if (!strcmp(o, "--member")) {
    if (cli_int("dqnctl", "--member", v, 0, LEARNER_MAX_POPULATION - 1, &g->member)) return -1;
    g->member_given = 1;
  } else if (cli_int("dqnctl", "--timeout", v, 1, 86400000, &g->timeout)) return -1;
  return 1;
}

int main(int argc, char **argv) {
  globals_t g = {.timeout = 60000, .token = getenv("DQND_TOKEN"),
                 .tls = {.ca = getenv("DQND_TLS_CA"), .cert = getenv("DQND_TLS_CERT"), .key = getenv("DQND_TLS_KEY")}};
  dqnd_client_default_url(g.url, sizeof g.url);
  const char *env_url = getenv("DQND_URL");
  if (env_url && *env_url) snprintf(g.url, sizeof g.url, "%s", env_url);
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    const char *o = argv[i];
    if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
      fputs(usage_text, stdout);
      return EXIT_OK;
    } else if (!strcmp(o, "--version")) {
      printf("dqnctl %s (protocol 1)\n", DQND_VERSION);
      return EXIT_OK;
    }
    int k = global_opt(argc, argv, &i, &g);
    if (k < 0) return EXIT_USAGE;
    if (k == 0) {
      fprintf(stderr, "dqnctl: unknown option '%s' (dqnctl --help)\n", o);
      return EXIT_USAGE;
    }
  }
  if (i >= argc) {
    fputs(usage_text, stderr);
    return EXIT_USAGE;
  }
  int help = 0;
  if (!strcmp(argv[i], "help")) { /* dqnctl help [COMMAND] */
    if (i + 1 >= argc) return fputs(usage_text, stdout), EXIT_OK;
    help = 1;
    i++;
  }
  for (size_t k = 0; k < sizeof cmds / sizeof cmds[0]; k++)
    if (!strcmp(cmds[k].name, argv[i])) cur_cmd = &cmds[k];
  if (!cur_cmd) {
    suggest_t sg;
    suggest_init(&sg, argv[i]);
    for (size_t k = 0; k < sizeof cmds / sizeof cmds[0]; k++) suggest_try(&sg, cmds[k].name);
    if (sg.best) fprintf(stderr, "dqnctl: unknown command '%s' (did you mean %s?)\n", argv[i], sg.best);
    else fprintf(stderr, "dqnctl: unknown command '%s' (dqnctl --help lists them)\n", argv[i]);
    return EXIT_USAGE;
  }
  for (int k = i + 1; k < argc && strcmp(argv[k], "--"); k++) help |= !strcmp(argv[k], "--help") || !strcmp(argv[k], "-h");
  if (help) {
    cmd_help(cur_cmd, stdout);
    return EXIT_OK;
  }
  char cmdname[64];
  snprintf(cmdname, sizeof cmdname, "dqnctl %s", cur_cmd->name);
  cur_spec = (cli_spec_t){cmdname, cur_cmd->min_pos, cur_cmd->max_pos, cur_cmd->pos_names, cur_cmd->fields, cur_cmd->opts};
  /* the global options after the command, taken out of its arguments (up to
   * a "--", after which everything is the command's) */
  char **rest = malloc(sizeof(char *) * (size_t)(argc + 1));
  if (!rest) return fprintf(stderr, "dqnctl: out of memory\n"), EXIT_LOCAL;
  int nrest = 0, dashes = 0;
  for (int k = i + 1; k < argc; k++) {
    if (!dashes && !strcmp(argv[k], "--")) dashes = 1;
    int gk = dashes ? 0 : global_opt(argc, argv, &k, &g);
    if (gk < 0) return free(rest), EXIT_USAGE;
    if (!gk) rest[nrest++] = argv[k];
  }
  rest[nrest] = NULL;
  cli_args_t args;
  int prc = cli_parse(&cur_spec, nrest, rest, &args);
  if (prc) return free(rest), EXIT_USAGE;
  if (g.member_given && !takes_member(cur_cmd->name)) {
    fprintf(stderr, "dqnctl: --member: %s does not take a member (%s do)\n", cur_cmd->name, member_cmds);
    return free(rest), EXIT_USAGE;
  }
  ctx_t x = {NULL, g.json, g.url, (int)g.timeout, g.token, g.tls, &cur_spec};
  if (cur_cmd->fn == cmd_step || cur_cmd->fn == cmd_pretrain) start_watch(&x); /* before nng's threads: they inherit the mask */
  if (cur_cmd->needs_daemon) {
    char err[700];
    int rc = dqnd_connect_tls(g.url, (int)g.timeout, &g.tls, &x.c, err, sizeof err);
    if (rc) {
      fprintf(stderr, "dqnctl: %s\n", err);
      free(rest);
      return rc == DQND_EINVAL ? EXIT_USAGE : EXIT_TRANSPORT; /* EINVAL: the URL or a TLS option */
    }
    if (g.token) dqnd_set_token(x.c, g.token);
    if (g.member_given) dqnd_use_member(x.c, (uint32_t)g.member); /* fetch and load: that member's state alone */
    if (g.member_given && (cur_cmd->fn == cmd_step || cur_cmd->fn == cmd_pretrain)) {
      /* a member the trainer lacks is refused before the steps run, not after */
      learner_stats_t st;
      int mrc = dqnd_get_stats(x.c, args.pos[0], &st);
      if (mrc) {
        mrc = fail_rc(&x, mrc);
        dqnd_close(x.c);
        return free(rest), mrc;
      }
    }
  }
  int rc = cur_cmd->fn(&x, &args);
  if (rc == EXIT_OK && json_output_failed()) rc = EXIT_LOCAL; /* said on stderr */
  stop_watch(); /* (a command refused before its Step) */
  dqnd_close(x.c);
  free(rest); /* args point into it */
  return rc;
}
