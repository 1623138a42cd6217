/* dqnctl_demo.h — `dqnctl demo` over the table of built-in environments (dqnctl_demo.c). */
#ifndef DQND_DQNCTL_DEMO_H
#define DQND_DQNCTL_DEMO_H

#include "dqnctl_common.h"

int cmd_demo(ctx_t *x, const cli_args_t *a);

#endif
