/* dqnctl_meanrev.h — `dqnctl demo --env meanrev`: the meanrev trading environment (the default) (dqnctl_meanrev.c). */
#ifndef DQND_DQNCTL_MEANREV_H
#define DQND_DQNCTL_MEANREV_H

#include "dqnctl_common.h"

int demo_meanrev(ctx_t *x, const cli_args_t *a);

#endif
