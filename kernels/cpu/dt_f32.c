/* The float instance of dt_impl.h: the Decision Transformer's loss and gradient (the learner's). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dt.h"

#define R float
#define SFX(n) n##_f32
#define EXP expf
#define LOG logf
#define SQRT sqrtf
#define TANH tanhf
#include "dt_impl.h"
