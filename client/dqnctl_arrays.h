/* dqnctl_arrays.h — dqnctl's commands over .npy arrays and files (dqnctl_arrays.c). */
#ifndef DQND_DQNCTL_ARRAYS_H
#define DQND_DQNCTL_ARRAYS_H

#include "dqnctl_common.h"

int cmd_submit(ctx_t *x, const cli_args_t *a);
int cmd_act(ctx_t *x, const cli_args_t *a);
int cmd_inspect(ctx_t *x, const cli_args_t *a);

#endif
