/*
 * linear_impl.h — the spec's first module: nn.Linear forward and backward
 * (through BLAS), LeakyReLU's backward, and NoisyNet's factorised Gaussian
 * composition of effective weights. Part of the dqn_math_impl.h template
 * (R, SFX, TY, GEMM, HOT defined by the including instance).
 *
 * Shapes: X [rows, in], W [out, in] (nn.Linear), b [out], Y/H [rows, out].
 * Rules: dW and db are overwritten; dX is overwritten or accumulated (+=) as
 * the caller says.
 */
/* ----------------------------------------------------------------- helpers */

/* Y[rows,out] = X[rows,in] . W[out,in]^T with every element summed in one
 * order that depends on `in` alone: eight lanes (lane l sums the products of
 * inputs i = l mod 8, in increasing i), then ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)).
 * A row's outputs therefore never depend on how many rows came with it, nor
 * on the processor: BLAS picks its blocking, and so its summation order, by
 * the matrix shape and the CPU's kernels, and a row of a 9000-row GEMM need
 * not equal the same row alone (docs/learner.md, "Act"). Without FMA
 * contraction (ISO C mode) the vector and scalar clones give the same bits.
 * Four outputs share each load of x; an output past `out` reads the last
 * row of W again and is dropped. */
HOT static void SFX(gemm_rows)(const R *restrict X, const R *restrict W, R *restrict Y, int rows, int in,
                               int out) {
  enum { LN = 8, NO = 4 };
  const int in8 = in - in % LN;
  for (int r = 0; r < rows; r++) {
    const R *x = X + (size_t)r * in;
    for (int o0 = 0; o0 < out; o0 += NO) {
      R acc[NO][LN];
      const R *w[NO];
      for (int j = 0; j < NO; j++) {
        w[j] = W + (size_t)(o0 + j < out ? o0 + j : out - 1) * in;
        for (int l = 0; l < LN; l++) acc[j][l] = 0;
      }
      for (int i = 0; i < in8; i += LN)
        for (int j = 0; j < NO; j++)
          for (int l = 0; l < LN; l++) acc[j][l] += x[i + l] * w[j][i + l];
      for (int i = in8; i < in; i++)
        for (int j = 0; j < NO; j++) acc[j][i - in8] += x[i] * w[j][i];
      for (int j = 0; j < NO && o0 + j < out; j++) {
        const R *a = acc[j];
        Y[(size_t)r * out + o0 + j] = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
      }
    }
  }
}

/* Y[rows,out] = X[rows,in] . W[out,in]^T + b[out], and when H is not NULL
 * H = LeakyReLU(Y) in the same pass over Y. rows_exact: the product by
 * gemm_rows (each row on its own, in a fixed order: Act), else by BLAS (the
 * training step, whose shapes are fixed). The activation is an arithmetic
 * select (y*pos + slope*y*(1-pos), pos = [y > 0]): equal to the branch form
 * bit for bit, and it vectorises; the branch form stayed a scalar loop whose
 * random signs mispredict half the time. */
static void SFX(linear_forward)(const R *X, const R *W, const R *b, R *Y, R *H, R slope, int rows, int in,
                                int out, int rows_exact) {
  if (rows_exact)
    SFX(gemm_rows)(X, W, Y, rows, in, out);
  else
    GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out, in, 1, X, in, W, in, 0, Y, out);
  for (int r = 0; r < rows; r++) {
    R *restrict y = Y + (size_t)r * out;
    if (H) {
      R *restrict h = H + (size_t)r * out;
      for (int o = 0; o < out; o++) {
        R v = y[o] + b[o];
        y[o] = v;
        R pos = (R)(v > 0); /* 1 or 0: arithmetic select, exact in both cases */
        h[o] = v * pos + slope * v * (1 - pos);
      }
    } else {
      for (int o = 0; o < out; o++) y[o] += b[o];
    }
  }
}

/* dW[out,in] = dY^T . X ; db[out] = sum_rows dY ; dX[rows,in] (+)= dY . W.
 * dX may be NULL (first layer); dx_accumulate selects += over =. */
static void SFX(linear_backward)(const R *dY, const R *X, const R *W, R *dX, int dx_accumulate, R *dW,
                                 R *db, int rows, int in, int out) {
  GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, rows, 1, dY, out, X, in, 0, dW, in);
  for (int o = 0; o < out; o++) db[o] = 0;
  for (int r = 0; r < rows; r++)
    for (int o = 0; o < out; o++) db[o] += dY[(size_t)r * out + o];
  if (dX)
    GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, in, out, 1, dY, out, W, in,
         dx_accumulate ? 1 : 0, dX, in);
}

/* dX[rows,in] += alpha dY . W: the input gradient of a fixed layer (no parameter gradients) */
static void SFX(linear_backward_dx)(const R *dY, const R *W, R *dX, R alpha, int rows, int in, int out) {
  GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, in, out, alpha, dY, out, W, in, 1, dX, in);
}

/* dA = dH * lrelu'(a), in place on dH */
static void SFX(lrelu_backward)(R *restrict dh, const R *restrict a, size_t n, R slope) {
  for (size_t i = 0; i < n; i++) {
    R pos = (R)(a[i] > 0);
    dh[i] *= pos + (1 - pos) * slope; /* exactly 1 or slope */
  }
}

/* --------------------------------------------------------------- NoisyNet */

/* f(x) = sign(x) sqrt|x| applied to raw N(0,1) noise, in place. */
void SFX(noisy_transform)(R *eps, int64_t n) {
  for (int64_t i = 0; i < n; i++) eps[i] = eps[i] >= 0 ? SQRT(eps[i]) : -SQRT(-eps[i]);
}

/* Effective weights of every layer: for a NoisyNet layer
 *   W = mu_W + sigma_W ⊙ (f(eps_out) ⊗ f(eps_in)),  b = mu_b + sigma_b ⊙ f(eps_out)
 * written into weff (laid out like params); other layers point at params.
 * fnoise == NULL means "no noise" (mean weights: greedy acting). */
HOT void SFX(net_weights)(const net_layout_t *L, const R *params, const R *fnoise, R *weff,
                      TY(net_weights) *w) {
  w->attn = L->attn.T ? params : NULL;
  w->prior_scale = 0;
  w->rows_exact = 0;
  for (int li = 0; li < L->n_layers; li++) w->pW[li] = w->pb[li] = NULL;
  for (int li = 0; li < L->n_layers; li++) {
    const net_layer_t *l = &L->layer[li];
    if (!l->noisy || !fnoise) {
      w->W[li] = params + l->off_w;
      w->b[li] = params + l->off_b;
      continue;
    }
    const R *fi = fnoise + l->noise_off, *fo = fi + l->in;
    R *W = weff + l->off_w, *b = weff + l->off_b;
    const R *mw = params + l->off_w, *sw = params + l->off_sw;
    const R *mb = params + l->off_b, *sb = params + l->off_sb;
    for (int o = 0; o < l->out; o++) {
      for (int i = 0; i < l->in; i++) {
        size_t k = (size_t)o * l->in + i;
        W[k] = mw[k] + sw[k] * (fo[o] * fi[i]);
      }
      b[o] = mb[o] + sb[o] * fo[o];
    }
    w->W[li] = W;
    w->b[li] = b;
  }
}

/* The fixed prior heads (docs/learner.md §8): head layer li's prior weight and
 * bias in the prior vector (never noisy), scaled by `scale` in the logits.
 * prior == NULL or a layout without priors: none. */
void SFX(net_weights_priors)(const net_layout_t *L, const R *prior, R scale, TY(net_weights) *w) {
  w->prior_scale = 0;
  for (int li = 0; li < L->n_layers; li++) w->pW[li] = w->pb[li] = NULL;
  if (!prior || !L->has_prior) return;
  w->prior_scale = scale;
  for (int li = 0; li < L->n_layers; li++)
    if (L->prior_off_w[li] >= 0) w->pW[li] = prior + L->prior_off_w[li], w->pb[li] = prior + L->prior_off_b[li];
}
