/*
 * test-registry.c — the parameter registry (kernels/model.h) against the
 * golden cases made by PyTorch (tests/golden/): for every case, each
 * parameter file (online.*, prior{k}.*, param.dt.*) names a registry entry of
 * the same shape in the right vector, and each registry entry has its file —
 * including the modules whose math lands later (attention, ensemble heads
 * and priors, the Decision Transformer). The registry's offsets tile each
 * vector exactly, and the plain network's layer view (net_layout.h) keeps
 * the order the kernels index.
 */
#include <check.h>
#include <dirent.h>
#include <jansson.h>
#include <string.h>

#include "model.h"
#include "net_layout.h"
#include "npy.h"
#include "testutil.h"

static char gdir[1024];

static int ival(json_t *j, const char *k, int def) {
  json_t *v = json_object_get(j, k);
  return v ? (int)json_integer_value(v) : def;
}

static void desc_of(const char *cs, model_desc_t *d) {
  char path[1200];
  snprintf(path, sizeof path, "%s/%s/config.json", gdir, cs);
  json_error_t je;
  json_t *j = json_load_file(path, 0, &je);
  ck_assert_msg(j != NULL, "%s: %s", path, je.text);
  memset(d, 0, sizeof *d);
  d->S = ival(j, "state_dim", 0);
  json_t *tr = json_object_get(j, "trunk");
  d->H1 = tr ? (int)json_integer_value(json_array_get(tr, 0)) : 4;
  d->H2 = tr ? (int)json_integer_value(json_array_get(tr, 1)) : 4;
  d->VH = ival(j, "value_hidden", 4);
  d->AH = ival(j, "adv_hidden", 4);
  d->Z = ival(j, "atoms", 2);
  json_t *br = json_object_get(j, "branches");
  d->D = (int)json_array_size(br);
  for (int k = 0; k < d->D; k++) d->n[k] = (int)json_integer_value(json_array_get(br, (size_t)k));
  d->noisy = json_is_true(json_object_get(j, "noisy"));
  d->attn_tokens = ival(j, "attn_tokens", 0);
  d->attn_heads = ival(j, "attn_heads", 0);
  d->ensemble_k = ival(j, "ensemble_k", 1);
  d->priors = json_number_value(json_object_get(j, "ensemble_prior_scale")) > 0;
  d->dt_layers = ival(j, "dt_layers", 0);
  d->dt_embed = ival(j, "dt_embed", 0);
  d->dt_max_ep_len = ival(j, "dt_max_ep_len", 0);
  json_decref(j);
}

/* "online.x.npy" -> vector NET, "x"; "prior0.x.npy" -> PRIOR, "prior0.x";
 * "param.dt.x.npy" -> DT, "dt.x"; else -1 */
static int classify(const char *file, char *name, size_t n) {
  size_t len = strlen(file);
  if (len < 5 || strcmp(file + len - 4, ".npy")) return -1;
  len -= 4;
  if (!strncmp(file, "online.", 7)) return snprintf(name, n, "%.*s", (int)(len - 7), file + 7), MODEL_VEC_NET;
  if (!strncmp(file, "prior", 5)) return snprintf(name, n, "%.*s", (int)len, file), MODEL_VEC_PRIOR;
  if (!strncmp(file, "param.dt.", 9)) return snprintf(name, n, "%.*s", (int)(len - 6), file + 6), MODEL_VEC_DT;
  return -1;
}

static void check_case(const char *cs, int want_files) {
  model_desc_t d;
  desc_of(cs, &d);
  static model_t m;
  char err[256];
  ck_assert_msg(model_build(&m, &d, err, sizeof err) == 0, "%s: %s", cs, err);
  int seen[MODEL_MAX_PARAMS] = {0}, files = 0;
  char dir[1200];
  snprintf(dir, sizeof dir, "%s/%s", gdir, cs);
  DIR *dd = opendir(dir);
  ck_assert_ptr_nonnull(dd);
  struct dirent *e;
  while ((e = readdir(dd))) {
    char name[128];
    int vec = classify(e->d_name, name, sizeof name);
    if (vec < 0) continue;
    const model_param_t *p = model_find(&m, name);
    ck_assert_msg(p != NULL, "%s: %s is not in the registry", cs, e->d_name);
    ck_assert_msg((int)p->vec == vec, "%s: %s is in vector %d, the file says %d", cs, name, p->vec, vec);
    char path[1500];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    npy_array_t a;
    ck_assert_msg(npy_read(path, &a, err, sizeof err) == 0, "%s", err);
    int ok = p->cols ? (a.ndim == 2 && a.shape[0] == p->rows && a.shape[1] == p->cols)
                     : (a.ndim == 1 && a.shape[0] == p->rows);
    ck_assert_msg(ok, "%s: %s: file shape [%lld%s%lld], registry [%d, %d]", cs, name, (long long)a.shape[0],
                  a.ndim > 1 ? ", " : "", a.ndim > 1 ? (long long)a.shape[1] : 0LL, p->rows, p->cols);
    npy_free(&a);
    seen[p - m.p] = 1;
    files++;
  }
  closedir(dd);
  /* every registry entry has its file (the DQN part of the dt case is not in it) */
  for (int i = 0; i < m.n; i++)
    if (!(d.dt_layers && m.p[i].vec != MODEL_VEC_DT))
      ck_assert_msg(seen[i], "%s: registry entry %s has no file", cs, m.p[i].name);
  ck_assert_int_eq(files, want_files);
  /* offsets tile each vector: contiguous, no gaps, no overlap */
  int64_t next[MODEL_NVEC] = {0};
  for (int i = 0; i < m.n; i++) {
    ck_assert_msg(m.p[i].offset == next[m.p[i].vec], "%s: %s at %lld, expected %lld", cs, m.p[i].name,
                  (long long)m.p[i].offset, (long long)next[m.p[i].vec]);
    next[m.p[i].vec] += model_param_count(&m.p[i]);
    ck_assert_int_eq(m.p[i].trained, m.p[i].vec != MODEL_VEC_PRIOR);
  }
  for (int v = 0; v < MODEL_NVEC; v++) ck_assert_int_eq(next[v], m.size[v]);
  printf("%s: %d registry entries, %d files, vectors %lld / %lld / %lld floats\n", cs, m.n, files,
         (long long)m.size[0], (long long)m.size[1], (long long)m.size[2]);
}

/* the file counts are the golden README's: each case's parameters, nothing else */
START_TEST(test_small) { check_case("small", 16); }
END_TEST
START_TEST(test_noisy) { check_case("noisy", 16 + 12); } /* six noisy head layers, two sigmas each */
END_TEST
START_TEST(test_attn) { check_case("attn", 16 + 11); }
END_TEST
START_TEST(test_ens) { check_case("ens", 4 + 3 * 12); }
END_TEST
START_TEST(test_all) { check_case("all", 4 + 11 + 2 * 12 + 2 * 12); }
END_TEST
START_TEST(test_dt) { check_case("dt", 47); }
END_TEST

/* the plain network's layer view keeps the registry's order and offsets */
START_TEST(test_layer_view) {
  learner_config_t c;
  learner_config_default(&c);
  c.noisy = 1;
  net_layout_t L;
  net_layout_init(&L, &c);
  model_desc_t d;
  model_desc_from_config(&d, &c);
  static model_t m;
  ck_assert_int_eq(model_build(&m, &d, NULL, 0), 0);
  ck_assert_int_eq(L.n_layers, 4 + 2 * c.n_branches);
  ck_assert_int_eq(L.n_params, m.size[MODEL_VEC_NET]);
  static const char *order[] = {"trunk1", "trunk2", "value1", "value2", "branch0_1", "branch0_2"};
  for (int i = 0; i < 6; i++) ck_assert_str_eq(L.layer[i].name, order[i]);
  int64_t noise = 0;
  for (int li = 0; li < L.n_layers; li++) {
    const net_layer_t *l = &L.layer[li];
    char nm[64];
    snprintf(nm, sizeof nm, "%s.weight", l->name);
    const model_param_t *w = model_find(&m, nm);
    ck_assert_ptr_nonnull(w);
    ck_assert(w->offset == l->off_w && w->rows == l->out && w->cols == l->in);
    ck_assert_int_eq(l->noisy, li >= 2);
    if (l->noisy) {
      snprintf(nm, sizeof nm, "%s.sigma_bias", l->name);
      ck_assert_int_eq(model_find(&m, nm)->offset, l->off_sb);
      ck_assert_int_eq(l->noise_off, noise);
      noise += l->in + l->out;
    }
  }
  ck_assert_int_eq(L.n_noise, noise);
  /* a size that does not divide is refused, naming the module */
  d.attn_tokens = 3, d.attn_heads = 2; /* 256 / 3 */
  char err[256];
  ck_assert_int_eq(model_build(&m, &d, err, sizeof err), LEARNER_EINVAL);
  ck_assert(strstr(err, "attn_tokens"));
}
END_TEST

int main(void) {
  snprintf(gdir, sizeof gdir, "%s", tu_golden_dir());
  Suite *s = suite_create("registry");
  TCase *tc = tcase_create("registry");
  tcase_add_test(tc, test_small);
  tcase_add_test(tc, test_noisy);
  tcase_add_test(tc, test_attn);
  tcase_add_test(tc, test_ens);
  tcase_add_test(tc, test_all);
  tcase_add_test(tc, test_dt);
  tcase_add_test(tc, test_layer_view);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
