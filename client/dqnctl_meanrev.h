/* dqnctl_meanrev.h — `dqnctl demo --env meanrev`: the meanrev trading environment (the default) (dqnctl_meanrev.c). */
#ifndef DQND_DQNCTL_MEANREV_H
#define DQND_DQNCTL_MEANREV_H

#include "demo_driver.h"
#include "dqnctl_common.h"

int demo_meanrev(ctx_t *x, const cli_args_t *a);
/* --dt: after the DQN (dqn, trainer dqn_name) trained, a Decision Transformer trainer pre-trained on a mixed
 * dataset and evaluated by return conditioning */
int demo_meanrev_dt(ctx_t *x, const cli_args_t *a, const demo_driver_t *dqn, const char *dqn_name);

#endif
