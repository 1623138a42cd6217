/* net_layout.c — see net_layout.h. */
#include "net_layout.h"

#include <stdio.h>
#include <string.h>

static void add_layer(net_layout_t *L, const char *name, int in, int out, int noisy, int64_t *off,
                      int64_t *noff) {
  net_layer_t *l = &L->layer[L->n_layers++];
  snprintf(l->name, sizeof l->name, "%s", name);
  l->in = in;
  l->out = out;
  l->noisy = noisy;
  l->off_w = *off;
  *off += (int64_t)in * out;
  l->off_b = *off;
  *off += out;
  l->off_sw = l->off_sb = l->noise_off = -1;
  if (noisy) {
    l->off_sw = *off;
    *off += (int64_t)in * out;
    l->off_sb = *off;
    *off += out;
    l->noise_off = *noff;
    *noff += in + out;
  }
}

void net_layout_init(net_layout_t *L, const learner_config_t *c) {
  memset(L, 0, sizeof *L);
  L->S = c->state_dim;
  L->H1 = c->trunk_h1;
  L->H2 = c->trunk_h2;
  L->VH = c->value_hidden;
  L->AH = c->adv_hidden;
  L->Z = c->atoms;
  L->D = c->n_branches;
  int64_t off = 0, noff = 0;
  int noisy = c->noisy != 0;
  add_layer(L, "trunk1", L->S, L->H1, 0, &off, &noff);
  add_layer(L, "trunk2", L->H1, L->H2, 0, &off, &noff);
  add_layer(L, "value1", L->H2, L->VH, noisy, &off, &noff);
  add_layer(L, "value2", L->VH, L->Z, noisy, &off, &noff);
  for (int d = 0; d < L->D; d++) {
    char nm[32];
    L->n[d] = c->branch_sizes[d];
    L->q_width += L->n[d];
    L->a_width += L->n[d] * L->Z;
    snprintf(nm, sizeof nm, "branch%d_1", d);
    add_layer(L, nm, L->H2, L->AH, noisy, &off, &noff);
    snprintf(nm, sizeof nm, "branch%d_2", d);
    add_layer(L, nm, L->AH, L->n[d] * L->Z, noisy, &off, &noff);
  }
  L->n_params = off;
  L->n_noise = noff;
}

int net_layout_find(const net_layout_t *L, const char *name) {
  for (int i = 0; i < L->n_layers; i++)
    if (strcmp(L->layer[i].name, name) == 0) return i;
  return -1;
}

void net_decode_action(const net_layout_t *L, int32_t a, int32_t *per_branch) {
  for (int d = L->D - 1; d >= 0; d--) {
    per_branch[d] = a % L->n[d];
    a /= L->n[d];
  }
}
