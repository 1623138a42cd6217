/*
 * dt_impl.h — the Decision Transformer's loss and gradient (dt.h), written
 * once over the real type R and included by dt_f32.c and dt_f64.c with R,
 * SFX, EXP, LOG, SQRT and TANH defined. docs/learner.md, "Decision
 * Transformer", has the math; the loops below follow it row by row, each
 * window alone, skipping the padded steps' tokens everywhere (they are never
 * keys, their outputs reach nothing, and their inputs are never read).
 */

#define DT_LN_EPS 1e-5
#define DT_GELU_C 0.7978845608028654 /* sqrt(2 / pi) */

/* y = W x + b for W [out, in] (nn.Linear) */
static void SFX(dt_lin)(const R *W, const R *bias, const R *x, int in, int out, R *y) {
  for (int o = 0; o < out; o++) {
    R s = bias ? bias[o] : (R)0;
    const R *w = W + (size_t)o * in;
    for (int i = 0; i < in; i++) s += w[i] * x[i];
    y[o] = s;
  }
}

/* its backward: dx += W^T dy (dx may be NULL), dW += dy x^T, db += dy */
static void SFX(dt_lin_bwd)(const R *W, const R *x, const R *dy, int in, int out, R *dx, R *dW, R *db) {
  for (int o = 0; o < out; o++) {
    const R g = dy[o];
    if (db) db[o] += g;
    R *dw = dW + (size_t)o * in;
    const R *w = W + (size_t)o * in;
    for (int i = 0; i < in; i++) {
      dw[i] += g * x[i];
      if (dx) dx[i] += w[i] * g;
    }
  }
}

/* LayerNorm of one token: y = xhat gamma + beta, xhat and 1/std kept */
static void SFX(dt_ln)(const R *x, int n, const R *gam, const R *bet, R *y, R *xhat, R *rstd) {
  R mean = 0, var = 0;
  for (int i = 0; i < n; i++) mean += x[i];
  mean /= (R)n;
  for (int i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
  var /= (R)n;
  const R r = (R)1 / SQRT(var + (R)DT_LN_EPS);
  for (int i = 0; i < n; i++) {
    xhat[i] = (x[i] - mean) * r;
    y[i] = xhat[i] * gam[i] + bet[i];
  }
  *rstd = r;
}

/* its backward: dx += ..., dgamma += dy xhat, dbeta += dy */
static void SFX(dt_ln_bwd)(const R *dy, const R *xhat, R rstd, const R *gam, int n, R *dx, R *dg, R *db) {
  R m1 = 0, m2 = 0;
  for (int i = 0; i < n; i++) {
    const R dxh = dy[i] * gam[i];
    m1 += dxh, m2 += dxh * xhat[i];
    dg[i] += dy[i] * xhat[i];
    db[i] += dy[i];
  }
  m1 /= (R)n, m2 /= (R)n;
  for (int i = 0; i < n; i++) dx[i] += rstd * (dy[i] * gam[i] - m1 - xhat[i] * m2);
}

static R SFX(dt_gelu)(R u) { return (R)0.5 * u * ((R)1 + TANH((R)DT_GELU_C * (u + (R)0.044715 * u * u * u))); }

static R SFX(dt_gelu_d)(R u) {
  const R t = TANH((R)DT_GELU_C * (u + (R)0.044715 * u * u * u));
  return (R)0.5 * ((R)1 + t) + (R)0.5 * u * ((R)1 - t * t) * (R)DT_GELU_C * ((R)1 + (R)3 * (R)0.044715 * u * u);
}

/* one window's activations (N tokens) */
typedef struct SFX(dt_acts) {
  R *x0, *xh0, *r0;      /* embeddings [N, E], LN_embed's xhat, 1/std */
  R *X;                  /* the residual stream entering block l: [L + 1][N, E] */
  R *h1, *xh1, *r1, *q, *k, *v, *P, *att, *xm, *h2, *xh2, *r2, *u, *g; /* per block, [L][...] */
  R *xf, *xhf, *rf;      /* LN_f */
  R *z;                  /* logits [K, A] */
  /* gradients of one window */
  R *dX, *dxm, *dh, *dq, *dk, *dv, *datt, *du, *dz, *dx0, *dP;
} SFX(dt_acts_t);

double SFX(dt_loss_grad)(const dt_layout_t *L, const R *p, const dt_batch_t *bt, R *grad, R *loss_step, R *logits) {
  const int K = L->K, N = 3 * K, E = L->E, NL = L->L, nh = L->nh, dh = E / nh, F = 4 * E, S = L->S, D = L->D,
            A = L->A;
  const R scale = (R)1 / SQRT((R)dh);
  const size_t NE = (size_t)N * E, NF = (size_t)N * F, NN = (size_t)nh * N * N;
  if (grad) memset(grad, 0, sizeof(R) * (size_t)L->n_params);
  if (loss_step) memset(loss_step, 0, sizeof(R) * (size_t)bt->B * K);
  if (logits) memset(logits, 0, sizeof(R) * (size_t)bt->B * K * A);
  long long nreal = 0;
  for (long long i = 0; i < (long long)bt->B * K; i++) nreal += bt->mask[i] != 0;
  if (!nreal) return 0;
  /* one allocation for a window's activations and gradients */
  R *mem = calloc(dt_window_values(K, E, NL, nh, A), sizeof(R));
  int *valid = calloc((size_t)N, sizeof(int));
  if (!mem || !valid) {
    free(mem), free(valid);
    return -1;
  }
  SFX(dt_acts_t) a;
  R *m = mem;
#define TAKE(ptr, n) (a.ptr = m, m += (n))
  TAKE(x0, NE), TAKE(xh0, NE), TAKE(r0, N), TAKE(X, (size_t)(NL + 1) * NE);
  TAKE(h1, NL * NE), TAKE(xh1, NL * NE), TAKE(r1, (size_t)NL * N), TAKE(q, NL * NE), TAKE(k, NL * NE);
  TAKE(v, NL * NE), TAKE(P, NL * NN), TAKE(att, NL * NE), TAKE(xm, NL * NE), TAKE(h2, NL * NE);
  TAKE(xh2, NL * NE), TAKE(r2, (size_t)NL * N), TAKE(u, NL * NF), TAKE(g, NL * NF);
  TAKE(xf, NE), TAKE(xhf, NE), TAKE(rf, N), TAKE(z, (size_t)K * A);
  TAKE(dX, NE), TAKE(dxm, NE), TAKE(dh, NE), TAKE(dq, NE), TAKE(dk, NE), TAKE(dv, NE), TAKE(datt, NE);
  TAKE(du, NF), TAKE(dz, A), TAKE(dx0, NE), TAKE(dP, N);
#undef TAKE
  double loss = 0;
  const R inv_real = (R)(1.0 / (double)nreal);
  for (int b = 0; b < bt->B; b++) {
    const float *mk = bt->mask + (size_t)b * K;
    int any = 0;
    for (int t = 0; t < K; t++) any |= mk[t] != 0;
    if (!any) continue;
    for (int n = 0; n < N; n++) valid[n] = mk[n / 3] != 0;
    /* the tokens: R_t, s_t, a_t, each plus the step's time embedding */
    for (int t = 0; t < K; t++) {
      if (!mk[t]) continue;
      int tm = bt->timesteps[(size_t)b * K + t];
      tm = tm < 0 ? 0 : tm >= L->T ? L->T - 1 : tm;
      const R *te = p + L->time + (size_t)tm * E;
      const R rt = (R)bt->rtg[(size_t)b * K + t];
      R *xr = a.x0 + (size_t)(3 * t) * E, *xs = xr + E, *xa = xs + E;
      const float *st = bt->states + ((size_t)b * K + t) * S;
      for (int e = 0; e < E; e++) { /* W_s s + b_s, from the float states */
        const R *w = p + L->st_w + (size_t)e * S;
        R s = p[L->st_b + e];
        for (int i = 0; i < S; i++) s += w[i] * (R)st[i];
        xs[e] = s;
      }
      const int32_t act = bt->actions[(size_t)b * K + t];
      for (int e = 0; e < E; e++) {
        xr[e] = p[L->rtg_w + e] * rt + p[L->rtg_b + e] + te[e];
        xs[e] += te[e];
        R s = 0;
        for (int d = 0; d < D; d++) s += p[L->act_emb[d] + (size_t)((act / L->radix_after[d]) % L->n[d]) * E + e];
        xa[e] = s + te[e];
      }
    }
    for (int n = 0; n < N; n++)
      if (valid[n])
        SFX(dt_ln)(a.x0 + (size_t)n * E, E, p + L->lne_w, p + L->lne_b, a.X + (size_t)n * E, a.xh0 + (size_t)n * E,
                   &a.r0[n]);
    for (int l = 0; l < NL; l++) {
      const dt_block_off_t *o = &L->blk[l];
      const R *Xl = a.X + (size_t)l * NE;
      R *X1 = a.X + (size_t)(l + 1) * NE, *h1 = a.h1 + l * NE, *q = a.q + l * NE, *k = a.k + l * NE;
      R *v = a.v + l * NE, *P = a.P + l * NN, *att = a.att + l * NE, *xm = a.xm + l * NE, *h2 = a.h2 + l * NE;
      R *u = a.u + l * NF, *gl = a.g + l * NF;
      for (int n = 0; n < N; n++) {
        if (!valid[n]) continue;
        const size_t r = (size_t)n * E;
        SFX(dt_ln)(Xl + r, E, p + o->ln1_w, p + o->ln1_b, h1 + r, a.xh1 + l * NE + r, &a.r1[(size_t)l * N + n]);
        SFX(dt_lin)(p + o->q_w, p + o->q_b, h1 + r, E, E, q + r);
        SFX(dt_lin)(p + o->k_w, p + o->k_b, h1 + r, E, E, k + r);
        SFX(dt_lin)(p + o->v_w, p + o->v_b, h1 + r, E, E, v + r);
      }
      /* causal attention over the real keys j <= i, per head */
      for (int hd = 0; hd < nh; hd++)
        for (int i = 0; i < N; i++) {
          if (!valid[i]) continue;
          R *Pi = P + ((size_t)hd * N + i) * N, mx = -(R)INFINITY;
          const R *qi = q + (size_t)i * E + hd * dh;
          for (int j = 0; j <= i; j++) {
            if (!valid[j]) continue;
            const R *kj = k + (size_t)j * E + hd * dh;
            R s = 0;
            for (int c = 0; c < dh; c++) s += qi[c] * kj[c];
            Pi[j] = s * scale;
            mx = Pi[j] > mx ? Pi[j] : mx;
          }
          R sum = 0;
          for (int j = 0; j <= i; j++)
            if (valid[j]) sum += (Pi[j] = EXP(Pi[j] - mx));
          R *ai = att + (size_t)i * E + hd * dh;
          for (int c = 0; c < dh; c++) ai[c] = 0;
          for (int j = 0; j <= i; j++) {
            if (!valid[j]) continue;
            Pi[j] /= sum;
            const R *vj = v + (size_t)j * E + hd * dh;
            for (int c = 0; c < dh; c++) ai[c] += Pi[j] * vj[c];
          }
        }
      for (int n = 0; n < N; n++) {
        if (!valid[n]) continue;
        const size_t r = (size_t)n * E, rf = (size_t)n * F;
        SFX(dt_lin)(p + o->o_w, p + o->o_b, att + r, E, E, xm + r);
        for (int e = 0; e < E; e++) xm[r + e] += Xl[r + e];
        SFX(dt_ln)(xm + r, E, p + o->ln2_w, p + o->ln2_b, h2 + r, a.xh2 + l * NE + r, &a.r2[(size_t)l * N + n]);
        SFX(dt_lin)(p + o->m1_w, p + o->m1_b, h2 + r, E, F, u + rf);
        for (int f = 0; f < F; f++) gl[rf + f] = SFX(dt_gelu)(u[rf + f]);
        SFX(dt_lin)(p + o->m2_w, p + o->m2_b, gl + rf, F, E, X1 + r);
        for (int e = 0; e < E; e++) X1[r + e] += xm[r + e];
      }
    }
    const R *XL = a.X + (size_t)NL * NE;
    for (int n = 0; n < N; n++)
      if (valid[n])
        SFX(dt_ln)(XL + (size_t)n * E, E, p + L->lnf_w, p + L->lnf_b, a.xf + (size_t)n * E, a.xhf + (size_t)n * E,
                   &a.rf[n]);
    /* the logits at each real step's state token, and the loss; with grad,
     * d loss / d z = (softmax - onehot) / (D nreal) back into dxf (a.dh) */
    if (grad) memset(a.dh, 0, sizeof(R) * NE);
    for (int t = 0; t < K; t++) {
      if (!mk[t]) continue;
      const size_t rs = (size_t)(3 * t + 1) * E;
      R *zt = a.z + (size_t)t * A;
      const int32_t act = bt->actions[(size_t)b * K + t];
      double lt = 0;
      for (int d = 0, off = 0; d < D; off += L->n[d], d++) {
        const int nd = L->n[d], ad = (act / L->radix_after[d]) % nd;
        SFX(dt_lin)(p + L->head_w[d], p + L->head_b[d], a.xf + rs, E, nd, zt + off);
        R mx = zt[off];
        for (int c = 1; c < nd; c++) mx = zt[off + c] > mx ? zt[off + c] : mx;
        R se = 0;
        for (int c = 0; c < nd; c++) se += EXP(zt[off + c] - mx);
        const R lse = mx + LOG(se);
        lt += (double)(lse - zt[off + ad]);
        if (!grad) continue;
        for (int c = 0; c < nd; c++)
          a.dz[off + c] = (EXP(zt[off + c] - lse) - (c == ad ? (R)1 : (R)0)) * inv_real / (R)D;
        SFX(dt_lin_bwd)(p + L->head_w[d], a.xf + rs, a.dz + off, E, nd, a.dh + rs, grad + L->head_w[d],
                        grad + L->head_b[d]);
      }
      lt /= D;
      loss += lt;
      if (loss_step) loss_step[(size_t)b * K + t] = (R)lt;
      if (logits) memcpy(logits + ((size_t)b * K + t) * A, zt, sizeof(R) * A);
    }
    if (!grad) continue;
    /* LN_f */
    memset(a.dX, 0, sizeof(R) * NE);
    for (int n = 0; n < N; n++)
      if (valid[n])
        SFX(dt_ln_bwd)(a.dh + (size_t)n * E, a.xhf + (size_t)n * E, a.rf[n], p + L->lnf_w, E, a.dX + (size_t)n * E,
                       grad + L->lnf_w, grad + L->lnf_b);
    /* the blocks, last first: a.dX holds d loss / d X[l + 1] */
    for (int l = NL - 1; l >= 0; l--) {
      const dt_block_off_t *o = &L->blk[l];
      const R *h1 = a.h1 + l * NE, *q = a.q + l * NE, *k = a.k + l * NE, *v = a.v + l * NE, *P = a.P + l * NN;
      const R *att = a.att + l * NE, *h2 = a.h2 + l * NE, *u = a.u + l * NF, *gl = a.g + l * NF;
      /* the MLP: X[l+1] = xm + W2 gelu(W1 LN2(xm) + b1) + b2 */
      memcpy(a.dxm, a.dX, sizeof(R) * NE);
      memset(a.dh, 0, sizeof(R) * NE);
      for (int n = 0; n < N; n++) {
        if (!valid[n]) continue;
        const size_t r = (size_t)n * E, rf = (size_t)n * F;
        R *du = a.du + rf;
        memset(du, 0, sizeof(R) * F);
        SFX(dt_lin_bwd)(p + o->m2_w, gl + rf, a.dX + r, F, E, du, grad + o->m2_w, grad + o->m2_b);
        for (int f = 0; f < F; f++) du[f] *= SFX(dt_gelu_d)(u[rf + f]);
        SFX(dt_lin_bwd)(p + o->m1_w, h2 + r, du, E, F, a.dh + r, grad + o->m1_w, grad + o->m1_b);
        SFX(dt_ln_bwd)(a.dh + r, a.xh2 + l * NE + r, a.r2[(size_t)l * N + n], p + o->ln2_w, E, a.dxm + r,
                       grad + o->ln2_w, grad + o->ln2_b);
      }
      /* the attention: xm = X[l] + W_o att + b_o */
      memset(a.datt, 0, sizeof(R) * NE);
      memset(a.dq, 0, sizeof(R) * NE);
      memset(a.dk, 0, sizeof(R) * NE);
      memset(a.dv, 0, sizeof(R) * NE);
      for (int n = 0; n < N; n++)
        if (valid[n])
          SFX(dt_lin_bwd)(p + o->o_w, att + (size_t)n * E, a.dxm + (size_t)n * E, E, E, a.datt + (size_t)n * E,
                          grad + o->o_w, grad + o->o_b);
      for (int hd = 0; hd < nh; hd++)
        for (int i = 0; i < N; i++) {
          if (!valid[i]) continue;
          const R *Pi = P + ((size_t)hd * N + i) * N, *dai = a.datt + (size_t)i * E + hd * dh;
          const R *qi = q + (size_t)i * E + hd * dh;
          R *dP = a.dP, dot = 0;
          for (int j = 0; j <= i; j++) {
            if (!valid[j]) continue;
            const R *vj = v + (size_t)j * E + hd * dh;
            R s = 0;
            for (int c = 0; c < dh; c++) s += dai[c] * vj[c];
            dP[j] = s;
            dot += Pi[j] * s;
            R *dvj = a.dv + (size_t)j * E + hd * dh;
            for (int c = 0; c < dh; c++) dvj[c] += Pi[j] * dai[c];
          }
          R *dqi = a.dq + (size_t)i * E + hd * dh;
          for (int j = 0; j <= i; j++) {
            if (!valid[j]) continue;
            const R ds = Pi[j] * (dP[j] - dot) * scale;
            const R *kj = k + (size_t)j * E + hd * dh;
            R *dkj = a.dk + (size_t)j * E + hd * dh;
            for (int c = 0; c < dh; c++) dqi[c] += ds * kj[c], dkj[c] += ds * qi[c];
          }
        }
      /* q, k, v = W LN1(X[l]) + b; X[l]'s gradient: the residual's plus LN1's */
      memcpy(a.dX, a.dxm, sizeof(R) * NE);
      memset(a.dh, 0, sizeof(R) * NE);
      for (int n = 0; n < N; n++) {
        if (!valid[n]) continue;
        const size_t r = (size_t)n * E;
        SFX(dt_lin_bwd)(p + o->q_w, h1 + r, a.dq + r, E, E, a.dh + r, grad + o->q_w, grad + o->q_b);
        SFX(dt_lin_bwd)(p + o->k_w, h1 + r, a.dk + r, E, E, a.dh + r, grad + o->k_w, grad + o->k_b);
        SFX(dt_lin_bwd)(p + o->v_w, h1 + r, a.dv + r, E, E, a.dh + r, grad + o->v_w, grad + o->v_b);
        SFX(dt_ln_bwd)(a.dh + r, a.xh1 + l * NE + r, a.r1[(size_t)l * N + n], p + o->ln1_w, E, a.dX + r,
                       grad + o->ln1_w, grad + o->ln1_b);
      }
    }
    /* LN_embed, then the embeddings */
    memset(a.dx0, 0, sizeof(R) * NE);
    for (int n = 0; n < N; n++)
      if (valid[n])
        SFX(dt_ln_bwd)(a.dX + (size_t)n * E, a.xh0 + (size_t)n * E, a.r0[n], p + L->lne_w, E, a.dx0 + (size_t)n * E,
                       grad + L->lne_w, grad + L->lne_b);
    for (int t = 0; t < K; t++) {
      if (!mk[t]) continue;
      int tm = bt->timesteps[(size_t)b * K + t];
      tm = tm < 0 ? 0 : tm >= L->T ? L->T - 1 : tm;
      const R rt = (R)bt->rtg[(size_t)b * K + t];
      const R *dr = a.dx0 + (size_t)(3 * t) * E, *ds = dr + E, *da = ds + E;
      const float *st = bt->states + ((size_t)b * K + t) * S;
      for (int e = 0; e < E; e++) {
        R *gw = grad + L->st_w + (size_t)e * S;
        for (int i = 0; i < S; i++) gw[i] += ds[e] * (R)st[i];
        grad[L->st_b + e] += ds[e];
      }
      const int32_t act = bt->actions[(size_t)b * K + t];
      R *gt = grad + L->time + (size_t)tm * E;
      for (int e = 0; e < E; e++) {
        grad[L->rtg_w + e] += dr[e] * rt;
        grad[L->rtg_b + e] += dr[e];
        gt[e] += (dr[e] + ds[e]) + da[e];
        for (int d = 0; d < D; d++) grad[L->act_emb[d] + (size_t)((act / L->radix_after[d]) % L->n[d]) * E + e] += da[e];
      }
    }
  }
  free(mem), free(valid);
  return loss / (double)nreal;
}
