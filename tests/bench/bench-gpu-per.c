/*
 * bench-gpu-per — how the CUDA step's cost grows with the replay (issue 29
 * item 5): the `ref` config's step with PER (and, as the control, uniform
 * replay) at replay capacities 10^4, 10^6 and 10^7 — the PER sum tree is
 * log2(capacity) levels deep, so its sample and its priority update walk
 * 14, 20 and 24 levels — and learner_submit's throughput, transitions/s,
 * while the replay fills and once it is full (every row written over, its
 * priority set in the tree).
 *
 *   bench-gpu-per [batches [capacities [steps [json]]]]
 *   defaults: 64,256  10000,1000000,10000000  300  (no JSON)
 *
 * The transitions are random (philox), made once as a pool of 10,000 and
 * submitted in chunks of that size with the rewards shifted per chunk, so
 * the host's time to make them is not in the Submit figure. Step times are
 * Step(n) calls (the graph replayed n times, one sync), median of 5.
 * Exits 77 with no usable GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchutil.h"
#include "learner.h"
#include "philox.h"

enum { POOL = 10000 };

typedef struct {
  float *s, *s2, *r, *rr;
  int32_t *a;
  uint8_t *d;
} pool_t;

static void pool_make(pool_t *p, int S) {
  p->s = malloc(sizeof(float) * POOL * S), p->s2 = malloc(sizeof(float) * POOL * S);
  p->r = malloc(sizeof(float) * POOL), p->rr = malloc(sizeof(float) * POOL);
  p->a = malloc(sizeof(int32_t) * POOL), p->d = malloc(POOL);
  if (!p->s || !p->s2 || !p->r || !p->rr || !p->a || !p->d) {
    fprintf(stderr, "out of host memory\n");
    exit(1);
  }
  for (int i = 0; i < POOL * S; i += 4) {
    float g[4];
    philox_normal4(philox_draw(1, 70, 0, (uint32_t)i), g);
    for (int k = 0; k < 4; k++) p->s[i + k] = g[k], p->s2[i + k] = g[3 - k];
  }
  for (int i = 0; i < POOL; i++) {
    philox4_t u = philox_draw(1, 71, (uint64_t)i, 0);
    p->a[i] = (int32_t)philox_below(u.v[0], 81); /* 9 x 3 x 3 joint actions */
    p->r[i] = philox_uniform(u.v[1]) * 2 - 1;
    p->d[i] = philox_uniform(u.v[2]) < 0.01f;
  }
}

/* submits n transitions in chunks of POOL; returns the seconds spent in
 * learner_submit alone, or -1 on an error */
static double submit_n(learner_t *l, const pool_t *p, int64_t n, int64_t *chunk) {
  double t = 0;
  char err[256];
  for (int64_t done = 0; done < n; done += POOL, (*chunk)++) {
    int m = n - done < POOL ? (int)(n - done) : POOL;
    for (int i = 0; i < m; i++) p->rr[i] = p->r[i] + 1e-3f * (float)(*chunk % 97); /* not the same rows twice */
    learner_transitions_t tr = {m, p->s, p->a, p->rr, p->s2, p->d, NULL, NULL};
    double t0 = bench_now();
    if (learner_submit(l, &tr, err, sizeof err)) {
      fprintf(stderr, "submit: %s\n", err);
      return -1;
    }
    t += bench_now() - t0;
  }
  return t;
}

int main(int argc, char **argv) {
  char dev[256];
  bench_gpu_or_skip(dev, sizeof dev);
  const char *batches = argc > 1 ? argv[1] : "64,256";
  const char *caps = argc > 2 ? argv[2] : "10000,1000000,10000000";
  int steps = argc > 3 ? atoi(argv[3]) : 300;
  FILE *js = argc > 4 ? fopen(argv[4], "w") : NULL;
  if (argc > 4 && !js) {
    perror(argv[4]);
    return 1;
  }
  printf("device: %s\n", dev);
  if (js) fprintf(js, "{\"device\": \"%s\", \"steps\": %d, \"rows\": [", dev, steps);
  int first = 1;
  pool_t p;
  char clist[256], err[256];
  snprintf(clist, sizeof clist, "%s", caps);
  int S = 0;
  for (char *cs = strtok(clist, ","); cs; cs = strtok(NULL, ",")) {
    int64_t cap = atoll(cs);
    for (int per = 1; per >= 0; per--) {
      learner_config_t c;
      learner_config_default(&c);
      c.replay_capacity = cap;
      c.prioritized = per;
      if (!S) S = c.state_dim, pool_make(&p, S);
      /* Submit is timed on the first batch's learner: while it fills, then
       * into the full replay (a tenth of it more, at least 10^5 rows) */
      double tfill = -1, tfull = -1;
      const int64_t nfull = cap / 10 < 100000 ? 100000 : cap / 10;
      /* the capacities' strtok is in progress: walk the batches by hand */
      for (const char *q = batches; *q;) {
        int B = atoi(q);
        const char *comma = strchr(q, ',');
        q = comma ? comma + 1 : q + strlen(q);
        if (B <= 0) continue;
        learner_config_t cb = c;
        cb.batch = B;
        learner_t *l;
        if (learner_create(&cb, LEARNER_BACKEND_CUDA, &l, err, sizeof err)) {
          fprintf(stderr, "capacity %lld batch %d: %s\n", (long long)cap, B, err);
          return 1;
        }
        int64_t ch = 0;
        const double tf = submit_n(l, &p, cap, &ch);
        if (tf < 0) return 1;
        if (tfill < 0) {
          tfill = tf;
          if ((tfull = submit_n(l, &p, nfull, &ch)) < 0) return 1;
          printf("capacity %9lld %-7s submit: fill %.3g transitions/s, full %.3g transitions/s\n", (long long)cap,
                 per ? "PER" : "uniform", (double)cap / tfill, (double)nfull / tfull);
        }
        learner_stats_t st;
        double med = bench_step_time(l, 20, steps, 5, &st); /* capture + warm-up, then 5 calls */
        if (med < 0) return 1;
        printf("B=%5d capacity %9lld %-7s %8.1f us/step loss=%.4f\n", B, (long long)cap, per ? "PER" : "uniform",
               med * 1e6, st.loss_last);
        fflush(stdout);
        if (js)
          fprintf(js,
                  "%s\n {\"batch\": %d, \"replay_capacity\": %lld, \"prioritized\": %s, \"us_per_step\": %.2f, "
                  "\"submit_fill_per_s\": %.4g, \"submit_full_per_s\": %.4g}",
                  first ? "" : ",", B, (long long)cap, per ? "true" : "false", med * 1e6, (double)cap / tfill,
                  (double)nfull / tfull);
        first = 0;
        learner_destroy(l);
      }
    }
  }
  if (js) fprintf(js, "\n]}\n"), fclose(js);
  return 0;
}
