/*
 * attn_impl.h — the attention block of docs/learner.md §7 between the trunk
 * output h and every head, forward and exact backward. Part of the
 * dqn_math_impl.h template (R, SFX, TY, GEMM, EXP, SQRT, HOT from the
 * including instance); built on linear_impl.h's nn.Linear.
 *
 * Per row (sample), T tokens of width d = H2 / T, n_h heads of width
 * d_h = d / n_h (post-LN, in the seed's order):
 *   x_t = h[t d : (t+1) d] + pos[t]
 *   q_t, k_t, v_t = W_{q,k,v} x_t + b_{q,k,v}
 *   alpha^j_ts = softmax_s(q^j_t . k^j_s / sqrt(d_h))      (no mask, own row only)
 *   o_t = concat_j sum_s alpha^j_ts v^j_s;  u_t = W_o o_t + b_o
 *   e_t = x_t + u_t;  y_t = gamma (e_t - mean) / sqrt(var + 1e-5) + beta  (biased var)
 *   h' = concat_t y_t  (the heads' input, A->hh)
 *
 * Shapes (row-major; token rows n = rows * T, a [rows, H2] buffer is the
 * same memory as [n, d]): tx, tq, tk, tv, to [n, d]; tu [n, d] holds e;
 * xhat [n, d] the normalised e; hatt [n, d] = h'; alpha [rows, n_h, T, T];
 * rstd [n] = 1 / sqrt(var + 1e-5).
 *
 * Gradient rules (attn_backward): every attention parameter gradient (pos,
 * q/k/v/o weight and bias, ln weight and bias) is overwritten once per call;
 * dtk and dtv accumulate over the query tokens (zeroed first), dtq is
 * written per query token; dtx, the gradient of x (and of h: x = h + pos),
 * starts as the residual's de and accumulates the q, k and v inputs'
 * gradients (GEMM beta = 1). The pos gradient is dtx summed over rows.
 */
/* -------------------------------------------------------------- buffers */

/* R elements the attention activations of `rows` rows take (0 when off) */
static size_t SFX(attn_acts_need)(const net_layout_t *L, size_t rows) {
  const net_attn_t *at = &L->attn;
  if (!at->T) return 0;
  return rows * (8 * (size_t)L->H2 + (size_t)at->nh * at->T * at->T + (size_t)at->T);
}

static R *SFX(attn_acts_place)(TY(net_acts) *A, const net_layout_t *L, size_t rows, R *p) {
  const net_attn_t *at = &L->attn;
  if (!at->T) return p;
  size_t w = rows * L->H2;
  A->tx = p; p += w;
  A->tq = p; p += w;
  A->tk = p; p += w;
  A->tv = p; p += w;
  A->to = p; p += w;
  A->tu = p; p += w;
  A->xhat = p; p += w;
  A->hatt = p; p += w;
  A->alpha = p; p += rows * (size_t)at->nh * at->T * at->T;
  A->rstd = p; p += rows * (size_t)at->T;
  return p;
}

/* R elements of the backward's workspace for a batch of B (0 when off) */
static size_t SFX(attn_ws_need)(const net_layout_t *L, size_t B) {
  return L->attn.T ? 6 * B * L->H2 + (size_t)L->attn.T : 0;
}

static R *SFX(attn_ws_place)(TY(dqn_ws) *ws, const net_layout_t *L, size_t B, R *p) {
  if (!L->attn.T) return p;
  size_t w = B * L->H2;
  ws->dtx = p; p += w;
  ws->dtq = p; p += w;
  ws->dtk = p; p += w;
  ws->dtv = p; p += w;
  ws->dto = p; p += w;
  ws->dte = p; p += w;
  ws->datt = p; p += L->attn.T;
  return p;
}

/* --------------------------------------------------------------- forward */

/* h [rows, H2] -> A->hatt [rows, H2] (and A->hh = A->hatt); P: the parameter vector */
HOT static void SFX(attn_forward)(const net_layout_t *L, const R *P, const R *h, int rows, int rows_exact,
                                  TY(net_acts) *A) {
  const net_attn_t *at = &L->attn;
  const int T = at->T, nh = at->nh, d = at->d, dh = d / nh, H2 = L->H2, n = rows * T;
  const R *pos = P + at->off_pos;
  for (int r = 0; r < rows; r++)
    for (int k = 0; k < H2; k++) A->tx[(size_t)r * H2 + k] = h[(size_t)r * H2 + k] + pos[k];
  R *proj[3] = {A->tq, A->tk, A->tv};
  for (int m = 0; m < 3; m++)
    SFX(linear_forward)(A->tx, P + at->off_w[m], P + at->off_b[m], proj[m], NULL, 0, n, d, d, rows_exact);
  const R scale = 1 / SQRT((R)dh);
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < nh; j++)
      for (int t = 0; t < T; t++) {
        R *al = A->alpha + (((size_t)r * nh + j) * T + t) * T;
        const R *qt = A->tq + ((size_t)r * T + t) * d + j * dh;
        R mx = -INFINITY;
        for (int s = 0; s < T; s++) {
          const R *ks = A->tk + ((size_t)r * T + s) * d + j * dh;
          R dot = 0;
          for (int c = 0; c < dh; c++) dot += qt[c] * ks[c];
          al[s] = dot * scale;
          mx = al[s] > mx ? al[s] : mx;
        }
        R sum = 0;
        for (int s = 0; s < T; s++) al[s] = EXP(al[s] - mx);
        for (int s = 0; s < T; s++) sum += al[s];
        for (int s = 0; s < T; s++) al[s] /= sum;
        R *ot = A->to + ((size_t)r * T + t) * d + j * dh;
        for (int c = 0; c < dh; c++) ot[c] = 0;
        for (int s = 0; s < T; s++) {
          const R *vs = A->tv + ((size_t)r * T + s) * d + j * dh;
          for (int c = 0; c < dh; c++) ot[c] += al[s] * vs[c];
        }
      }
  SFX(linear_forward)(A->to, P + at->off_w[NET_ATTN_O], P + at->off_b[NET_ATTN_O], A->tu, NULL, 0, n, d, d, rows_exact);
  const R *gam = P + at->off_ln_w, *bet = P + at->off_ln_b;
  for (int i = 0; i < n; i++) {
    R *e = A->tu + (size_t)i * d, *xh = A->xhat + (size_t)i * d, *y = A->hatt + (size_t)i * d;
    const R *x = A->tx + (size_t)i * d;
    R mean = 0, var = 0;
    for (int c = 0; c < d; c++) {
      e[c] += x[c]; /* e = x + u */
      mean += e[c];
    }
    mean /= d;
    for (int c = 0; c < d; c++) var += (e[c] - mean) * (e[c] - mean);
    var /= d;
    R rs = 1 / SQRT(var + (R)1e-5);
    A->rstd[i] = rs;
    for (int c = 0; c < d; c++) {
      xh[c] = (e[c] - mean) * rs;
      y[c] = gam[c] * xh[c] + bet[c];
    }
  }
  A->hh = A->hatt;
}

/* -------------------------------------------------------------- backward */

/* dy [B, H2] = dL/dh' of the first B rows of A -> ws->dtx [B, H2] = dL/dh;
 * the attention parameters' gradients into grad (overwritten). */
static void SFX(attn_backward)(const net_layout_t *L, const R *P, const TY(net_acts) *A, int B, const R *dy,
                               TY(dqn_ws) *ws, R *grad) {
  const net_attn_t *at = &L->attn;
  const int T = at->T, nh = at->nh, d = at->d, dh = d / nh, H2 = L->H2, n = B * T;
  const R *gam = P + at->off_ln_w;
  R *dgam = grad + at->off_ln_w, *dbet = grad + at->off_ln_b;
  for (int c = 0; c < d; c++) dgam[c] = dbet[c] = 0;
  /* LayerNorm: dxhat = dy gamma; de = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) */
  for (int i = 0; i < n; i++) {
    const R *g = dy + (size_t)i * d, *xh = A->xhat + (size_t)i * d;
    R *de = ws->dte + (size_t)i * d;
    R m1 = 0, m2 = 0;
    for (int c = 0; c < d; c++) {
      dgam[c] += g[c] * xh[c];
      dbet[c] += g[c];
      R gx = g[c] * gam[c];
      de[c] = gx;
      m1 += gx;
      m2 += gx * xh[c];
    }
    m1 /= d;
    m2 /= d;
    R rs = A->rstd[i];
    for (int c = 0; c < d; c++) de[c] = rs * (de[c] - m1 - xh[c] * m2);
  }
  /* e = x + u: the residual gives x its de; u = W_o o + b_o */
  memcpy(ws->dtx, ws->dte, sizeof(R) * (size_t)n * d);
  SFX(linear_backward)(ws->dte, A->to, P + at->off_w[NET_ATTN_O], ws->dto, 0, grad + at->off_w[NET_ATTN_O],
                       grad + at->off_b[NET_ATTN_O], n, d, d);
  /* o_t = sum_s alpha_ts v_s: dalpha_ts = do_t . v_s, dv_s += alpha_ts do_t;
   * softmax: dscore_ts = alpha_ts (dalpha_ts - sum_s' alpha_ts' dalpha_ts') / sqrt(d_h);
   * dq_t = sum_s dscore_ts k_s, dk_s += dscore_ts q_t */
  memset(ws->dtk, 0, sizeof(R) * (size_t)n * d);
  memset(ws->dtv, 0, sizeof(R) * (size_t)n * d);
  const R scale = 1 / SQRT((R)dh);
  R *da = ws->datt;
  for (int r = 0; r < B; r++)
    for (int j = 0; j < nh; j++)
      for (int t = 0; t < T; t++) {
        const R *al = A->alpha + (((size_t)r * nh + j) * T + t) * T;
        size_t tt = ((size_t)r * T + t) * d + (size_t)j * dh;
        const R *dot = ws->dto + tt, *qt = A->tq + tt;
        R *dqt = ws->dtq + tt;
        R sum = 0;
        for (int s = 0; s < T; s++) {
          size_t ss = ((size_t)r * T + s) * d + (size_t)j * dh;
          const R *vs = A->tv + ss;
          R *dvs = ws->dtv + ss;
          R g = 0;
          for (int c = 0; c < dh; c++) {
            g += dot[c] * vs[c];
            dvs[c] += al[s] * dot[c];
          }
          da[s] = g;
          sum += al[s] * g;
        }
        for (int c = 0; c < dh; c++) dqt[c] = 0;
        for (int s = 0; s < T; s++) {
          size_t ss = ((size_t)r * T + s) * d + (size_t)j * dh;
          const R *ks = A->tk + ss;
          R *dks = ws->dtk + ss;
          R gs = al[s] * (da[s] - sum) * scale;
          for (int c = 0; c < dh; c++) {
            dqt[c] += gs * ks[c];
            dks[c] += gs * qt[c];
          }
        }
      }
  /* q, k, v = W x + b: their inputs' gradients accumulate into dx */
  const R *dproj[3] = {ws->dtq, ws->dtk, ws->dtv};
  for (int m = 0; m < 3; m++)
    SFX(linear_backward)(dproj[m], A->tx, P + at->off_w[m], ws->dtx, 1, grad + at->off_w[m], grad + at->off_b[m], n,
                         d, d);
  /* x = h + pos: dh = dx, dpos[t] = sum over rows of dx_t */
  R *dpos = grad + at->off_pos;
  for (int k = 0; k < H2; k++) dpos[k] = 0;
  for (int r = 0; r < B; r++)
    for (int k = 0; k < H2; k++) dpos[k] += ws->dtx[(size_t)r * H2 + k];
}
