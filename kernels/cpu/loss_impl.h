/*
 * loss_impl.h — the loss and its exact gradient (DESIGN.md §2): the C51
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
                + 4 * b                            /* r, done, w, loss_i */
                + SFX(attn_ws_need)(L, b);         /* attention backward */
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
  SFX(attn_ws_place)(ws, L, b, p);
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
    SFX(linear_backward)(ws->dhb, A->hh, won.W[NET_BRANCH(d, 1)], ws->dh, d > 0, grad + l1->off_w,
                         grad + l1->off_b, B, L->H2, L->AH);
  }
  const net_layer_t *v1 = &L->layer[NET_VALUE1], *v2 = &L->layer[NET_VALUE2];
  SFX(linear_backward)(ws->dV, A->hv, won.W[NET_VALUE2], ws->dhv, 0, grad + v2->off_w, grad + v2->off_b, B,
                       L->VH, Z);
  SFX(lrelu_backward)(ws->dhv, A->av, b * L->VH, slope);
  SFX(linear_backward)(ws->dhv, A->hh, won.W[NET_VALUE1], ws->dh, 1, grad + v1->off_w, grad + v1->off_b, B,
                       L->H2, L->VH);
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
