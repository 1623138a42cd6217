/*
 * loss_impl.h — the loss and its exact gradient (docs/learner.md §2-4): the C51
 * projection of the Double-DQN target, the cross-entropy per branch, the
 * IS-weighted batch mean, and the backward pass through the heads and the
 * trunk. Part of the dqn_math_impl.h template.
 *
 * Shapes: m [D, B, Z] projected targets; dV [B, Z], dA [B, n_d Z] per branch;
 * grad laid out like the parameters (net_layout.h). Every parameter
 * gradient is overwritten once per call; dh (the gradient of the heads'
 * input: h, or h' with attention on) accumulates over the value head and all
 * branches; attn_impl.h's backward turns dh' into the trunk's dh.
 */
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

/* the values of dqn_ws_alloc's own block (its two net_acts besides) */
static size_t SFX(dqn_ws_block)(const net_layout_t *L, int B) {
  const size_t b = (size_t)B, K = (size_t)(L->K < 1 ? 1 : L->K);
  int nmax = 0;
  for (int d = 0; d < L->D; d++) nmax = L->n[d] > nmax ? L->n[d] : nmax;
  return 2 * b * L->S                          /* x */
         + 2 * (size_t)L->n_params             /* weff_on, weff_tg */
         + K * L->D * b * L->Z                 /* m */
         + K * L->D * b * L->Z                 /* G */
         + 2 * b * K + 2 * b                   /* mask, ce, div, ce_mean */
         + b * L->Z                            /* dV */
         + b * (size_t)nmax * L->Z             /* dA (one branch at a time) */
         + b * (L->VH + L->H2 + L->H1 + L->AH) /* dhv, dh, dh1, dhb */
         + (size_t)L->Z + (size_t)nmax         /* support, q scratch */
         + 4 * b                               /* r, done, w, loss_i */
         + SFX(attn_ws_need)(L, b);            /* attention backward */
}

/* the values dqn_ws_alloc takes for batch B (the learner's memory estimate
 * counts them too; its two int arrays besides, B (1 + K D) int32) */
size_t SFX(dqn_ws_need)(const net_layout_t *L, int B) {
  return SFX(net_acts_need)(L, 2 * B) + SFX(net_acts_need)(L, B) + SFX(dqn_ws_block)(L, B);
}

int SFX(dqn_ws_alloc)(TY(dqn_ws) *ws, const net_layout_t *L, int B) {
  memset(ws, 0, sizeof *ws);
  ws->B = B;
  size_t b = (size_t)B;
  int nmax = 0;
  for (int d = 0; d < L->D; d++) nmax = L->n[d] > nmax ? L->n[d] : nmax;
  if (SFX(net_acts_alloc)(&ws->on, L, 2 * B) || SFX(net_acts_alloc)(&ws->tg, L, B)) goto fail;
  const size_t K = (size_t)(L->K < 1 ? 1 : L->K);
  R *p = calloc(SFX(dqn_ws_block)(L, B), sizeof(R));
  if (!p) goto fail;
  ws->mem = p;
  ws->x = p; p += 2 * b * L->S;
  ws->weff_on = p; p += L->n_params;
  ws->weff_tg = p; p += L->n_params;
  ws->m = p; p += K * L->D * b * L->Z;
  ws->G = p; p += K * L->D * b * L->Z;
  ws->mask = p; p += b * K;
  ws->ce = p; p += b * K;
  ws->div = p; p += b;
  ws->ce_mean = p; p += b;
  for (size_t j = 0; j < b * K; j++) ws->mask[j] = 1;
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
  SFX(attn_ws_place)(ws, L, b, p);
  ws->a = calloc(b, sizeof(int32_t));
  ws->best = calloc(K * L->D * b, sizeof(int32_t));
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

/* The batch is in the workspace: x[0:B] = s, x[B:2B] = s', a, r, done, w
 * (and the bootstrap masks ws->mask [B, K], 1 after alloc).
 * fn_on/fn_tg: transformed noise f(eps) of the online/target nets (NULL: no
 * noise). grad (n_params) receives d(loss)/d(online params) unless NULL.
 * With K head sets (docs/learner.md §8; K = 1 is §4 exactly):
 *   CE^k_i = mean_d CE_d of head k (head k of the online net picks a', head k
 *            of the target net scores it),
 *   D_i    = 1/(K(K-1)) sum_{k != l} mean_d KL(P^k_d || P^l_d) over the online
 *            taken-action distributions (0 when K = 1),
 *   loss_i = (1/K) sum_k m_ik CE^k_i - lambda D_i,
 * and returns the batch loss L = (1/B) sum_i w_i loss_i. Leaves loss_i in
 * ws->loss_i, CE^k_i in ws->ce [B, K], D_i in ws->div, mean_k CE^k_i (the
 * priority's loss) in ws->ce_mean, Double-DQN actions in ws->best [K,D,B],
 * target distributions in ws->m [K,D,B,Z], and the mean over batch, heads and
 * branches of Q^k_d(s, a_d) in *q_mean. */
HOT R SFX(dqn_loss_grad)(const net_layout_t *L, const TY(dqn_hp) *hp, const R *online, const R *target,
                     const R *fn_on, const R *fn_tg, TY(dqn_ws) *ws, R *grad, R *q_mean) {
  const int B = ws->B, Z = L->Z, D = L->D, K = L->K < 1 ? 1 : L->K;
  const size_t b = (size_t)B;
  const R lam = K > 1 ? hp->lambda : 0;
  TY(net_weights) won, wtg;
  for (int z = 0; z < Z; z++) ws->support[z] = hp->v_min + (hp->v_max - hp->v_min) * z / (Z - 1);

  /* forward: online on [s; s'] (2B rows), target on s' (B rows); the fixed
   * priors are shared by both */
  SFX(net_weights)(L, online, fn_on, ws->weff_on, &won);
  SFX(net_weights)(L, target, fn_tg, ws->weff_tg, &wtg);
  SFX(net_weights_priors)(L, hp->prior, hp->prior_scale, &won);
  SFX(net_weights_priors)(L, hp->prior, hp->prior_scale, &wtg);
  SFX(net_forward)(L, &won, ws->x, 2 * B, hp->slope, &ws->on);
  SFX(net_forward)(L, &wtg, ws->x + b * L->S, B, hp->slope, &ws->tg);
  const size_t hs_on = ws->on.hstride, hs_tg = ws->tg.hstride;

  /* target distributions and cross-entropy, per head */
  R loss = 0, qsum = 0;
  int32_t ad[LEARNER_MAX_BRANCHES];
  for (int i = 0; i < B; i++) ws->loss_i[i] = 0;
  for (int i = 0; i < B; i++) {
    net_decode_action(L, ws->a[i], ad);
    R lsum = 0, cesum = 0;
    for (int k = 0; k < K; k++) {
      R cek = 0;
      for (int d = 0; d < D; d++) {
        int n = L->n[d], nz = n * Z;
        const R *lp_on_s = ws->on.logp[d] + k * hs_on + (size_t)i * nz;
        const R *lp_on_s2 = ws->on.logp[d] + k * hs_on + (b + i) * nz;
        const R *lp_tg_s2 = ws->tg.logp[d] + k * hs_tg + (size_t)i * nz;
        /* Double DQN: the online net picks a', the target net scores it */
        SFX(c51_q_values)(hp->double_dqn ? lp_on_s2 : lp_tg_s2, n, Z, ws->support, ws->qtmp);
        int best = SFX(argmax)(ws->qtmp, n);
        size_t kd = (size_t)k * D + d;
        ws->best[kd * b + i] = best;
        R *m = ws->m + (kd * b + i) * Z;
        R p[LEARNER_MAX_ATOMS], tz[LEARNER_MAX_ATOMS];
        R disc = (ws->gdisc ? ws->gdisc[i] : hp->gamma) * (1 - ws->done[i]);
        for (int z = 0; z < Z; z++) {
          p[z] = EXP(lp_tg_s2[best * Z + z]);
          tz[z] = ws->r[i] + disc * ws->support[z];
        }
        SFX(c51_project)(tz, p, Z, hp->v_min, hp->v_max, Z, m);
        const R *lp = lp_on_s + (size_t)ad[d] * Z;
        R ce = 0;
        for (int z = 0; z < Z; z++) ce -= m[z] * lp[z];
        cek += ce / D;
        R qa = 0;
        for (int z = 0; z < Z; z++) qa += EXP(lp[z]) * ws->support[z];
        qsum += qa;
      }
      ws->ce[(size_t)i * K + k] = cek;
      lsum += ws->mask[(size_t)i * K + k] * cek;
      cesum += cek;
    }
    ws->ce_mean[i] = cesum / K;
    ws->loss_i[i] = lsum / K;
    /* diversity: mean over ordered pairs and branches of KL(P^k || P^l) */
    R div = 0;
    for (int d = 0; K > 1 && d < D; d++) {
      int nz = L->n[d] * Z;
      for (int k = 0; k < K; k++)
        for (int l = 0; l < K; l++) {
          if (k == l) continue;
          const R *lk = ws->on.logp[d] + k * hs_on + (size_t)i * nz + (size_t)ad[d] * Z;
          const R *ll = ws->on.logp[d] + l * hs_on + (size_t)i * nz + (size_t)ad[d] * Z;
          R kl = 0;
          for (int z = 0; z < Z; z++) kl += EXP(lk[z]) * (lk[z] - ll[z]);
          div += kl;
        }
    }
    ws->div[i] = K > 1 ? div / ((R)K * (K - 1) * D) : 0;
    if (K > 1) ws->loss_i[i] -= lam * ws->div[i];
    loss += ws->w[i] * ws->loss_i[i];
  }
  loss /= B;
  if (q_mean) *q_mean = qsum / ((R)B * D * K);
  if (!grad) return loss;

  /* backward. G = d(loss)/d(logits) of the taken action a_d, per head and
   * branch. Cross-entropy, with m the target and p = softmax(logits):
   * G_z = c (p_z sum(m) - m_z), c = w_i m_ik / (B D K); the other actions'
   * logits get no gradient from the loss. Diversity, c' = -lambda w_i /
   * (B K(K-1) D), for each ordered pair (k, l) with P = P^k, Q = P^l:
   * dKL/dlogit^k_z = P_z (log P_z - log Q_z - KL), dKL/dlogit^l_z = Q_z - P_z.
   * Through the dueling combine: dV_z = sum_d G_d,z and
   * dA_d[a][z] = [a == a_d] G_d,z - G_d,z / n_d. */
  const R slope = hp->slope;
  const TY(net_acts) *A = &ws->on; /* first B rows: s */
  for (int k = 0; k < K; k++)
    for (int d = 0; d < D; d++) {
      int nz = L->n[d] * Z;
      for (int i = 0; i < B; i++) {
        net_decode_action(L, ws->a[i], ad);
        const R *lp = A->logp[d] + k * hs_on + (size_t)i * nz + (size_t)ad[d] * Z;
        const R *m = ws->m + (((size_t)k * D + d) * b + i) * Z;
        R *G = ws->G + (((size_t)k * D + d) * b + i) * Z;
        R c = ws->w[i] * ws->mask[(size_t)i * K + k] / ((R)B * D * K), msum = 0;
        for (int z = 0; z < Z; z++) msum += m[z];
        for (int z = 0; z < Z; z++) G[z] = c * (EXP(lp[z]) * msum - m[z]);
      }
    }
  if (K > 1 && lam != 0) {
    for (int i = 0; i < B; i++) {
      net_decode_action(L, ws->a[i], ad);
      R cd = -lam * ws->w[i] / ((R)B * K * (K - 1) * D);
      for (int d = 0; d < D; d++) {
        int nz = L->n[d] * Z;
        for (int k = 0; k < K; k++)
          for (int l = 0; l < K; l++) {
            if (k == l) continue;
            const R *lk = A->logp[d] + k * hs_on + (size_t)i * nz + (size_t)ad[d] * Z;
            const R *ll = A->logp[d] + l * hs_on + (size_t)i * nz + (size_t)ad[d] * Z;
            R *Gk = ws->G + (((size_t)k * D + d) * b + i) * Z, *Gl = ws->G + (((size_t)l * D + d) * b + i) * Z;
            R P[LEARNER_MAX_ATOMS], kl = 0;
            for (int z = 0; z < Z; z++) {
              P[z] = EXP(lk[z]);
              kl += P[z] * (lk[z] - ll[z]);
            }
            for (int z = 0; z < Z; z++) {
              Gk[z] += cd * (P[z] * (lk[z] - ll[z] - kl));
              Gl[z] += cd * (EXP(ll[z]) - P[z]);
            }
          }
      }
    }
  }
  /* The fixed prior heads read h' too: their parameters get no gradient, but
   * beta_p x the logits' gradient flows through them into h' (recomputed
   * forward on the s rows for their pre-activations, in the prior scratch). */
  TY(net_acts) *Am = &ws->on;
  for (int k = 0; k < K; k++) {
    const int prior = won.pW[NET_HEAD_LAYER(L, k, 0)] != NULL && Am->pscr != NULL;
    const R beta = won.prior_scale;
    if (prior) {
      const int pv1 = NET_HEAD_LAYER(L, k, 0);
      SFX(linear_forward)(A->hh, won.pW[pv1], won.pb[pv1], PRIORX(Am, Am->av), PRIORX(Am, Am->hv), slope, B, L->H2,
                          L->VH, 0);
      for (int d = 0; d < D; d++) {
        const int p1 = NET_HEAD_LAYER(L, k, 2 + 2 * d);
        SFX(linear_forward)(A->hh, won.pW[p1], won.pb[p1], PRIORX(Am, Am->ab[d]), PRIORX(Am, Am->hb[d]), slope, B,
                            L->H2, L->AH, 0);
      }
    }
    memset(ws->dV, 0, sizeof(R) * b * Z);
    for (int d = 0; d < D; d++) {
      int n = L->n[d], nz = n * Z;
      const net_layer_t *l1 = &L->layer[NET_HEAD_LAYER(L, k, 2 + 2 * d)];
      const net_layer_t *l2 = &L->layer[NET_HEAD_LAYER(L, k, 3 + 2 * d)];
      for (int i = 0; i < B; i++) {
        net_decode_action(L, ws->a[i], ad);
        const R *G = ws->G + (((size_t)k * D + d) * b + i) * Z;
        R *dA = ws->dA + (size_t)i * nz;
        for (int z = 0; z < Z; z++) {
          R g = G[z];
          ws->dV[(size_t)i * Z + z] += g;
          for (int a = 0; a < n; a++) dA[a * Z + z] = (a == ad[d] ? g : 0) - g / n;
        }
      }
      SFX(linear_backward)(ws->dA, A->hb[d] + k * hs_on, won.W[NET_HEAD_LAYER(L, k, 3 + 2 * d)], ws->dhb, 0,
                           grad + l2->off_w, grad + l2->off_b, B, L->AH, nz);
      SFX(lrelu_backward)(ws->dhb, A->ab[d] + k * hs_on, b * L->AH, slope);
      SFX(linear_backward)(ws->dhb, A->hh, won.W[NET_HEAD_LAYER(L, k, 2 + 2 * d)], ws->dh, k > 0 || d > 0,
                           grad + l1->off_w, grad + l1->off_b, B, L->H2, L->AH);
      if (prior) {
        memset(ws->dhb, 0, sizeof(R) * b * L->AH);
        SFX(linear_backward_dx)(ws->dA, won.pW[NET_HEAD_LAYER(L, k, 3 + 2 * d)], ws->dhb, beta, B, L->AH, nz);
        SFX(lrelu_backward)(ws->dhb, PRIORX(Am, Am->ab[d]), b * L->AH, slope);
        SFX(linear_backward_dx)(ws->dhb, won.pW[NET_HEAD_LAYER(L, k, 2 + 2 * d)], ws->dh, 1, B, L->H2, L->AH);
      }
    }
    const net_layer_t *v1 = &L->layer[NET_HEAD_LAYER(L, k, 0)], *v2 = &L->layer[NET_HEAD_LAYER(L, k, 1)];
    SFX(linear_backward)(ws->dV, A->hv + k * hs_on, won.W[NET_HEAD_LAYER(L, k, 1)], ws->dhv, 0, grad + v2->off_w,
                         grad + v2->off_b, B, L->VH, Z);
    SFX(lrelu_backward)(ws->dhv, A->av + k * hs_on, b * L->VH, slope);
    SFX(linear_backward)(ws->dhv, A->hh, won.W[NET_HEAD_LAYER(L, k, 0)], ws->dh, 1, grad + v1->off_w,
                         grad + v1->off_b, B, L->H2, L->VH);
    if (prior) {
      memset(ws->dhv, 0, sizeof(R) * b * L->VH);
      SFX(linear_backward_dx)(ws->dV, won.pW[NET_HEAD_LAYER(L, k, 1)], ws->dhv, beta, B, L->VH, Z);
      SFX(lrelu_backward)(ws->dhv, PRIORX(Am, Am->av), b * L->VH, slope);
      SFX(linear_backward_dx)(ws->dhv, won.pW[NET_HEAD_LAYER(L, k, 0)], ws->dh, 1, B, L->H2, L->VH);
    }
  }
  /* attention (when on): dh' -> dh, and its parameters' gradients */
  R *dh = ws->dh;
  if (L->attn.T) {
    SFX(attn_backward)(L, online, A, B, ws->dh, ws, grad);
    dh = ws->dtx;
  }
  const net_layer_t *t1 = &L->layer[NET_TRUNK1], *t2 = &L->layer[NET_TRUNK2];
  SFX(lrelu_backward)(dh, A->a2, b * L->H2, slope);
  SFX(linear_backward)(dh, A->h1, won.W[NET_TRUNK2], ws->dh1, 0, grad + t2->off_w, grad + t2->off_b, B,
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
