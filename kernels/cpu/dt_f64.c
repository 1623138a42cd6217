/* The double instance of dt_impl.h: the Decision Transformer's loss and gradient (finite differences). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dt.h"

#define R double
#define SFX(n) n##_f64
#define EXP exp
#define LOG log
#define SQRT sqrt
#define TANH tanh
#include "dt_impl.h"
