/* learner_impl.h — the learner handle that learner.c (the API) and state.c
 * (the state format) share; nothing outside kernels/ sees it. */
#ifndef DQN_LEARNER_IMPL_H
#define DQN_LEARNER_IMPL_H

#include "backend.h"
#include "learner_types.h"
#include "stop.h"

struct learner {
  const learner_backend_ops_t *ops;
  void *impl;
  learner_config_t cfg; /* .hp kept current by learner_set_hparams */
  learner_backend_t backend;
  volatile int stop; /* learner_stop_flag */
};

/* A registered section of this learner, by the registry (state_format.h)
 * and the backend's buffers: its length in bytes (0: absent), and bytes
 * [off, off + n) of it read into or written from host memory. */
int64_t learner_section_bytes(const struct learner *l, uint32_t tag);
int learner_section_read(const struct learner *l, uint32_t tag, int64_t off, int64_t n, void *dst);
int learner_section_write(struct learner *l, uint32_t tag, int64_t off, int64_t n, const void *src);

#endif
