/*
 * k1_pin_gen.c — writes tests/golden/k1pin/<name>.f32: the online then the
 * target parameters (little-endian float32) of each k1_pin.h configuration
 * after K1_PIN_STEPS steps. Built against the commit before the ensemble
 * existed (cc56e22), so test-state holds today's K = 1, attention-off step
 * to that commit's numbers:
 *
 *   git worktree add /tmp/old cc56e22
 *   (cd /tmp/old && meson setup b -Dcuda=disabled && meson compile -C b)
 *   gcc -O2 -std=c11 -I/tmp/old/kernels -I/tmp/old/b tests/golden/k1_pin_gen.c -Itests \
 *       /tmp/old/b/kernels/libdqnkernels.a /tmp/old/b/kernels/libdqnconfig.a -lopenblas -lm -lpthread -o k1gen
 *   OPENBLAS_NUM_THREADS=1 ./k1gen tests/golden/k1pin
 *
 * (It was run under each OpenBLAS core type the machine could execute; the
 * spread between them is in test-state's K1_PIN_TOL comment.)
 */
#include <stdio.h>

#include "k1_pin.h"

int main(int argc, char **argv) {
  if (argc != 2) return fprintf(stderr, "usage: k1gen DIR\n"), 2;
  for (int w = 0; w < K1_PIN_CONFIGS; w++) {
    char err[256], path[1024];
    float *p = NULL;
    int64_t P = 0;
    if (k1_pin_train(w, &p, &P, err, sizeof err)) return fprintf(stderr, "%s: %s\n", k1_pin_names[w], err), 1;
    snprintf(path, sizeof path, "%s/%s.f32", argv[1], k1_pin_names[w]);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, sizeof(float), 2 * (size_t)P, f) != 2 * (size_t)P || fclose(f))
      return fprintf(stderr, "cannot write %s\n", path), 1;
    printf("%s: %lld parameters x 2 -> %s\n", k1_pin_names[w], (long long)P, path);
    free(p);
  }
  return 0;
}
