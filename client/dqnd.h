/*
 * dqnd.h — libdqnd, the C client of the dqnd daemon.
 *
 * One dqnd_client_t is one nng REQ socket: use it from one thread at a time
 * (open one per thread for concurrency). Every call blocks until the reply
 * or the client's timeout; a Step or PretrainDT that times out then cancels
 * itself (at most 2 s) and waits for its late reply (at most 2 s more), and
 * dqnd_close waits up to 2 s for such a reply still awaited. Errors are
 * values:
 *   0                 OK
 *   1..16             the daemon's status code (gRPC numbering, see
 *                     proto/dqnd/v1/dqnd.proto); dqnd_last_error() has the
 *                     daemon's message, which names the offending field
 *   DQND_E* (< 0)     local or transport failures
 * Nothing here exits or prints; there are no globals.
 */
#ifndef DQND_CLIENT_H
#define DQND_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dqnd.pb-c.h"
#include "dqnd/default_url.h"
#include "dqnd/tls.h"
#include "learner_types.h"

enum dqnd_status {
  DQND_OK = 0,
  DQND_ETRANSPORT = -1, /* cannot connect, send or receive */
  DQND_ETIMEDOUT = -2,  /* no reply within the timeout */
  DQND_EPROTO = -3,     /* the reply is not a dqnd.v1.Reply or does not match */
  DQND_ENOMEM = -4,
  DQND_EINVAL = -5,     /* bad argument to a libdqnd function */
  DQND_EIO = -6,        /* local file error */
};

typedef struct dqnd_client dqnd_client_t;

/* "OK", "INVALID_ARGUMENT", ..., "ETIMEDOUT" */
const char *dqnd_strerror(int code);
/* The URL a client tries when given none: dqnd_default_url (the daemon's
 * embedded default for this user, dqnd/default_url.h), unless that socket
 * does not exist and a system service's does (/run/dqnd/dqnd.sock, else the
 * first instance's /run/dqnd/0/dqnd.sock). */
void dqnd_client_default_url(char *buf, size_t n);

int dqnd_connect(const char *url, int timeout_ms, dqnd_client_t **out, char *err, size_t errlen);
/* dqnd_connect with TLS settings for a tls+tcp:// URL (tls.h: ca is
 * required; cert and key when the daemon verifies clients; server_name
 * defaults to the URL's host). Other URLs ignore tls. A TLS handshake that
 * fails is DQND_ETRANSPORT with a message saying what to check. */
int dqnd_connect_tls(const char *url, int timeout_ms, const dqnd_tls_opts_t *tls, dqnd_client_t **out, char *err,
                     size_t errlen);
void dqnd_close(dqnd_client_t *c);
void dqnd_set_token(dqnd_client_t *c, const char *token);
void dqnd_set_timeout(dqnd_client_t *c, int timeout_ms);
/* The message of the last failed call (server's or local). */
const char *dqnd_last_error(const dqnd_client_t *c);

/* Raw call: fills version, request_id and token, sends, waits. On 0 or a
 * server code, *rep is the reply (free with dqnd_reply_free). Every call
 * checks the reply's daemon instance: the first reply from a restarted
 * daemon (the connection redialled the same URL) is UNAVAILABLE (14) "the
 * daemon restarted", once: the request ran on trainers restored from their
 * last checkpoints, and the work after those is gone. */
int dqnd_call(dqnd_client_t *c, Dqnd__V1__Request *req, Dqnd__V1__Reply **rep);
void dqnd_reply_free(Dqnd__V1__Reply *rep);
/* Sends raw bytes as a request (tests: garbage, wrong encodings). */
int dqnd_call_raw(dqnd_client_t *c, const void *buf, size_t n, Dqnd__V1__Reply **rep);

typedef struct dqnd_checkpoint {
  char id[96];       /* the file name */
  char path[1200];   /* on the daemon's side (fetch: the local file) */
  uint64_t bytes, step;
  uint64_t seq;      /* the short id: accepted wherever an id is */
  int64_t mtime;     /* seconds since the epoch (0 when unknown) */
  uint32_t crc32;
  int pinned;        /* the trainer's pinned checkpoint (dqnd_save_checkpoint_pinned) */
} dqnd_checkpoint_t;

/* What a client needs to know of a trainer's shapes (from GetStats). */
typedef struct dqnd_trainer_info {
  char backend[16];
  char state[300];   /* "ready" or "error: ..." */
  int state_dim;
  int n_branches;
  int branches[LEARNER_MAX_BRANCHES];
  int noisy;         /* created with NoisyNet layers */
  int population;    /* members (1: a trainer of one) */
  int member;        /* whose stats these are */
  learner_stats_t stats;
} dqnd_trainer_info_t;

int dqnd_health(dqnd_client_t *c, int *serving, double *uptime_s);
/* fields: "name=value" strings (learner config fields); backend NULL = daemon default.
 * *created (optional): 1 new, 0 it existed with the same config. */
int dqnd_create_trainer(dqnd_client_t *c, const char *name, const char *const *fields, int n_fields,
                        const char *backend, int *created);
/* Populations (docs/population.md): dqnd_create_trainer with `population`
 * members (1: a trainer of one), member i seeded the config's seed + i. */
int dqnd_create_population(dqnd_client_t *c, const char *name, const char *const *fields, int n_fields,
                           const char *backend, int population, int *created);
/* The member the calls about one member address from now on (dqnd_submit,
 * dqnd_act*, dqnd_sync_target, dqnd_set_hparams, dqnd_trainer_info,
 * dqnd_get_stats); 0 by default, as for a trainer of one. Once called,
 * dqnd_fetch_checkpoint and dqnd_load_checkpoint_* move that member's state
 * alone (a lone trainer's checkpoint; a loaded member keeps its seed). */
void dqnd_use_member(dqnd_client_t *c, uint32_t member);
/* Exploit and explore: member dst becomes a copy of member src (network,
 * Adam moments, counters; its replay too with with_replay), keeps its seed,
 * and takes src's hyperparameters, each named in factors ("lr=0.8" strings)
 * multiplied by that factor. */
int dqnd_copy_member(dqnd_client_t *c, const char *name, uint32_t dst, uint32_t src, int with_replay,
                     const char *const *factors, int n_factors);
/* save_final: write a checkpoint first; *saved (optional) receives where it went. */
int dqnd_destroy_trainer(dqnd_client_t *c, const char *name, int save_final, dqnd_checkpoint_t *saved);
int dqnd_trainer_info(dqnd_client_t *c, const char *name, dqnd_trainer_info_t *out);
/* The trainer's checkpoints on the daemon, oldest first; free(*out). */
int dqnd_list_checkpoints(dqnd_client_t *c, const char *name, dqnd_checkpoint_t **out, int *n);
int dqnd_submit(dqnd_client_t *c, const char *name, int state_dim, const learner_transitions_t *t,
                int64_t *replay_size);
/* Runs n steps. The request carries a deadline a little inside the client's
 * timeout (Request.timeout_ms): a Step still running then stops between
 * whole steps and answers OK with st->steps_run < n, dqnd_last_stop() saying
 * why ("deadline", "cancelled", "shutdown"; "" when every step ran). When no
 * reply comes (ETIMEDOUT, ETRANSPORT) the Step is cancelled on the daemon
 * before the call returns, and dqnd_last_error() says so, quoting the Step's
 * late reply when it came within 2 s of the Cancel (its steps, or CANCELLED
 * when it never ran). st (optional) receives the stats of the member
 * dqnd_use_member names (EINVAL, after the Step ran, when the trainer has no
 * such member: check it first with dqnd_get_stats). */
int dqnd_step(dqnd_client_t *c, const char *name, int n, learner_stats_t *st);
const char *dqnd_last_stop(const dqnd_client_t *c);
/* The Decision Transformer (dt_layers > 0; docs/learner.md §16): n
 * pre-training steps of every member, stopping and cancelled as dqnd_step
 * (and stopping at a later step of a trainer of one that draws no window:
 * dqnd_last_stop() "no window");
 * st (optional) receives the stats of the member dqnd_use_member names,
 * tokens_per_s (optional) the call's rate over every member. */
int dqnd_pretrain_dt(dqnd_client_t *c, const char *name, int n, learner_dt_stats_t *st, double *tokens_per_s);
/* The action return conditioning picks for the window's last step (1..
 * dt_context steps; the return-to-go in reward units). */
int dqnd_act_dt(dqnd_client_t *c, const char *name, int state_dim, const learner_dt_window_t *w, int32_t *action);
/* Stops trainer `name`'s Step of request_id (running or queued; 0: whatever
 * long command runs now). found (optional): "running", "queued" or "none". */
int dqnd_cancel(dqnd_client_t *c, const char *name, uint64_t request_id, char *found, size_t n);
/* The request_id of the request this client has in flight, or sent last. Safe
 * to read from another thread (a Ctrl-C handler cancelling the Step on a
 * connection of its own). */
uint64_t dqnd_pending_request_id(const dqnd_client_t *c);
/* 1 while the reply of a Step or PretrainDT that timed out may still come
 * (the Cancel did not get through, or the daemon had not answered within 2 s
 * of it): the next long command gives it up, dqnd_close waits up to 2 s for
 * it first (libnng 1.5 can hang closing a pipe that is receiving). */
int dqnd_reply_in_flight(const dqnd_client_t *c);
/* q (optional) receives n rows of sum(branches) floats; q_cap is its length
 * (rows of q_cap / n floats: a reply's narrower rows are NaN-padded each). */
int dqnd_act(dqnd_client_t *c, const char *name, const float *states, int n, int state_dim, int noisy,
             int32_t *actions, float *q, size_t q_cap);
/* dqnd_act naming the episode (act_select=thompson acts with that episode's
 * head); q_var (optional, needs q) receives the variance over ensemble heads
 * in q's layout, q_cap floats too. */
int dqnd_act_episode(dqnd_client_t *c, const char *name, const float *states, int n, int state_dim, int noisy,
                     uint64_t episode, int32_t *actions, float *q, float *q_var, size_t q_cap);
int dqnd_sync_target(dqnd_client_t *c, const char *name, float tau);
int dqnd_set_hparams(dqnd_client_t *c, const char *name, const char *const *fields, int n_fields);
int dqnd_get_stats(dqnd_client_t *c, const char *name, learner_stats_t *st);
int dqnd_save_checkpoint(dqnd_client_t *c, const char *name, int with_replay, dqnd_checkpoint_t *out);
/* dqnd_save_checkpoint, pinned: the trainer's resume point, kept besides the
 * daemon's newest keep-checkpoints until the trainer's next pinned one (its
 * periodic and final saves do not prune it). */
int dqnd_save_checkpoint_pinned(dqnd_client_t *c, const char *name, int with_replay, dqnd_checkpoint_t *out);
/* Downloads a checkpoint ("" or NULL = newest; else its id or short id) in
 * chunks of chunk_bytes (0 = 4 MiB) into a temporary file beside local_path,
 * verifies its CRC-32, fsyncs it and renames it over local_path only then:
 * a failed fetch leaves whatever was at local_path untouched. */
int dqnd_fetch_checkpoint(dqnd_client_t *c, const char *name, const char *id, const char *local_path,
                          uint32_t chunk_bytes, dqnd_checkpoint_t *out);
/* Restores from a file on the daemon's side. create: a new trainer `name`. */
int dqnd_load_checkpoint_path(dqnd_client_t *c, const char *name, const char *daemon_path, int create,
                              const char *backend);
/* Uploads a local checkpoint file in chunks of chunk_bytes and restores from
 * it; chunk_bytes 0: 4 MiB, or less where the daemon's max_message_bytes
 * (ServerInfo, asked first) needs it. */
int dqnd_load_checkpoint_file(dqnd_client_t *c, const char *name, const char *local_path, int create,
                              const char *backend, uint32_t chunk_bytes);

#endif
