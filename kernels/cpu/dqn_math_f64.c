/* The double instance of dqn_math_impl.h: the same code, checked by finite
 * differences in double precision (tests/test-gradcheck.c). */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dqn_math.h"

#define R double
#define SFX(n) n##_f64
#define TY(n) n##_f64_t
#define GEMM cblas_dgemm
#define EXP exp
#define LOG log
#define SQRT sqrt
#define FLOOR floor
#define CEIL ceil
#define HOT 
#include "dqn_math_impl.h"
