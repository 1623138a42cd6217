/*
 * dqnenv.c — the built-in environments as a small shared library for the
 * Python package (dqnd/envs.py loads it with ctypes): the C code that
 * `dqnctl demo` and the learning test run, not a second implementation.
 * Plain C types only; the environment's state is an opaque buffer of
 * dqnenv_meanrev_size() bytes that Python owns.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "bitflip_env.h"
#include "deepsea_env.h"
#include "meanrev_env.h"

#define API __attribute__((visibility("default")))

API size_t dqnenv_meanrev_size(void);
API void dqnenv_meanrev_spec(int *state_dim, int *actions, int *horizon, int32_t *branches);
API void dqnenv_meanrev_reset(void *e, uint64_t seed, uint64_t episode, float *obs);
API int dqnenv_meanrev_step(void *e, int32_t action, float *reward, float *obs);
API int32_t dqnenv_meanrev_optimal_action(const void *e);
API float dqnenv_meanrev_reward(const void *e, int32_t action);
API size_t dqnenv_meanrev_config(char *buf, size_t n);
API size_t dqnenv_deepsea_size(void);
API size_t dqnenv_deepsea_config(int n, char *buf, size_t len);
API int dqnenv_deepsea_init(void *e, int n, uint64_t seed);
API void dqnenv_deepsea_reset(void *e, float *obs);
API int dqnenv_deepsea_step(void *e, int32_t action, float *reward, float *obs);
API int32_t dqnenv_deepsea_right_action(const void *e);
API float dqnenv_deepsea_optimal_return(int n);
API size_t dqnenv_bitflip_size(void);
API size_t dqnenv_bitflip_config(int n, char *buf, size_t len);
API int dqnenv_bitflip_init(void *e, int n, uint64_t seed);
API void dqnenv_bitflip_reset(void *e, uint64_t episode, float *obs);
API int dqnenv_bitflip_step(void *e, int32_t action, float *reward, float *obs);

API size_t dqnenv_meanrev_size(void) { return sizeof(meanrev_env_t); }

/* state_dim, flat actions, steps per episode, and the branch sizes (3 of them) */
API void dqnenv_meanrev_spec(int *state_dim, int *actions, int *horizon, int32_t *branches) {
  *state_dim = MEANREV_STATE_DIM;
  *actions = MEANREV_ACTIONS;
  *horizon = MEANREV_T;
  branches[0] = 9, branches[1] = 3, branches[2] = 3;
}

API void dqnenv_meanrev_reset(void *e, uint64_t seed, uint64_t episode, float *obs) {
  meanrev_reset(e, seed, episode);
  meanrev_observe(e, obs);
}

/* -1 (and nothing changes) for an action outside [0, 81) */
API int dqnenv_meanrev_step(void *e, int32_t action, float *reward, float *obs) {
  if (action < 0 || action >= MEANREV_ACTIONS) return -1;
  int done = 0;
  *reward = meanrev_step(e, action, &done);
  meanrev_observe(e, obs);
  return done;
}

API int32_t dqnenv_meanrev_optimal_action(const void *e) { return meanrev_optimal_action(e); }
API float dqnenv_meanrev_reward(const void *e, int32_t action) { return meanrev_reward(e, action); }

/* the learner config the demo trains with, as canonical "name=value\n" text */
API size_t dqnenv_meanrev_config(char *buf, size_t n) {
  learner_config_t c;
  meanrev_learner_config(&c);
  return learner_config_to_text(&c, buf, n);
}

/* deep sea (client/deepsea_env.h) */
API size_t dqnenv_deepsea_size(void) { return sizeof(deepsea_env_t); }
API int dqnenv_deepsea_init(void *e, int n, uint64_t seed) { return deepsea_init(e, n, seed); }
API void dqnenv_deepsea_reset(void *e, float *obs) {
  deepsea_reset(e);
  deepsea_observe(e, obs);
}
/* -1 (and nothing changes) for an action other than 0 or 1 */
API int dqnenv_deepsea_step(void *e, int32_t action, float *reward, float *obs) {
  if (action < 0 || action > 1) return -1;
  int done = 0;
  *reward = deepsea_step(e, action, &done);
  deepsea_observe(e, obs);
  return done;
}
API int32_t dqnenv_deepsea_right_action(const void *e) { return deepsea_right_action(e); }

/* the learner config deep sea of size n trains with (deepsea_learner_config:
 * the ensemble the learning test holds to its bar), as canonical text: the
 * Python environment takes it from here, so the two cannot drift */
API size_t dqnenv_deepsea_config(int n, char *buf, size_t len) {
  learner_config_t c;
  deepsea_learner_config(&c, n);
  return learner_config_to_text(&c, buf, len);
}
API float dqnenv_deepsea_optimal_return(int n) { return deepsea_optimal_return(n); }

/* bit flipping (client/bitflip_env.h), HER's goal-conditioned test */
API size_t dqnenv_bitflip_size(void) { return sizeof(bitflip_env_t); }
API int dqnenv_bitflip_init(void *e, int n, uint64_t seed) { return bitflip_init(e, n, seed); }
API void dqnenv_bitflip_reset(void *e, uint64_t episode, float *obs) {
  bitflip_reset(e, episode);
  bitflip_observe(e, obs);
}
/* -1 (and nothing changes) for an action outside [0, n); else 1 on success
 * (terminal), 2 when truncated (n steps without it), 0 otherwise */
API int dqnenv_bitflip_step(void *e, int32_t action, float *reward, float *obs) {
  if (action < 0 || action >= ((bitflip_env_t *)e)->n) return -1;
  int done = 0, trunc = 0;
  *reward = bitflip_step(e, action, &done, &trunc);
  bitflip_observe(e, obs);
  return done ? 1 : trunc ? 2 : 0;
}
/* the learner config bit flipping with n bits trains with (bitflip_learner_config:
 * HER on the whole state), as canonical text */
API size_t dqnenv_bitflip_config(int n, char *buf, size_t len) {
  learner_config_t c;
  bitflip_learner_config(&c, n);
  return learner_config_to_text(&c, buf, len);
}
