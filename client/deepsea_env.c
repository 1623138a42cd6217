/* deepsea_env.c — see deepsea_env.h. */
#include "deepsea_env.h"

#include <string.h>

#include "philox.h"

#define STREAM_DEEPSEA_MAP 40 /* Philox stream of the per-cell action map */

int deepsea_init(deepsea_env_t *e, int n, uint64_t seed) {
  if (n < 2 || n > DEEPSEA_MAX_N) return -1;
  memset(e, 0, sizeof *e);
  e->n = n;
  e->seed = seed;
  return 0;
}

void deepsea_reset(deepsea_env_t *e) { e->row = e->col = e->t = 0; }

void deepsea_observe(const deepsea_env_t *e, float *obs) {
  memset(obs, 0, sizeof(float) * (size_t)(e->n * e->n));
  if (e->row < e->n) obs[e->row * e->n + e->col] = 1.0f;
}

int32_t deepsea_right_action(const deepsea_env_t *e) {
  philox4_t d = philox_draw(e->seed, STREAM_DEEPSEA_MAP, (uint64_t)(e->row * e->n + e->col), 0);
  return (int32_t)(d.v[0] & 1u);
}

float deepsea_step(deepsea_env_t *e, int32_t action, int *done) {
  float r = 0;
  if (action == deepsea_right_action(e)) {
    r -= 0.01f / (float)e->n;
    if (e->col < e->n - 1) e->col++;
  } else if (e->col > 0) {
    e->col--;
  }
  e->row++;
  e->t++;
  *done = e->t >= e->n;
  if (*done && e->col == e->n - 1) r += 1.0f;
  return r;
}

float deepsea_optimal_return(int n) { return 1.0f - 0.01f * (float)(n - 1) / (float)n; }
