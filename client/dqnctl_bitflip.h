/* dqnctl_bitflip.h — `dqnctl demo --env bitflip`: bit flipping with HER (dqnctl_bitflip.c). */
#ifndef DQND_DQNCTL_BITFLIP_H
#define DQND_DQNCTL_BITFLIP_H

#include "dqnctl_common.h"

int demo_bitflip(ctx_t *x, const cli_args_t *a);

#endif
