/* optim.c — see optim.h. */
#include "optim.h"

#include <math.h>
#include <string.h>

double grad_norm(const float *g, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += (double)g[i] * g[i];
  return sqrt(s);
}

float grad_clip_scale(double norm, float clip) {
  if (!(clip > 0)) return 1.0f;
  double c = clip / (norm + 1e-6);
  return c < 1 ? (float)c : 1.0f;
}

void adamw_update(float *p, const float *g, float *m, float *v, int64_t n, float scale, float lr, float b1,
                  float b2, float eps, float wd, uint64_t t) {
  float bc1 = (float)(1.0 - pow(b1, (double)t));
  float bc2_sqrt = (float)sqrt(1.0 - pow(b2, (double)t));
  float step_size = lr / bc1, decay = 1.0f - lr * wd;
  for (int64_t i = 0; i < n; i++) {
    float gi = g[i] * scale;
    m[i] = b1 * m[i] + (1.0f - b1) * gi;
    v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
    float denom = sqrtf(v[i]) / bc2_sqrt + eps;
    p[i] = p[i] * decay - step_size * m[i] / denom;
  }
}

void target_update(float *target, const float *online, int64_t n, float tau) {
  if (tau >= 1.0f) {
    memcpy(target, online, (size_t)n * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < n; i++) target[i] = tau * online[i] + (1.0f - tau) * target[i];
}
