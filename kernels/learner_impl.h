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
  int64_t n_dt;      /* the Decision Transformer's parameter count (0: none; learner_config_num_dt) */
  int loaded_replay; /* made by learner_load from a state saved with its replay (an empty one too) */
};

/* Learners that step in the same launches: a population's members on a
 * backend with group ops (backend.h; population.c) */
typedef struct learner_group {
  const learner_backend_ops_t *ops;
  void *impl;
  learner_backend_t backend; /* resolved */
  int n;
} learner_group_t;

/* The group for n members shaped as c, or *out NULL (LEARNER_OK) when the
 * backend has none or these shapes cannot share launches: the members then
 * step alone. */
int learner_group_create(const learner_config_t *c, int n, learner_backend_t backend, learner_group_t **out,
                         char *err, size_t errlen);
/* after its members */
void learner_group_destroy(learner_group_t *g);
/* learner_create as member i of g (g NULL: learner_create); the group holds
 * its device memory already */
int learner_create_in(const learner_config_t *c, learner_backend_t backend, learner_group_t *g, int i,
                      struct learner **out, char *err, size_t errlen);
/* learner_load as member i of a population of n; member 0 creates the group
 * (*g, when g is not NULL) from the config it reads */
int learner_load_in(learner_read_fn r, void *ctx, learner_backend_t backend, int n, learner_group_t **g, int i,
                    struct learner **out, char *err, size_t errlen);

/* A registered section of this learner, by the registry (state_format.h)
 * and the backend's buffers: its length in bytes (0: absent), and bytes
 * [off, off + n) of it read into or written from host memory. */
int64_t learner_section_bytes(const struct learner *l, uint32_t tag);
int learner_section_read(const struct learner *l, uint32_t tag, int64_t off, int64_t n, void *dst);
int learner_section_write(struct learner *l, uint32_t tag, int64_t off, int64_t n, const void *src);

/* learner_pretrain_dt with the caller's stop control (a population's flag);
 * n 0 runs nothing and only checks that a window can be drawn
 * (LEARNER_EEMPTY when not) */
struct learner_dt_stats;
int learner_pretrain_dt_ctl(struct learner *l, int n, learner_stop_ctl_t *ctl, struct learner_dt_stats *st, char *err,
                            size_t errlen);
/* what follows the backend's dt_step (rc its code, st its statistics): the
 * hand-over to the DQN's trunk (dt_handover); rc, or the hand-over's error */
int learner_dt_after(struct learner *l, int rc, struct learner_dt_stats *st, char *err, size_t errlen);

#endif
