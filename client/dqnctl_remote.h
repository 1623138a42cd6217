/* dqnctl_remote.h — the demos' shared pieces over a daemon (dqnctl_remote.c). */
#ifndef DQND_DQNCTL_REMOTE_H
#define DQND_DQNCTL_REMOTE_H

#include "demo_driver.h"
#include "dqnctl_common.h"

/* The demo loops' driver (demo_driver.h) over a trainer on the daemon. */
typedef struct remote {
  ctx_t *x;
  const char *name;
  int state_dim;
  int noisy; /* the trainer has NoisyNet layers: collect with fresh noise */
  int rc;    /* the last call's DQND code */
} remote_t;
void remote_driver(demo_driver_t *d, remote_t *r);

/* The demos' config: the user's field=value words applied to c, then
 * validated (EXIT_USAGE naming the field); and a new trainer with all of c
 * (every field, so the daemon's defaults do not matter), named into name:
 * --name, else demo, demo-2, ... (never one that exists). 0 or the exit status. */
int demo_apply_fields(const char *cmd, const cli_args_t *a, learner_config_t *c);
int demo_create(ctx_t *x, const char *cmd, const cli_args_t *a, const learner_config_t *c, char *name, size_t n);
/* demo_create with the name (NULL: demo, demo-2, ...) and backend (NULL: the daemon's) given */
int demo_create_as(ctx_t *x, const char *cmd, const char *given, const char *backend, const learner_config_t *c,
                   char *name, size_t n);
int demo_new_trainer(ctx_t *x, const char *cmd, const char *given, const char *const *fields, int nf,
                     const char *backend, char *name, size_t n);

#endif
