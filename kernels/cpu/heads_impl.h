/*
 * heads_impl.h — the network forward (DESIGN.md §2): the trunk, then the
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

int SFX(net_acts_alloc)(TY(net_acts) *A, const net_layout_t *L, int rows) {
  memset(A, 0, sizeof *A);
  A->rows = rows;
  size_t r = (size_t)rows;
  size_t need = r * (2 * L->H1 + 2 * L->H2 + 2 * L->VH + L->Z) + r * (size_t)L->D * 2 * L->AH +
                r * (size_t)L->a_width * 2 + SFX(attn_acts_need)(L, r);
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

/* Full forward of `rows` inputs X [rows, S] into A (rows <= A->rows). */
HOT void SFX(net_forward)(const net_layout_t *L, const TY(net_weights) *w, const R *X, int rows, R slope,
                      TY(net_acts) *A) {
  SFX(linear_forward)(X, w->W[NET_TRUNK1], w->b[NET_TRUNK1], A->a1, A->h1, slope, rows, L->S, L->H1);
  SFX(linear_forward)(A->h1, w->W[NET_TRUNK2], w->b[NET_TRUNK2], A->a2, A->h, slope, rows, L->H1, L->H2);
  if (L->attn.T) SFX(attn_forward)(L, w->attn, A->h, rows, A); /* h -> h' = A->hh */
  SFX(linear_forward)(A->hh, w->W[NET_VALUE1], w->b[NET_VALUE1], A->av, A->hv, slope, rows, L->H2, L->VH);
  SFX(linear_forward)(A->hv, w->W[NET_VALUE2], w->b[NET_VALUE2], A->V, NULL, slope, rows, L->VH, L->Z);
  for (int d = 0; d < L->D; d++) {
    int nz = L->n[d] * L->Z;
    SFX(linear_forward)(A->hh, w->W[NET_BRANCH(d, 1)], w->b[NET_BRANCH(d, 1)], A->ab[d], A->hb[d], slope, rows,
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
