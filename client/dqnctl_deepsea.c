/*
 * dqnctl_deepsea.c — `dqnctl demo --env deepsea`: bsuite's deep sea
 * (client/deepsea_env.h) played against a new trainer on the daemon. Each
 * episode acts with the trainer (ensemble heads: by its act_select, naming
 * the episode, so thompson follows one head all episode long; fresh NoisyNet
 * noise when it has NoisyNet layers; else epsilon-greedy decaying from 1 to
 * 0.05 over the first half of the episodes), submits the episode's transitions, and trains; every 100
 * episodes it prints the share that reached the reward and the mean return.
 * Deep sea is the test of deep exploration: a single head without noise
 * rarely finds the reward at N = 20; the ensemble heads of DESIGN.md §6.2
 * are what should.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deepsea_env.h"
#include "dqnctl.h"
#include "philox.h"

#define STREAM_DEEPSEA_EPS 41

int demo_deepsea(ctx_t *x, const cli_args_t *a) {
  static const char *cmd = "dqnctl demo";
  long long size = 10, episodes = 1000;
  const char *v;
  if ((v = opt(x, a, "--size")) && cli_int(cmd, "--size", v, 2, DEEPSEA_MAX_N, &size)) return EXIT_USAGE;
  if ((v = opt(x, a, "--episodes")) && cli_int(cmd, "--episodes", v, 1, 1000000, &episodes)) return EXIT_USAGE;
  if (opt(x, a, "--iterations")) return fprintf(stderr, "%s: --iterations is meanrev's\n", cmd), EXIT_USAGE;
  int N = (int)size, S = N * N;
  /* the demo's learner config (small, uniform replay), then the user's fields */
  learner_config_t c;
  learner_config_default(&c);
  char err[300], sd[16];
  snprintf(sd, sizeof sd, "%d", S);
  const char *base[][2] = {{"state_dim", sd},  {"branches", "2"},        {"atoms", "11"},     {"v_min", "-1"},
                           {"v_max", "1"},     {"trunk_h1", "64"},       {"trunk_h2", "64"},  {"value_hidden", "32"},
                           {"adv_hidden", "32"}, {"batch", "64"},        {"replay_capacity", "100000"},
                           {"prioritized", "0"}, {"lr", "0.001"},        {"target_period", "50"}};
  for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) learner_config_set(&c, base[i][0], base[i][1], NULL, 0);
  for (int i = 0; i < a->nfields; i++) {
    char k[128];
    size_t kl = strcspn(a->fields[i], "=");
    snprintf(k, sizeof k, "%.*s", (int)kl, a->fields[i]);
    if (learner_config_set(&c, k, a->fields[i] + kl + 1, err, sizeof err))
      return fprintf(stderr, "%s: %s\n", cmd, err), EXIT_USAGE;
  }
  if (c.state_dim != S || c.n_branches != 1 || c.branch_sizes[0] != 2)
    return fprintf(stderr, "%s: deepsea needs state_dim=%d and branches=2\n", cmd, S), EXIT_USAGE;
  if (learner_config_validate(&c, err, sizeof err)) return fprintf(stderr, "%s: %s\n", cmd, err), EXIT_USAGE;
  const char *fields[64];
  static char store[64][160];
  int nf = 0;
  for (int i = 0; i < learner_num_fields && nf < 64; i++, nf++) {
    char val[128];
    learner_config_get(&c, &learner_fields[i], val, sizeof val);
    snprintf(store[nf], sizeof store[nf], "%s=%s", learner_fields[i].name, val);
    fields[nf] = store[nf];
  }
  char name[72];
  int rc = demo_new_trainer(x, cmd, opt(x, a, "--name"), fields, nf, opt(x, a, "--backend"), name, sizeof name);
  if (rc) return rc;
  if (!x->json)
    printf("dqnctl demo: new trainer '%s' on the daemon, deepsea N=%d (%s exploration), %lld episodes\n", name, N,
           c.ensemble_k > 1 ? "ensemble heads" : c.noisy ? "NoisyNet" : "epsilon-greedy", episodes);
  deepsea_env_t env;
  deepsea_init(&env, N, c.seed);
  float *s = malloc(sizeof(float) * (size_t)(N + 1) * S), *r = malloc(sizeof(float) * (size_t)N);
  int32_t *act = malloc(sizeof(int32_t) * (size_t)N);
  uint8_t *done = malloc((size_t)N);
  int64_t *ep = malloc(sizeof(int64_t) * (size_t)N);
  if (!s || !r || !act || !done || !ep) {
    rc = EXIT_LOCAL;
    goto out;
  }
  int successes = 0, window = 0;
  double ret_sum = 0;
  for (long long e = 0; e < episodes && !rc; e++) {
    deepsea_reset(&env);
    deepsea_observe(&env, s);
    float eps = c.noisy || c.ensemble_k > 1 ? 0.0f : (e < episodes / 2 ? 1.0f - 0.95f * (float)e / (float)(episodes / 2 + 1) : 0.05f);
    double ret = 0;
    for (int t = 0; t < N && !rc; t++) {
      int crc = dqnd_act_episode(x->c, name, s + (size_t)t * S, 1, S, c.noisy, (uint64_t)e, &act[t], NULL, NULL, 0);
      if (crc) {
        rc = fail_rc(x, crc);
        break;
      }
      philox4_t d = philox_draw(c.seed, STREAM_DEEPSEA_EPS, (uint64_t)e, (uint32_t)t);
      if (philox_uniform(d.v[0]) < eps) act[t] = (int32_t)(d.v[1] & 1u);
      int fin = 0;
      r[t] = deepsea_step(&env, act[t], &fin);
      done[t] = (uint8_t)fin;
      ep[t] = e;
      ret += r[t];
      deepsea_observe(&env, s + (size_t)(t + 1) * S);
    }
    if (rc) break;
    /* transitions (s_t, a_t, r_t, s_t+1), the episode's last one terminal */
    learner_transitions_t tr = {N, s, act, r, s + S, done, ep};
    int crc = dqnd_submit(x->c, name, S, &tr, NULL);
    if (!crc) crc = dqnd_step(x->c, name, N, NULL);
    if (crc == 9) crc = 0; /* FAILED_PRECONDITION: not a batch in the replay yet */
    if (crc) {
      rc = fail_rc(x, crc);
      break;
    }
    successes += ret > 0.5;
    ret_sum += ret;
    if (++window == 100 || e + 1 == episodes) {
      if (x->json)
        print_json(json_pack("{s:I, s:f, s:f}", "episodes", (json_int_t)(e + 1), "success", (double)successes / window,
                             "mean_return", ret_sum / window));
      else
        printf("episodes %6lld  reached the reward in %5.1f%%  mean return %7.4f (optimal %.4f)\n", e + 1,
               100.0 * successes / window, ret_sum / window, deepsea_optimal_return(N));
      fflush(stdout);
      successes = window = 0;
      ret_sum = 0;
    }
  }
  if (!rc && !x->json)
    printf("dqnctl demo: trainer '%s' stays on the daemon (dqnctl destroy %s)\n", name, name);
out:
  free(s), free(r), free(act), free(done), free(ep);
  return rc;
}
