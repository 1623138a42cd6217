/*
 * dqn_math_impl.h — the learner's math: forward, C51 Double-DQN loss and the
 * exact backward pass of DESIGN.md §2. This file is the spec.
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
 * Gradient rules: every parameter gradient is overwritten (never +=) once per
 * call; dh, the trunk output's gradient, accumulates over the value head and
 * all branches (GEMM beta = 1 after the first).
 */

/* ----------------------------------------------------------------- helpers */

/* Y[rows,out] = X[rows,in] . W[out,in]^T + b[out], and when H is not NULL
 * H = LeakyReLU(Y) in the same pass over Y. The activation is an arithmetic
 * select (y*pos + slope*y*(1-pos), pos = [y > 0]): equal to the branch form
 * bit for bit, and it vectorises; the branch form stayed a scalar loop whose
 * random signs mispredict half the time. */
static void SFX(linear_forward)(const R *X, const R *W, const R *b, R *Y, R *H, R slope, int rows, int in,
                                int out) {
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

/* ----------------------------------------------------------- activations */

int SFX(net_acts_alloc)(TY(net_acts) *A, const net_layout_t *L, int rows) {
  memset(A, 0, sizeof *A);
  A->rows = rows;
  size_t r = (size_t)rows;
  size_t need = r * (2 * L->H1 + 2 * L->H2 + 2 * L->VH + L->Z) + r * (size_t)L->D * 2 * L->AH +
                r * (size_t)L->a_width * 2;
  R *p = calloc(need, sizeof(R));
  if (!p) return -1;
  A->mem = p;
  A->a1 = p; p += r * L->H1;
  A->h1 = p; p += r * L->H1;
  A->a2 = p; p += r * L->H2;
  A->h = p; p += r * L->H2;
  A->av = p; p += r * L->VH;
  A->hv = p; p += r * L->VH;
  A->V = p; p += r * L->Z;
  for (int d = 0; d < L->D; d++) {
    A->ab[d] = p; p += r * L->AH;
    A->hb[d] = p; p += r * L->AH;
  }
  for (int d = 0; d < L->D; d++) {
    A->A[d] = p; p += r * (size_t)L->n[d] * L->Z;
    A->logp[d] = p; p += r * (size_t)L->n[d] * L->Z;
  }
  return 0;
}

void SFX(net_acts_free)(TY(net_acts) *A) {
  free(A->mem);
  memset(A, 0, sizeof *A);
}

/* ---------------------------------------------------------------- forward */

/* logits[a][z] = V[z] + A[a][z] - mean_a A[a][z]; logp = log_softmax_z(logits)
 * for one row of one branch. V [Z], A/logp [n, Z]. */
HOT static void SFX(dueling_log_softmax)(const R *V, const R *A, R *logp, int n, int Z) {
  R mean[LEARNER_MAX_ATOMS];
  for (int z = 0; z < Z; z++) mean[z] = 0;
  for (int a = 0; a < n; a++)
    for (int z = 0; z < Z; z++) mean[z] += A[a * Z + z];
  for (int z = 0; z < Z; z++) mean[z] = V[z] - mean[z] / n; /* V - mean_a A */
  for (int a = 0; a < n; a++) {
    R *lg = logp + a * Z;
    const R *Aa = A + a * Z;
    R mx = -INFINITY;
    for (int z = 0; z < Z; z++) {
      lg[z] = Aa[z] + mean[z];
      mx = lg[z] > mx ? lg[z] : mx;
    }
    /* exponentials into a buffer first (a vectorisable loop), then the sum in
     * index order (a float reduction the compiler must not reorder) */
    R e[LEARNER_MAX_ATOMS], s = 0;
    for (int z = 0; z < Z; z++) e[z] = EXP(lg[z] - mx);
    for (int z = 0; z < Z; z++) s += e[z];
    R lse = mx + LOG(s);
    for (int z = 0; z < Z; z++) lg[z] -= lse;
  }
}

/* Full forward of `rows` inputs X [rows, S] into A (rows <= A->rows). */
HOT void SFX(net_forward)(const net_layout_t *L, const TY(net_weights) *w, const R *X, int rows, R slope,
                      TY(net_acts) *A) {
  SFX(linear_forward)(X, w->W[NET_TRUNK1], w->b[NET_TRUNK1], A->a1, A->h1, slope, rows, L->S, L->H1);
  SFX(linear_forward)(A->h1, w->W[NET_TRUNK2], w->b[NET_TRUNK2], A->a2, A->h, slope, rows, L->H1, L->H2);
  SFX(linear_forward)(A->h, w->W[NET_VALUE1], w->b[NET_VALUE1], A->av, A->hv, slope, rows, L->H2, L->VH);
  SFX(linear_forward)(A->hv, w->W[NET_VALUE2], w->b[NET_VALUE2], A->V, NULL, slope, rows, L->VH, L->Z);
  for (int d = 0; d < L->D; d++) {
    int nz = L->n[d] * L->Z;
    SFX(linear_forward)(A->h, w->W[NET_BRANCH(d, 1)], w->b[NET_BRANCH(d, 1)], A->ab[d], A->hb[d], slope, rows,
                        L->H2, L->AH);
    SFX(linear_forward)(A->hb[d], w->W[NET_BRANCH(d, 2)], w->b[NET_BRANCH(d, 2)], A->A[d], NULL, slope, rows,
                        L->AH, nz);
    for (int i = 0; i < rows; i++)
      SFX(dueling_log_softmax)(A->V + (size_t)i * L->Z, A->A[d] + (size_t)i * nz, A->logp[d] + (size_t)i * nz,
                               L->n[d], L->Z);
  }
}

/* Q_d(a) = sum_z softmax(logits_d[a])_z * support_z for one row: logp [n,Z] -> q [n] */
HOT void SFX(c51_q_values)(const R *logp, int n, int Z, const R *support, R *q) {
  R e[LEARNER_MAX_ATOMS];
  for (int a = 0; a < n; a++) {
    R s = 0;
    for (int z = 0; z < Z; z++) e[z] = EXP(logp[a * Z + z]) * support[z];
    for (int z = 0; z < Z; z++) s += e[z];
    q[a] = s;
  }
}

/* Smallest index of the largest value (ties go to the lower action). */
static int SFX(argmax)(const R *q, int n) {
  int best = 0;
  for (int a = 1; a < n; a++)
    if (q[a] > q[best]) best = a;
  return best;
}

/* ------------------------------------------------------------- projection */

/* Projects a distribution with probabilities p[j] on arbitrary atom values
 * tz[j] (j < n) onto the fixed support of Z atoms on [vmin, vmax]:
 * values are clamped to [vmin, vmax], then each mass is split between the two
 * neighbouring atoms l = floor(b), u = ceil(b), b = (tz - vmin)/dz, in
 * proportion to closeness; when l == u (exactly on an atom) all of it goes to
 * that atom. l and u are kept in [0, Z-1] against rounding. out [Z] is
 * overwritten; it sums to sum(p). */
void SFX(c51_project)(const R *tz, const R *p, int n, R vmin, R vmax, int Z, R *out) {
  R dz = (vmax - vmin) / (Z - 1);
  for (int z = 0; z < Z; z++) out[z] = 0;
  for (int j = 0; j < n; j++) {
    R t = tz[j] < vmin ? vmin : (tz[j] > vmax ? vmax : tz[j]);
    R b = (t - vmin) / dz;
    int l = (int)FLOOR(b), u = (int)CEIL(b);
    l = l < 0 ? 0 : (l > Z - 1 ? Z - 1 : l);
    u = u < 0 ? 0 : (u > Z - 1 ? Z - 1 : u);
    if (l == u) {
      out[l] += p[j];
    } else {
      out[l] += p[j] * ((R)u - b);
      out[u] += p[j] * (b - (R)l);
    }
  }
}

/* ------------------------------------------------------------- workspace */

int SFX(dqn_ws_alloc)(TY(dqn_ws) *ws, const net_layout_t *L, int B) {
  memset(ws, 0, sizeof *ws);
  ws->B = B;
  size_t b = (size_t)B;
  int nmax = 0;
  for (int d = 0; d < L->D; d++) nmax = L->n[d] > nmax ? L->n[d] : nmax;
  if (SFX(net_acts_alloc)(&ws->on, L, 2 * B) || SFX(net_acts_alloc)(&ws->tg, L, B)) goto fail;
  size_t need = 2 * b * L->S                       /* x */
                + 2 * (size_t)L->n_params          /* weff_on, weff_tg */
                + (size_t)L->D * b * L->Z          /* m */
                + b * L->Z                         /* dV */
                + b * (size_t)nmax * L->Z          /* dA (one branch at a time) */
                + b * (L->VH + L->H2 + L->H1 + L->AH) /* dhv, dh, dh1, dhb */
                + (size_t)L->Z + (size_t)nmax      /* support, q scratch */
                + 4 * b;                           /* r, done, w, loss_i */
  R *p = calloc(need, sizeof(R));
  if (!p) goto fail;
  ws->mem = p;
  ws->x = p; p += 2 * b * L->S;
  ws->weff_on = p; p += L->n_params;
  ws->weff_tg = p; p += L->n_params;
  ws->m = p; p += (size_t)L->D * b * L->Z;
  ws->dV = p; p += b * L->Z;
  ws->dA = p; p += b * (size_t)nmax * L->Z;
  ws->dhv = p; p += b * L->VH;
  ws->dh = p; p += b * L->H2;
  ws->dh1 = p; p += b * L->H1;
  ws->dhb = p; p += b * L->AH;
  ws->support = p; p += L->Z;
  ws->qtmp = p; p += nmax;
  ws->r = p; p += b;
  ws->done = p; p += b;
  ws->w = p; p += b;
  ws->loss_i = p; p += b;
  ws->a = calloc(b, sizeof(int32_t));
  ws->best = calloc((size_t)L->D * b, sizeof(int32_t));
  if (!ws->a || !ws->best) goto fail;
  return 0;
fail:
  SFX(dqn_ws_free)(ws);
  return -1;
}

void SFX(dqn_ws_free)(TY(dqn_ws) *ws) {
  SFX(net_acts_free)(&ws->on);
  SFX(net_acts_free)(&ws->tg);
  free(ws->mem);
  free(ws->a);
  free(ws->best);
  memset(ws, 0, sizeof *ws);
}

/* --------------------------------------------------------- loss + backward */

/* The batch is in the workspace: x[0:B] = s, x[B:2B] = s', a, r, done, w.
 * fn_on/fn_tg: transformed noise f(eps) of the online/target nets (NULL: no
 * noise). grad (n_params) receives d(loss)/d(online params) unless NULL.
 * Returns the batch loss  L = (1/B) sum_i w_i * (1/D) sum_d CE_d(i)  and
 * leaves per-sample losses in ws->loss_i, Double-DQN actions in ws->best
 * [D,B], target distributions in ws->m [D,B,Z], and the mean over batch and
 * branches of Q_d(s, a_d) in *q_mean. */
HOT R SFX(dqn_loss_grad)(const net_layout_t *L, const TY(dqn_hp) *hp, const R *online, const R *target,
                     const R *fn_on, const R *fn_tg, TY(dqn_ws) *ws, R *grad, R *q_mean) {
  const int B = ws->B, Z = L->Z, D = L->D;
  const size_t b = (size_t)B;
  TY(net_weights) won, wtg;
  for (int z = 0; z < Z; z++) ws->support[z] = hp->v_min + (hp->v_max - hp->v_min) * z / (Z - 1);

  /* forward: online on [s; s'] (2B rows), target on s' (B rows) */
  SFX(net_weights)(L, online, fn_on, ws->weff_on, &won);
  SFX(net_weights)(L, target, fn_tg, ws->weff_tg, &wtg);
  SFX(net_forward)(L, &won, ws->x, 2 * B, hp->slope, &ws->on);
  SFX(net_forward)(L, &wtg, ws->x + b * L->S, B, hp->slope, &ws->tg);

  /* target distributions and cross-entropy */
  R loss = 0, qsum = 0;
  int32_t ad[LEARNER_MAX_BRANCHES];
  for (int i = 0; i < B; i++) ws->loss_i[i] = 0;
  for (int i = 0; i < B; i++) {
    net_decode_action(L, ws->a[i], ad);
    for (int d = 0; d < D; d++) {
      int n = L->n[d], nz = n * Z;
      const R *lp_on_s = ws->on.logp[d] + (size_t)i * nz;
      const R *lp_on_s2 = ws->on.logp[d] + (b + i) * nz;
      const R *lp_tg_s2 = ws->tg.logp[d] + (size_t)i * nz;
      /* Double DQN: the online net picks a', the target net scores it */
      SFX(c51_q_values)(hp->double_dqn ? lp_on_s2 : lp_tg_s2, n, Z, ws->support, ws->qtmp);
      int best = SFX(argmax)(ws->qtmp, n);
      ws->best[(size_t)d * b + i] = best;
      R *m = ws->m + ((size_t)d * b + i) * Z;
      R p[LEARNER_MAX_ATOMS], tz[LEARNER_MAX_ATOMS];
      R disc = hp->gamma * (1 - ws->done[i]);
      for (int z = 0; z < Z; z++) {
        p[z] = EXP(lp_tg_s2[best * Z + z]);
        tz[z] = ws->r[i] + disc * ws->support[z];
      }
      SFX(c51_project)(tz, p, Z, hp->v_min, hp->v_max, Z, m);
      const R *lp = lp_on_s + (size_t)ad[d] * Z;
      R ce = 0;
      for (int z = 0; z < Z; z++) ce -= m[z] * lp[z];
      ws->loss_i[i] += ce / D;
      R qa = 0;
      for (int z = 0; z < Z; z++) qa += EXP(lp[z]) * ws->support[z];
      qsum += qa;
    }
    loss += ws->w[i] * ws->loss_i[i];
  }
  loss /= B;
  if (q_mean) *q_mean = qsum / ((R)B * D);
  if (!grad) return loss;

  /* backward. For the taken action a_d of branch d, with m the target and
   * p = softmax(logits): dlogit_z = c (p_z sum(m) - m_z), c = w_i / (B D);
   * the other actions' logits get no gradient from the loss. Through the
   * dueling combine: dV_z = sum_d dlogit_d,z and
   * dA_d[a][z] = [a == a_d] dlogit_d,z - dlogit_d,z / n_d. */
  const R slope = hp->slope;
  const TY(net_acts) *A = &ws->on; /* first B rows: s */
  memset(ws->dV, 0, sizeof(R) * b * Z);
  for (int d = 0; d < D; d++) {
    int n = L->n[d], nz = n * Z;
    const net_layer_t *l1 = &L->layer[NET_BRANCH(d, 1)], *l2 = &L->layer[NET_BRANCH(d, 2)];
    for (int i = 0; i < B; i++) {
      net_decode_action(L, ws->a[i], ad);
      const R *lp = A->logp[d] + (size_t)i * nz + (size_t)ad[d] * Z;
      const R *m = ws->m + ((size_t)d * b + i) * Z;
      R c = ws->w[i] / ((R)B * D), msum = 0;
      for (int z = 0; z < Z; z++) msum += m[z];
      R *dA = ws->dA + (size_t)i * nz;
      for (int z = 0; z < Z; z++) {
        R g = c * (EXP(lp[z]) * msum - m[z]);
        ws->dV[(size_t)i * Z + z] += g;
        for (int a = 0; a < n; a++) dA[a * Z + z] = (a == ad[d] ? g : 0) - g / n;
      }
    }
    SFX(linear_backward)(ws->dA, A->hb[d], won.W[NET_BRANCH(d, 2)], ws->dhb, 0, grad + l2->off_w,
                         grad + l2->off_b, B, L->AH, nz);
    SFX(lrelu_backward)(ws->dhb, A->ab[d], b * L->AH, slope);
    SFX(linear_backward)(ws->dhb, A->h, won.W[NET_BRANCH(d, 1)], ws->dh, d > 0, grad + l1->off_w,
                         grad + l1->off_b, B, L->H2, L->AH);
  }
  const net_layer_t *v1 = &L->layer[NET_VALUE1], *v2 = &L->layer[NET_VALUE2];
  SFX(linear_backward)(ws->dV, A->hv, won.W[NET_VALUE2], ws->dhv, 0, grad + v2->off_w, grad + v2->off_b, B,
                       L->VH, Z);
  SFX(lrelu_backward)(ws->dhv, A->av, b * L->VH, slope);
  SFX(linear_backward)(ws->dhv, A->h, won.W[NET_VALUE1], ws->dh, 1, grad + v1->off_w, grad + v1->off_b, B,
                       L->H2, L->VH);
  const net_layer_t *t1 = &L->layer[NET_TRUNK1], *t2 = &L->layer[NET_TRUNK2];
  SFX(lrelu_backward)(ws->dh, A->a2, b * L->H2, slope);
  SFX(linear_backward)(ws->dh, A->h1, won.W[NET_TRUNK2], ws->dh1, 0, grad + t2->off_w, grad + t2->off_b, B,
                       L->H1, L->H2);
  SFX(lrelu_backward)(ws->dh1, A->a1, b * L->H1, slope);
  SFX(linear_backward)(ws->dh1, ws->x, won.W[NET_TRUNK1], NULL, 0, grad + t1->off_w, grad + t1->off_b, B,
                       L->S, L->H1);

  /* NoisyNet: the effective-weight gradient is the mu gradient (already in
   * place); sigma_W gets it times f(eps_out) f(eps_in), sigma_b times f(eps_out). */
  for (int li = 0; li < L->n_layers; li++) {
    const net_layer_t *l = &L->layer[li];
    if (!l->noisy) continue;
    const R *fi = fn_on ? fn_on + l->noise_off : NULL, *fo = fi ? fi + l->in : NULL;
    for (int o = 0; o < l->out; o++) {
      for (int k = 0; k < l->in; k++) {
        size_t j = (size_t)o * l->in + k;
        grad[l->off_sw + j] = fi ? grad[l->off_w + j] * (fo[o] * fi[k]) : 0;
      }
      grad[l->off_sb + o] = fo ? grad[l->off_b + o] * fo[o] : 0;
    }
  }
  return loss;
}
