/*
 * dqn_math_impl.h — the learner's math: forward, C51 Double-DQN loss and the
 * exact backward pass of docs/learner.md §2-4. This file is the spec.
 *
 * It is a "template": dqn_math_f32.c and dqn_math_f64.c include it with
 *   R      the real type (float, double)
 *   SFX(n) the name suffix (n##_f32, n##_f64)
 *   GEMM   cblas_sgemm / cblas_dgemm
 * The float instance is the CPU backend; the double instance exists so the
 * finite-difference tests can check the very same code in double precision.
 *
 * Shapes (row-major): B = batch, S = state_dim, H1/H2 = trunk widths,
 * VH = value hidden, AH = advantage hidden, Z = atoms, D = branches,
 * n_d = size of branch d. Activations keep pre- and post-activation values:
 *   a1,h1 [rows,H1]  a2,h [rows,H2]  av,hv [rows,VH]  V [rows,Z]
 *   ab,hb [D][rows,AH]  A,logp [D][rows, n_d*Z] (action-major: a*Z + z)
 * The online net runs once on rows = 2B: the s rows first, then the s' rows
 * (one noise draw serves both, so one GEMM per layer instead of two); its
 * first B rows are what the backward pass reads.
 *
 * HOT marks the element-wise hot spots: the float instance builds them twice
 * (AVX2 and baseline x86-64, picked at load time by the CPU); without FMA
 * contraction (ISO C mode) both clones give the same bits.
 *
 * With attention on (L->attn.T > 0; attn_impl.h) the heads read h' = the
 * block's output (A->hh; A->hh == A->h when off) and the backward runs the
 * block's between the heads' and the trunk's.
 *
 * Gradient rules: every parameter gradient is overwritten (never +=) once per
 * call; dh, the trunk output's gradient (of h', with attention on),
 * accumulates over the value head and all branches (GEMM beta = 1 after the
 * first).
 */

/* The step's math, module by module, in the order a step runs it: */
#include "linear_impl.h" /* nn.Linear, LeakyReLU, NoisyNet weights */
#include "attn_impl.h"   /* the attention block on h (docs/learner.md §7), forward and backward */
#include "heads_impl.h"  /* the forward: trunk and dueling C51 heads, Q values */
#include "loss_impl.h"   /* C51 projection, Double-DQN cross-entropy, the backward */
