/*
 * bench-cpu-step — time of one training step of the CPU learner on the `ref`
 * config (docs/learner.md §2-4) at several batch sizes. The replay is filled with
 * random transitions (never zeros), warmed up, then timed: median of 3 runs
 * of --steps steps. Prints a line per batch and, with --json, a JSON array.
 * Run it next to the PyTorch peer: tests/bench/run-cpu-bench.sh does both.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "benchutil.h"
#include "learner.h"
#include "philox.h"

int main(int argc, char **argv) {
  const char *batches = "64,256", *json = NULL;
  int steps = 200, per = 0, replay = 100000;
  static const struct option lo[] = {{"batches", 1, 0, 'b'}, {"steps", 1, 0, 's'}, {"per", 0, 0, 'p'},
                                     {"replay", 1, 0, 'r'},  {"json", 1, 0, 'j'},  {"help", 0, 0, 'h'},
                                     {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "b:s:pr:j:h", lo, NULL)) != -1) {
    switch (ch) {
    case 'b': batches = optarg; break;
    case 's': steps = atoi(optarg); break;
    case 'p': per = 1; break;
    case 'r': replay = atoi(optarg); break;
    case 'j': json = optarg; break;
    default:
      printf("usage: bench-cpu-step [--batches 64,256] [--steps N] [--per] [--replay N] [--json FILE]\n");
      return ch == 'h' ? 0 : 2;
    }
  }
  FILE *jf = json ? fopen(json, "w") : NULL;
  if (jf) fprintf(jf, "[");
  int first = 1;
  char list[256];
  snprintf(list, sizeof list, "%s", batches);
  for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
    learner_config_t c;
    learner_config_default(&c);
    c.batch = atoi(tok);
    c.replay_capacity = replay;
    c.prioritized = per;
    learner_t *l;
    char err[256];
    if (learner_create(&c, LEARNER_BACKEND_CPU, &l, err, sizeof err)) {
      fprintf(stderr, "bench: %s\n", err);
      return 1;
    }
    /* fill the replay with random transitions */
    const int chunk = 10000, S = c.state_dim;
    float *s = malloc(sizeof(float) * (size_t)chunk * S), *s2 = malloc(sizeof(float) * (size_t)chunk * S);
    float *r = malloc(sizeof(float) * chunk);
    int32_t *a = malloc(sizeof(int32_t) * chunk);
    uint8_t *d = malloc(chunk);
    for (int base = 0; base < replay; base += chunk) {
      for (int i = 0; i < chunk; i++) {
        for (int k = 0; k < S; k += 4) {
          float g[4], g2[4];
          philox_normal4(philox_draw(1, 50, (uint64_t)(base + i), (uint32_t)k), g);
          philox_normal4(philox_draw(1, 51, (uint64_t)(base + i), (uint32_t)k), g2);
          for (int q = 0; q < 4 && k + q < S; q++) s[(size_t)i * S + k + q] = g[q], s2[(size_t)i * S + k + q] = g2[q];
        }
        philox4_t u = philox_draw(1, 52, (uint64_t)(base + i), 0);
        a[i] = (int32_t)philox_below(u.v[0], 81);
        r[i] = philox_uniform(u.v[1]) * 2 - 1;
        d[i] = philox_uniform(u.v[2]) < 0.01f;
      }
      learner_transitions_t t = {chunk, s, a, r, s2, d, NULL, NULL};
      if (learner_submit(l, &t, err, sizeof err)) {
        fprintf(stderr, "bench: %s\n", err);
        return 1;
      }
    }
    free(s), free(s2), free(r), free(a), free(d);
    learner_stats_t st;
    double t = bench_step_time(l, 5, steps, 3, &st); /* warm-up, then 3 calls */
    if (t < 0) return 1;
    printf("B=%5d dqnd-cpu %-8s %9.1f us/step %9.1f steps/s loss=%.4f params=%lld\n", c.batch, per ? "per" : "uniform",
           t * 1e6, 1 / t, st.loss_last, (long long)learner_config_num_params(&c));
    fflush(stdout);
    if (jf)
      fprintf(jf, "%s\n {\"batch\": %d, \"mode\": \"dqnd-cpu-%s\", \"us_per_step\": %.2f, \"steps_per_s\": %.2f}",
              first ? "" : ",", c.batch, per ? "per" : "uniform", t * 1e6, 1 / t);
    first = 0;
    learner_destroy(l);
  }
  if (jf) {
    fprintf(jf, "\n]\n");
    fclose(jf);
  }
  return 0;
}
