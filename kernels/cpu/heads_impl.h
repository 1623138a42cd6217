/*
 * heads_impl.h — the network forward (docs/learner.md §2-4): the trunk, then the
 * dueling C51 heads per branch (value + advantage, combined, log-softmax over
 * atoms), and Q values from log-probabilities. Part of the dqn_math_impl.h
 * template.
 *
 * With attention on, the heads read its output h' (A->hh; attn_impl.h).
 *
 * Shapes: a1,h1 [rows,H1]  a2,h [rows,H2]  av,hv [rows,VH]  V [rows,Z]
 *         ab,hb [D][rows,AH]  A,logp [D][rows, n_d*Z] (action-major: a*Z + z)
 */
/* ----------------------------------------------------------- activations */

/* one head set's block: av, hv, V, ab/hb per branch, A/logp per branch */
static size_t SFX(net_hblock)(const net_layout_t *L, size_t r) {
  return r * (2 * L->VH + L->Z) + r * (size_t)L->D * 2 * L->AH + r * (size_t)L->a_width * 2;
}

/* the values net_acts_alloc takes for `rows` rows (the learner's memory estimate counts them too) */
size_t SFX(net_acts_need)(const net_layout_t *L, int rows) {
  const size_t r = (size_t)rows;
  const int K = L->K < 1 ? 1 : L->K; /* K head sets, and one more for the prior heads' scratch */
  return r * (2 * L->H1 + 2 * L->H2) + SFX(net_hblock)(L, r) * (size_t)(K + (L->has_prior ? 1 : 0)) +
         SFX(attn_acts_need)(L, r);
}

int SFX(net_acts_alloc)(TY(net_acts) *A, const net_layout_t *L, int rows) {
  memset(A, 0, sizeof *A);
  size_t r = (size_t)rows;
  const size_t hblock = SFX(net_hblock)(L, r);
  const int K = L->K < 1 ? 1 : L->K;
  R *p = calloc(SFX(net_acts_need)(L, rows), sizeof(R));
  if (!p) return -1; /* rows stays 0: the next call allocates again, never uses NULL buffers */
  A->rows = rows;
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
  A->hstride = hblock;
  p += hblock * (size_t)(K - 1); /* head sets 1 .. K-1 */
  if (L->has_prior) {
    A->pscr = p;
    p += hblock;
  }
  SFX(attn_acts_place)(A, L, r, p);
  A->hh = L->attn.T ? A->hatt : A->h;
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

/* Head k's buffer X (one of av .. logp[d]): head 0's plus k blocks; the prior scratch's twin of X. */
#define HEADK(A, X, k) ((X) + (size_t)(k) * (A)->hstride)
#define PRIORX(A, X) ((A)->pscr + ((X) - (A)->av))

/* Full forward of `rows` inputs X [rows, S] into A (rows <= A->rows). With K
 * head sets (docs/learner.md §8) each reads h' and fills its own block; with
 * priors, head k's value and advantage outputs get prior_scale x those of its
 * fixed prior head before the dueling combine (dueling is linear, so this is
 * dueling(V, A) + beta_p dueling(Vp, Ap)). */
HOT void SFX(net_forward)(const net_layout_t *L, const TY(net_weights) *w, const R *X, int rows, R slope,
                      TY(net_acts) *A) {
  SFX(linear_forward)(X, w->W[NET_TRUNK1], w->b[NET_TRUNK1], A->a1, A->h1, slope, rows, L->S, L->H1, w->rows_exact);
  SFX(linear_forward)(A->h1, w->W[NET_TRUNK2], w->b[NET_TRUNK2], A->a2, A->h, slope, rows, L->H1, L->H2, w->rows_exact);
  if (L->attn.T) SFX(attn_forward)(L, w->attn, A->h, rows, w->rows_exact, A); /* h -> h' = A->hh */
  const int K = L->K < 1 ? 1 : L->K;
  for (int k = 0; k < K; k++) {
    const int lv1 = NET_HEAD_LAYER(L, k, 0), lv2 = NET_HEAD_LAYER(L, k, 1);
    const int prior = w->pW[lv1] != NULL && A->pscr != NULL;
    const R beta = w->prior_scale;
    R *V = HEADK(A, A->V, k);
    SFX(linear_forward)(A->hh, w->W[lv1], w->b[lv1], HEADK(A, A->av, k), HEADK(A, A->hv, k), slope, rows, L->H2,
                        L->VH, w->rows_exact);
    SFX(linear_forward)(HEADK(A, A->hv, k), w->W[lv2], w->b[lv2], V, NULL, slope, rows, L->VH, L->Z, w->rows_exact);
    if (prior) {
      R *pV = PRIORX(A, A->V);
      SFX(linear_forward)(A->hh, w->pW[lv1], w->pb[lv1], PRIORX(A, A->av), PRIORX(A, A->hv), slope, rows, L->H2,
                          L->VH, w->rows_exact);
      SFX(linear_forward)(PRIORX(A, A->hv), w->pW[lv2], w->pb[lv2], pV, NULL, slope, rows, L->VH, L->Z, w->rows_exact);
      for (size_t j = 0; j < (size_t)rows * L->Z; j++) V[j] += beta * pV[j];
    }
    for (int d = 0; d < L->D; d++) {
      int nz = L->n[d] * L->Z;
      const int l1 = NET_HEAD_LAYER(L, k, 2 + 2 * d), l2 = NET_HEAD_LAYER(L, k, 3 + 2 * d);
      R *Ad = HEADK(A, A->A[d], k), *lp = HEADK(A, A->logp[d], k);
      SFX(linear_forward)(A->hh, w->W[l1], w->b[l1], HEADK(A, A->ab[d], k), HEADK(A, A->hb[d], k), slope, rows,
                          L->H2, L->AH, w->rows_exact);
      SFX(linear_forward)(HEADK(A, A->hb[d], k), w->W[l2], w->b[l2], Ad, NULL, slope, rows, L->AH, nz, w->rows_exact);
      if (prior) {
        R *pA = PRIORX(A, A->A[d]);
        SFX(linear_forward)(A->hh, w->pW[l1], w->pb[l1], PRIORX(A, A->ab[d]), PRIORX(A, A->hb[d]), slope, rows,
                            L->H2, L->AH, w->rows_exact);
        SFX(linear_forward)(PRIORX(A, A->hb[d]), w->pW[l2], w->pb[l2], pA, NULL, slope, rows, L->AH, nz, w->rows_exact);
        for (size_t j = 0; j < (size_t)rows * nz; j++) Ad[j] += beta * pA[j];
      }
      for (int i = 0; i < rows; i++)
        SFX(dueling_log_softmax)(V + (size_t)i * L->Z, Ad + (size_t)i * nz, lp + (size_t)i * nz, L->n[d], L->Z);
    }
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
