/*
 * golden_util.h — the golden cases of tests/golden/ (PyTorch autograd,
 * float64; README there) as a test reads them: the config, both parameter
 * vectors and the priors by registry name (model.h), the batch, the raw
 * NoisyNet noise and the bootstrap masks. test-golden (the CPU) and
 * test-gpu-golden (the CUDA kernels) share it.
 */
#ifndef DQND_GOLDEN_UTIL_H
#define DQND_GOLDEN_UTIL_H

#include "learner.h"
#include "model.h"
#include "net_layout.h"

extern char golden_dir[1024]; /* DQND_GOLDEN_DIR, set by the test's main */

typedef struct {
  learner_config_t c;
  net_layout_t L;
  double *on, *tg, *s, *s2, *a, *r, *d, *w;
  double *eps_on, *eps_tg; /* [n_noise] raw noise, NULL without NoisyNet */
  double *prior, *masks;   /* [n_prior] fixed priors, [B, K] bootstrap masks; NULL without */
} golden_t;

/* case/name.npy as doubles; expect >= 0 checks the element count */
double *golden_load64(const char *cs, const char *name, int64_t expect);
void golden_load_config(const char *cs, learner_config_t *c);
/* the registry (model.h) of a config (a static: one at a time) */
model_t *golden_registry(const learner_config_t *c);
/* which == NULL: the fixed priors (MODEL_VEC_PRIOR), files <name>.npy */
void golden_load_params(const char *cs, const char *which, const learner_config_t *c, double *p);
void golden_load_noise(const char *cs, const char *which, const net_layout_t *L, double *eps);
void golden_load(const char *cs, golden_t *g);
void golden_free(golden_t *g);

#endif
