/* dqnctl_deepsea.h — `dqnctl demo --env deepsea`: bsuite's deep sea (dqnctl_deepsea.c). */
#ifndef DQND_DQNCTL_DEEPSEA_H
#define DQND_DQNCTL_DEEPSEA_H

#include "dqnctl_common.h"

int demo_deepsea(ctx_t *x, const cli_args_t *a);

#endif
