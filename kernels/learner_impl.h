/* learner_impl.h — the learner handle that learner.c (the API) and state.c
 * (the state format) share; nothing outside kernels/ sees it. */
#ifndef DQN_LEARNER_IMPL_H
#define DQN_LEARNER_IMPL_H

#include "backend.h"
#include "learner.h"

struct learner {
  const learner_backend_ops_t *ops;
  void *impl;
  learner_config_t cfg; /* .hp kept current by learner_set_hparams */
  learner_backend_t backend;
  volatile int stop; /* learner_stop_flag */
};

#endif
