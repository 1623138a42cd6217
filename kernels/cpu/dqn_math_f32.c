/* The float instance of dqn_math_impl.h: the CPU backend's math. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dqn_math.h"
#include "fast_expf.h"

#define R float
#define SFX(n) n##_f32
#define TY(n) n##_f32_t
#define GEMM cblas_sgemm
#define EXP fast_expf
#define LOG logf
#define SQRT sqrtf
#define FLOOR floorf
#define CEIL ceilf
/* clang 14 names an external target_clones function's dispatcher "f.ifunc"
 * and defines no plain "f", so calls from other files do not link (fixed in
 * clang 15); clang 14 (the fuzzing build) gets the baseline code only. */
#if defined(__clang__) && __clang_major__ < 15
#define HOT
#else
#define HOT __attribute__((target_clones("avx2", "default")))
#endif
#include "dqn_math_impl.h"
