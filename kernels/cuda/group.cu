/*
 * group.cu — a population's members in the same launches (docs/population.md,
 * "One launch for every member"): the arena their buffers come from, and the
 * group's life. Each member is an ordinary CUDA learner (learner_cuda.cu)
 * created into its slice of one allocation, so its buffers lie at member 0's
 * plus i x stride (arena.cuh) and every kernel of the step, launched with
 * grid z = members (pz.cuh), runs them all; step.cu captures and replays the
 * group's step (cuda_group_step). Alone, each member still steps, acts and
 * loads by itself.
 */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.cuh"
#include "cuda_check.h"
#include "dt_train_cuda.cuh"
#include "learner_cuda.cuh"
#include "model.h"

/* ---- the arena */

typedef struct arena {
  char *base;
  size_t cap, used;
  int measure; /* 1: cudaMalloc each buffer and count the slice it would take */
} arena_t;

#define ARENA_ALIGN 256 /* cudaMalloc's alignment: TMA maps and vector loads keep theirs */

static thread_local arena_t *t_arena; /* the arena this thread fills (a member's creation), or NULL */

/* the arenas' ranges, so that dev_free leaves their buffers alone */
typedef struct arena_range {
  const char *lo, *hi;
  struct arena_range *next;
} arena_range_t;
static pthread_mutex_t ranges_mu = PTHREAD_MUTEX_INITIALIZER;
static arena_range_t *ranges;

static int arena_owns(const void *p) {
  const char *c = (const char *)p;
  int own = 0;
  pthread_mutex_lock(&ranges_mu);
  for (arena_range_t *r = ranges; r && !own; r = r->next) own = c >= r->lo && c < r->hi;
  pthread_mutex_unlock(&ranges_mu);
  return own;
}

cudaError_t dev_alloc(void **p, size_t bytes) {
  arena_t *a = t_arena;
  if (!a) return cudaMalloc(p, bytes);
  const size_t slice = (bytes + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
  if (a->measure) {
    cudaError_t e = cudaMalloc(p, bytes);
    if (e == cudaSuccess) a->used += slice;
    return e;
  }
  if (a->used + slice > a->cap) return cudaErrorMemoryAllocation; /* a member unlike member 0 */
  *p = a->base + a->used;
  a->used += slice;
  return cudaSuccess;
}

void dev_free(void *p) {
  if (p && !arena_owns(p)) cudaFree(p);
}

/* ---- the group */

/* every field but the seed and the hyperparameters */
static int same_shape(const learner_config_t *a, const learner_config_t *b) {
  learner_config_t t = *b;
  t.seed = a->seed;
  return learner_config_same_shape(a, &t);
}

static void group_free(cuda_group_t *g) {
  if (!g) return;
  if (g->exec) cudaGraphExecDestroy(g->exec);
  if (g->graph) cudaGraphDestroy(g->graph);
  if (g->dt_exec) cudaGraphExecDestroy(g->dt_exec);
  if (g->dt_graph) cudaGraphDestroy(g->dt_graph);
  if (g->base) {
    pthread_mutex_lock(&ranges_mu);
    for (arena_range_t **r = &ranges; *r; r = &(*r)->next)
      if ((*r)->lo == g->base) {
        arena_range_t *dead = *r;
        *r = dead->next;
        free(dead);
        break;
      }
    pthread_mutex_unlock(&ranges_mu);
    cudaFree(g->base);
  }
  if (g->resets) cudaFreeHost(g->resets);
  if (g->halts) cudaFreeHost(g->halts);
  free(g->m);
  free(g);
}

extern "C" int cuda_group_create(const learner_config_t *c, int n, void **group, char *err, size_t errlen) {
  *group = NULL;
  /* the slice: one member created with every buffer counted, then freed */
  arena_t probe = {NULL, 0, 0, 1};
  void *impl = NULL;
  t_arena = &probe;
  int rc = cuda_learner_create(c, &impl, err, errlen);
  t_arena = NULL;
  if (rc) return rc;
  const int fused = ((cuda_learner_t *)impl)->ws.fused.ok;
  cuda_learner_destroy(impl);
  if (!fused) { /* the generic kernels have no member axis: the members step alone */
    snprintf(err, errlen, "population: these shapes run the generic kernels; each member steps alone");
    return LEARNER_EUNSUPPORTED;
  }
  cuda_group_t *g = (cuda_group_t *)calloc(1, sizeof *g);
  if (!g) return snprintf(err, errlen, "out of memory"), LEARNER_ENOMEM;
  g->cfg = *c;
  g->n = n;
  /* the DT's launches put the members along grid z beside the splits (at
   * most 264 a GEMM) and, for windows too large for shared memory, the
   * batch: within CUDA's 65,535 */
  if (c->dt_layers) {
    int win = 0;
    static thread_local model_t reg;
    dt_layout_t L;
    char why[256];
    g->dt_shared = !dt_layout_from_config(c, &reg, &L, why, sizeof why) && !dt_attn_init(&L, &win) &&
                   (long long)n * 264 <= 65535 && (win || (long long)n * c->dt_batch <= 65535);
  }
  g->stride = probe.used;
  g->m = (cuda_learner_t **)calloc((size_t)n, sizeof *g->m);
  arena_range_t *r = (arena_range_t *)calloc(1, sizeof *r);
  void *base = NULL, *resets = NULL, *halts = NULL;
  if (!g->m || !r || cudaMalloc(&base, g->stride * (size_t)n) != cudaSuccess ||
      cudaMallocHost(&resets, CUDA_GROUP_RESET_BYTES * (size_t)n) != cudaSuccess ||
      cudaMallocHost(&halts, sizeof(int) * (size_t)n) != cudaSuccess) {
    snprintf(err, errlen, "population: %d members of %zu bytes each do not fit on the device", n, g->stride);
    free(r);
    if (base) cudaFree(base);
    if (resets) cudaFreeHost(resets);
    if (halts) cudaFreeHost(halts);
    group_free(g);
    cudaGetLastError();
    return LEARNER_ENOMEM;
  }
  g->base = (char *)base, g->resets = (unsigned char *)resets, g->halts = (int *)halts;
  for (int i = 0; i < n; i++) g->halts[i] = 1;
  r->lo = g->base, r->hi = g->base + g->stride * (size_t)n;
  pthread_mutex_lock(&ranges_mu);
  r->next = ranges, ranges = r;
  pthread_mutex_unlock(&ranges_mu);
  *group = g;
  return LEARNER_OK;
}

extern "C" int cuda_group_member(void *group, int i, const learner_config_t *c, void **impl, char *err,
                                 size_t errlen) {
  cuda_group_t *g = (cuda_group_t *)group;
  *impl = NULL;
  if (i < 0 || i >= g->n || g->m[i]) return snprintf(err, errlen, "population: no free member slot %d", i), LEARNER_EINVAL;
  if (!same_shape(&g->cfg, c)) {
    snprintf(err, errlen, "population: a member's config differs from member 0's in more than seed and hyperparameters");
    return LEARNER_ECORRUPT;
  }
  arena_t a = {g->base + g->stride * (size_t)i, g->stride, 0, 0};
  t_arena = &a;
  int rc = cuda_learner_create(c, impl, err, errlen);
  t_arena = NULL;
  if (rc) return rc;
  if (a.used != g->stride) { /* not member 0's layout: never, for the same shapes */
    cuda_learner_destroy(*impl);
    *impl = NULL;
    snprintf(err, errlen, "population: member %d's buffers take %zu bytes, member 0's %zu", i, a.used, g->stride);
    return LEARNER_EDEVICE;
  }
  g->m[i] = (cuda_learner_t *)*impl;
  return LEARNER_OK;
}

extern "C" void cuda_group_destroy(void *group) { group_free((cuda_group_t *)group); }
